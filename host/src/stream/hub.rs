//! The hub every record goes through: a bounded ring of recent records (replayed to a new
//! client) and one bounded broadcast channel. A client that reads too slowly is not waited
//! for: it misses records and is told how many ([`Record::lagged`]), so the host and the
//! other clients never slow down and memory never grows with a stalled client.

use super::record::Record;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::broadcast;

/// Records kept for replay to new clients (`?since=N` asks for at most this many).
pub const REPLAY_CAPACITY: usize = 1000;

/// Records a client may fall behind before it starts missing them.
pub const HUB_CAPACITY: usize = 4096;

/// Publishes records to every connected client and keeps the recent ones.
#[derive(Debug, Clone)]
pub struct StreamHub {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    recent: Mutex<VecDeque<Arc<Record>>>,
    sender: broadcast::Sender<Arc<Record>>,
    clients: Gauge,
    dropped: Counter,
}

impl Default for StreamHub {
    fn default() -> Self {
        StreamHub::new(HUB_CAPACITY)
    }
}

/// The process's hub: the one the logging layer publishes to and the status server serves.
pub fn global() -> &'static StreamHub {
    static HUB: OnceLock<StreamHub> = OnceLock::new();
    HUB.get_or_init(StreamHub::default)
}

impl StreamHub {
    /// A hub whose clients may fall `capacity` records behind.
    pub fn new(capacity: usize) -> StreamHub {
        StreamHub {
            inner: Arc::new(Inner {
                recent: Mutex::new(VecDeque::with_capacity(REPLAY_CAPACITY)),
                sender: broadcast::channel(capacity.max(1)).0,
                clients: Gauge::default(),
                dropped: Counter::default(),
            }),
        }
    }

    /// Registers `kubeplug_stream_clients` and `kubeplug_stream_dropped_records_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubeplug_stream_clients",
            "Clients connected to the live stream",
            self.inner.clients.clone(),
        );
        registry.register(
            "kubeplug_stream_dropped_records",
            "Records stream clients missed because they read too slowly",
            self.inner.dropped.clone(),
        );
    }

    /// Sends `record` to every client and keeps it for replay.
    pub fn publish(&self, record: Record) {
        let record = Arc::new(record);
        {
            let mut recent = self.inner.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent.len() == REPLAY_CAPACITY {
                recent.pop_front();
            }
            recent.push_back(record.clone());
        }
        // No receiver is not an error: nobody is watching.
        let _ = self.inner.sender.send(record);
    }

    /// A new client: the recent records (oldest first) and the receiver of what follows,
    /// taken together so nothing falls between them. The client counts until the returned
    /// [`Subscription`] is dropped.
    pub fn subscribe(&self) -> Subscription {
        self.subscribe_as(true)
    }

    /// A subscription of the host's own (the dashboard's series keep each plugin's recent
    /// records): like [`StreamHub::subscribe`], but neither it nor the records it misses
    /// count in the clients' metrics.
    pub fn subscribe_internal(&self) -> Subscription {
        self.subscribe_as(false)
    }

    fn subscribe_as(&self, client: bool) -> Subscription {
        let recent = self.inner.recent.lock().unwrap_or_else(|p| p.into_inner());
        let receiver = self.inner.sender.subscribe();
        let replay = recent.iter().cloned().collect();
        drop(recent);
        if client {
            self.inner.clients.inc();
        }
        Subscription {
            replay,
            receiver,
            hub: self.inner.clone(),
            client,
        }
    }
}

/// One client's view of the hub.
#[derive(Debug)]
pub struct Subscription {
    /// The records kept before the client connected, oldest first.
    pub replay: Vec<Arc<Record>>,
    receiver: broadcast::Receiver<Arc<Record>>,
    hub: Arc<Inner>,
    /// Counted in the clients' metrics.
    client: bool,
}

impl Subscription {
    /// The next record, or a `lagged` record when this client missed some; `None` when the
    /// hub is gone.
    pub async fn next(&mut self) -> Option<Arc<Record>> {
        match self.receiver.recv().await {
            Ok(record) => Some(record),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                if self.client {
                    self.hub.dropped.inc_by(n);
                }
                Some(Arc::new(Record::lagged(n)))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.client {
            self.hub.clients.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{Level, RecordType};
    use serde_json::Map;

    fn record(i: usize) -> Record {
        Record::new(
            RecordType::Log,
            Level::Info,
            &format!("line {i}"),
            Map::new(),
        )
    }

    fn message(r: &Record) -> String {
        let v: serde_json::Value = serde_json::from_str(&r.json).unwrap();
        v["message"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn replay_is_bounded_and_live_records_follow_it() {
        let hub = StreamHub::new(16);
        for i in 0..REPLAY_CAPACITY + 5 {
            hub.publish(record(i));
        }
        let mut sub = hub.subscribe();
        assert_eq!(sub.replay.len(), REPLAY_CAPACITY);
        assert_eq!(message(&sub.replay[0]), "line 5");
        hub.publish(record(9999));
        assert_eq!(message(&sub.next().await.unwrap()), "line 9999");
    }

    #[tokio::test]
    async fn a_slow_client_gets_a_lagged_record_and_goes_on() {
        let mut registry = Registry::default();
        let hub = StreamHub::new(8);
        hub.register(&mut registry);
        let mut slow = hub.subscribe();
        let mut fast = hub.subscribe();
        for i in 0..20 {
            hub.publish(record(i));
            assert_eq!(message(&fast.next().await.unwrap()), format!("line {i}"));
        }
        let first = slow.next().await.unwrap();
        assert_eq!(first.kind, RecordType::Lagged);
        assert_eq!(message(&first), "dropped 12 records");
        assert_eq!(message(&slow.next().await.unwrap()), "line 12");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("kubeplug_stream_dropped_records_total 12"),
            "{text}"
        );
        assert!(text.contains("kubeplug_stream_clients 2"), "{text}");
        let internal = hub.subscribe_internal();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("kubeplug_stream_clients 2"), "{text}");
        drop(internal);
        drop(slow);
        drop(fast);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("kubeplug_stream_clients 0"), "{text}");
    }
}
