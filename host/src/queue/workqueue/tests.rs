//! Queue semantics with paused Tokio time: timers fire exactly when due and waits that would
//! never end are cut short by `timeout`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use super::*;
use crate::queue::config::RateLimitConfig;
use crate::queue::metrics::tests::{sample, scrape};

type Queue = WorkQueue<&'static str>;

fn queue() -> Queue {
    WorkQueue::new("test", &QueueConfig::default(), &QueueMetrics::default()).unwrap()
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A long time, for "never": paused time skips straight to it.
const HOUR: Duration = Duration::from_secs(3600);

/// Asserts that no key is handed out within `wait`.
async fn assert_nothing_within(queue: &Queue, wait: Duration) {
    if let Ok(key) = timeout(wait, queue.get()).await {
        panic!("expected no key within {wait:?}, got {key:?}");
    }
}

/// Spawns a worker's `get` and returns once it is registered as waiting.
async fn spawn_get(queue: &Queue) -> JoinHandle<Option<&'static str>> {
    let waiting = queue.inner.lock().waiters.len();
    let worker = queue.clone();
    let handle = tokio::spawn(async move { worker.get().await });
    while queue.inner.lock().waiters.len() == waiting {
        tokio::task::yield_now().await;
    }
    handle
}

#[tokio::test(start_paused = true)]
async fn repeated_adds_are_handed_out_once() {
    let q = queue();
    q.add("a");
    q.add("b");
    q.add("a");
    q.add("a");
    assert_eq!(q.len(), 2);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    assert!(q.is_empty());
    assert_nothing_within(&q, HOUR).await;
}

#[tokio::test(start_paused = true)]
async fn keys_are_handed_out_in_insertion_order() {
    let q = queue();
    for key in ["c", "a", "d", "b"] {
        q.add(key);
    }
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(q.get().await.unwrap());
    }
    assert_eq!(order, ["c", "a", "d", "b"]);
}

#[tokio::test(start_paused = true)]
async fn waiting_workers_are_served_in_arrival_order() {
    let q = queue();
    let first = spawn_get(&q).await;
    let second = spawn_get(&q).await;
    let third = spawn_get(&q).await;
    q.add("x");
    q.add("y");
    q.add("z");
    assert_eq!(first.await.unwrap(), Some("x"));
    assert_eq!(second.await.unwrap(), Some("y"));
    assert_eq!(third.await.unwrap(), Some("z"));
}

#[tokio::test(start_paused = true)]
async fn key_re_added_while_processing_waits_for_done_then_comes_once() {
    let q = queue();
    let first = spawn_get(&q).await;
    let second = spawn_get(&q).await;
    q.add("a");
    assert_eq!(first.await.unwrap(), Some("a"));

    q.add("a");
    q.add("a");
    assert_eq!(q.len(), 0, "a key being processed is not queued");
    sleep(HOUR).await;
    assert!(
        !second.is_finished(),
        "second worker got a key held by the first"
    );

    q.done(&"a");
    assert_eq!(second.await.unwrap(), Some("a"));
    q.done(&"a");
    assert_nothing_within(&q, HOUR).await;
}

#[tokio::test(start_paused = true)]
async fn done_without_re_add_does_not_requeue() {
    let q = queue();
    q.add("a");
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    q.done(&"a");
    assert_nothing_within(&q, HOUR).await;
}

#[tokio::test(start_paused = true)]
async fn dropped_get_puts_its_key_back() {
    let q = queue();
    let mut pending = Box::pin(q.get());
    assert!(futures::poll!(&mut pending).is_pending());
    q.add("a");
    q.add("b");
    drop(pending);
    assert!(q.inner.lock().processing.is_empty());
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
}

#[tokio::test(start_paused = true)]
async fn add_after_delivers_at_the_delay_not_before() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", Duration::from_secs(1));
    assert_nothing_within(&q, ms(999)).await;
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn add_after_zero_adds_at_once() {
    let q = queue();
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn shorter_delay_wins_and_key_comes_once() {
    let q = queue();
    let start = Instant::now();
    q.add_after("a", Duration::from_secs(10));
    q.add_after("a", Duration::from_secs(2));
    q.add_after("a", Duration::from_secs(5));
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    q.done(&"a");
    assert_nothing_within(&q, HOUR).await;
}

#[tokio::test(start_paused = true)]
async fn add_after_on_a_queued_key_adds_nothing() {
    let q = queue();
    q.add("a");
    q.add_after("a", Duration::from_secs(1));
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    assert_nothing_within(&q, HOUR).await;
}

#[tokio::test(start_paused = true)]
async fn add_after_on_a_key_in_progress_requeues_it_later() {
    let q = queue();
    q.add("a");
    let start = Instant::now();
    assert_eq!(q.get().await, Some("a"));
    q.add_after("a", Duration::from_secs(30));
    q.done(&"a");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_backs_off_per_key_until_forgotten() {
    let q = queue();
    let mut delays = Vec::new();
    for _ in 0..4 {
        let start = Instant::now();
        q.add_rate_limited("a");
        assert_eq!(q.get().await, Some("a"));
        delays.push(start.elapsed());
        q.done(&"a");
    }
    assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40)]);
    assert_eq!(q.num_requeues(&"a"), 4);

    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    let start = Instant::now();
    q.add_rate_limited("a");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), ms(5));
}

#[tokio::test(start_paused = true)]
async fn burst_of_failures_is_spread_at_qps() {
    let config = QueueConfig {
        rate_limit: RateLimitConfig {
            qps: 10.0,
            burst: 2,
            ..RateLimitConfig::default()
        },
        ..QueueConfig::default()
    };
    let q: Queue = WorkQueue::new("test", &config, &QueueMetrics::default()).unwrap();
    let start = Instant::now();
    for key in ["k0", "k1", "k2", "k3", "k4"] {
        q.add_rate_limited(key);
    }
    let mut arrivals = Vec::new();
    for _ in 0..5 {
        let key = q.get().await.unwrap();
        arrivals.push((key, start.elapsed()));
    }
    assert_eq!(
        arrivals,
        [
            ("k0", ms(5)),
            ("k1", ms(5)),
            ("k2", ms(100)),
            ("k3", ms(200)),
            ("k4", ms(300)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn shut_down_hands_out_queued_keys_then_none_and_ignores_adds() {
    let q = queue();
    q.add("a");
    q.add("b");
    q.add_after("later", ms(10));
    q.shut_down();
    assert!(q.is_shutting_down());
    q.add("c");
    q.add_after("d", ms(1));
    q.add_rate_limited("e");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, None);
    sleep(HOUR).await;
    assert_eq!(q.get().await, None);
    assert_eq!(q.num_requeues(&"e"), 0);
}

#[tokio::test(start_paused = true)]
async fn shut_down_wakes_waiting_workers_with_none() {
    let q = queue();
    let worker = spawn_get(&q).await;
    q.shut_down();
    assert_eq!(worker.await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn key_re_added_before_shutdown_is_requeued_by_done() {
    let q = queue();
    q.add("a");
    assert_eq!(q.get().await, Some("a"));
    q.add("a");
    q.shut_down();
    q.done(&"a");
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_keys_in_flight() {
    let q = queue();
    q.add("a");
    q.add("b");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    sleep(HOUR).await;
    assert!(!drain.is_finished());
    q.done(&"a");
    sleep(HOUR).await;
    assert!(!drain.is_finished());
    q.done(&"b");
    timeout(ms(1), drain)
        .await
        .expect("drain returns once all keys are done")
        .unwrap();
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_returns_at_once_when_idle() {
    let q = queue();
    timeout(ms(1), q.shut_down_with_drain())
        .await
        .expect("nothing in flight");
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_a_scenario() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::new(&mut registry, &crate::metrics::SeriesLimit::default());
    let q: Queue = WorkQueue::new("plugin-a", &QueueConfig::default(), &metrics).unwrap();
    let other: Queue = WorkQueue::new("plugin-b", &QueueConfig::default(), &metrics).unwrap();
    let value = |series: &str| sample(&scrape(&registry), series);

    q.add("a");
    q.add("a");
    q.add("b");
    other.add("x");
    assert_eq!(value("workqueue_adds_total{name=\"plugin-a\"}"), Some(2.0));
    assert_eq!(value("workqueue_adds_total{name=\"plugin-b\"}"), Some(1.0));
    assert_eq!(value("workqueue_depth{name=\"plugin-a\"}"), Some(2.0));

    sleep(ms(300)).await;
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(value("workqueue_depth{name=\"plugin-a\"}"), Some(1.0));
    assert_eq!(
        value("workqueue_queue_duration_seconds_sum{name=\"plugin-a\"}"),
        Some(0.3)
    );
    q.add("a");
    assert_eq!(value("workqueue_depth{name=\"plugin-a\"}"), Some(2.0));
    q.add_rate_limited("a");
    q.add_rate_limited("c");
    assert_eq!(
        value("workqueue_retries_total{name=\"plugin-a\"}"),
        Some(2.0)
    );

    // `a` in flight since 0.3 s, `b` since 1.3 s; the periodic refresh at 2.3 s sees both.
    sleep(Duration::from_secs(1)).await;
    assert_eq!(q.get().await, Some("b"));
    sleep(ms(1250)).await;
    assert_eq!(
        value("workqueue_unfinished_work_seconds{name=\"plugin-a\"}"),
        Some(3.0)
    );
    assert_eq!(
        value("workqueue_longest_running_processor_seconds{name=\"plugin-a\"}"),
        Some(2.0)
    );

    q.done(&"a");
    q.done(&"b");
    assert_eq!(
        value("workqueue_unfinished_work_seconds{name=\"plugin-a\"}"),
        Some(0.0)
    );
    assert_eq!(
        value("workqueue_work_duration_seconds_count{name=\"plugin-a\"}"),
        Some(2.0)
    );
    assert_eq!(
        value("workqueue_work_duration_seconds_sum{name=\"plugin-a\"}"),
        Some(2.25 + 1.25)
    );
    // `a` was re-added while in flight, so done queued it again; `c` came due after 5 ms.
    assert_eq!(value("workqueue_depth{name=\"plugin-a\"}"), Some(2.0));
    assert_eq!(q.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_queue_stops_its_background_task() {
    let q = queue();
    q.add_after("a", HOUR);
    // Let the task park on its one-hour timer before the queue goes away.
    sleep(ms(1)).await;
    let task_alive = Arc::downgrade(&q.inner.wake);
    drop(q);
    sleep(ms(1)).await;
    assert!(
        task_alive.upgrade().is_none(),
        "background task still holds its wake-up handle"
    );
}

#[tokio::test(start_paused = true)]
async fn shutting_down_stops_the_background_task() {
    let q = queue();
    q.add_after("a", HOUR);
    sleep(ms(1)).await;
    assert_eq!(Arc::strong_count(&q.inner.wake), 2, "queue and its task");
    q.shut_down();
    sleep(ms(1)).await;
    assert_eq!(Arc::strong_count(&q.inner.wake), 1, "task exited");
}

#[test]
fn creating_a_queue_needs_a_runtime() {
    let created = WorkQueue::<u32>::new("test", &QueueConfig::default(), &QueueMetrics::default());
    assert!(matches!(created, Err(QueueError::NoRuntime)));
}

#[tokio::test]
async fn invalid_config_is_refused() {
    let config = QueueConfig {
        rate_limit: RateLimitConfig {
            burst: 0,
            ..RateLimitConfig::default()
        },
        ..QueueConfig::default()
    };
    let created = WorkQueue::<u32>::new("test", &config, &QueueMetrics::default());
    assert!(matches!(
        created,
        Err(QueueError::Config(ConfigError::ZeroBurst))
    ));
}

/// Real threads: many workers and an adder racing, and no key is ever held twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_workers_never_share_a_key() {
    let q: WorkQueue<u32> =
        WorkQueue::new("stress", &QueueConfig::default(), &QueueMetrics::default()).unwrap();
    let active = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let processed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (q, active, processed) = (q.clone(), active.clone(), processed.clone());
            tokio::spawn(async move {
                while let Some(key) = q.get().await {
                    assert!(active.lock().unwrap().insert(key), "key {key} held twice");
                    tokio::task::yield_now().await;
                    assert!(active.lock().unwrap().remove(&key));
                    processed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    q.done(&key);
                }
            })
        })
        .collect();
    for round in 0..2000u32 {
        q.add(round % 8);
        if round % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    while !(q.is_empty() && q.inner.lock().processing.is_empty()) {
        tokio::task::yield_now().await;
    }
    q.shut_down_with_drain().await;
    for worker in workers {
        worker.await.unwrap();
    }
    assert!(processed.load(std::sync::atomic::Ordering::Relaxed) >= 8);
    assert!(active.lock().unwrap().is_empty());
}
