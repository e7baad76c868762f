use super::*;
use crate::metrics::per_plugin_view;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, prometheus_client::encoding::EncodeLabelSet)]
struct Result {
    result: &'static str,
}

const OK: Result = Result { result: "ok" };

/// A registry holding counter family `kubeplug_c` following `limit`.
fn counters(limit: &SeriesLimit) -> (Registry, PluginFamily<Result, Counter>) {
    let mut registry = Registry::default();
    let family = PluginFamily::new("plugin", Counter::default);
    family.limit_by(limit);
    registry.register("kubeplug_c", "a test counter", family.clone());
    (registry, family)
}

fn scrape(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// The value of the sample whose name and labels are exactly `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// How many samples of `name` the text holds.
fn series_of(text: &str, name: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .count()
}

/// Starts `plugin` with `limit` and counts `n` of its reconciles.
fn run(limit: &SeriesLimit, family: &PluginFamily<Result, Counter>, plugin: &str, n: u64) {
    limit.started(plugin);
    family.get_or_create(plugin, &OK).inc_by(n);
}

#[test]
fn below_the_limit_every_plugin_has_its_series() {
    let limit = SeriesLimit::new(2);
    let (registry, family) = counters(&limit);
    run(&limit, &family, "a/one", 1);
    run(&limit, &family, "b/two", 2);
    run(&limit, &family, "file", 3);
    let text = scrape(&registry);
    for (series, value) in [
        (r#"kubeplug_c_total{plugin="a/one",result="ok"}"#, 1.0),
        (r#"kubeplug_c_total{plugin="b/two",result="ok"}"#, 2.0),
        (r#"kubeplug_c_total{plugin="file",result="ok"}"#, 3.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    assert!(!text.contains("/*"), "{text}");
}

#[test]
fn past_the_limit_series_are_per_namespace_and_bounded_by_them() {
    let limit = SeriesLimit::new(100);
    let (registry, family) = counters(&limit);
    for i in 0..1000 {
        run(&limit, &family, &format!("ns-{}/p-{i}", i % 10), 1);
    }
    run(&limit, &family, "file", 7);
    let text = scrape(&registry);
    assert_eq!(series_of(&text, "kubeplug_c_total"), 11, "{text}");
    for ns in 0..10 {
        let series = format!(r#"kubeplug_c_total{{plugin="ns-{ns}/*",result="ok"}}"#);
        assert_eq!(sample(&text, &series), Some(100.0), "{series} in\n{text}");
    }
    assert_eq!(
        sample(&text, r#"kubeplug_c_total{plugin="file",result="ok"}"#),
        Some(7.0),
        "plugin files keep their own"
    );
    let own = per_plugin_view(|| scrape(&registry));
    assert_eq!(
        series_of(&own, "kubeplug_c_total"),
        1001,
        "the host's own view"
    );
}

#[test]
fn a_counter_keeps_counting_across_the_switch_and_past_removals() {
    let limit = SeriesLimit::new(1);
    let (registry, family) = counters(&limit);
    run(&limit, &family, "a/one", 5);
    let one = r#"kubeplug_c_total{plugin="a/one",result="ok"}"#;
    let summed = r#"kubeplug_c_total{plugin="a/*",result="ok"}"#;
    assert_eq!(sample(&scrape(&registry), one), Some(5.0));
    run(&limit, &family, "a/two", 1);
    let text = scrape(&registry);
    assert_eq!(sample(&text, one), None, "{text}");
    assert_eq!(sample(&text, summed), Some(6.0), "{text}");
    family.get_or_create("a/one", &OK).inc();
    assert_eq!(sample(&scrape(&registry), summed), Some(7.0));
    // A plugin going away leaves its counts in the sum: never backwards for rate().
    limit.stopped("a/one");
    family.remove("a/one");
    run(&limit, &family, "a/three", 0);
    assert_eq!(sample(&scrape(&registry), summed), Some(7.0));
    family.get_or_create("a/two", &OK).inc();
    assert_eq!(sample(&scrape(&registry), summed), Some(8.0));
    // Back under the limit: per plugin again, the removed plugin gone for good.
    limit.stopped("a/three");
    family.remove("a/three");
    let text = scrape(&registry);
    assert_eq!(sample(&text, one), None, "{text}");
    assert_eq!(
        sample(&text, r#"kubeplug_c_total{plugin="a/two",result="ok"}"#),
        Some(2.0)
    );
    // The namespace's last plugin gone: nothing of it is kept.
    limit.stopped("a/two");
    family.remove("a/two");
    assert!(family.is_empty(), "{:?}", family.inner.retired);
    assert!(!scrape(&registry).contains("a/"));
}

#[test]
fn zero_sums_every_namespaced_plugin_at_once() {
    let limit = SeriesLimit::new(0);
    let (registry, family) = counters(&limit);
    run(&limit, &family, "a/one", 2);
    let text = scrape(&registry);
    assert_eq!(
        sample(&text, r#"kubeplug_c_total{plugin="a/*",result="ok"}"#),
        Some(2.0),
        "{text}"
    );
}

#[test]
fn histograms_add_up_and_gauges_merge_their_way() {
    static BOUNDS: [f64; 2] = [0.1, 1.0];
    let limit = SeriesLimit::new(0);
    let mut registry = Registry::default();
    let histograms: PluginFamily<NoLabels, BucketHistogram> =
        PluginFamily::new("plugin", || BucketHistogram::new(&BOUNDS));
    let longest: PluginFamily<NoLabels, Gauge<f64, AtomicU64>> =
        PluginFamily::with_merge("name", Gauge::default, |a, b| *a = a.max(*b));
    let depth: PluginFamily<NoLabels, Gauge> = PluginFamily::new("name", Gauge::default);
    histograms.limit_by(&limit);
    longest.limit_by(&limit);
    depth.limit_by(&limit);
    registry.register("kubeplug_h", "h", histograms.clone());
    registry.register("kubeplug_longest", "l", longest.clone());
    registry.register("kubeplug_depth", "d", depth.clone());
    for (plugin, seconds, keys) in [("a/one", 0.05, 3), ("a/two", 0.5, 4)] {
        limit.started(plugin);
        histograms.get_or_create(plugin, &NoLabels).observe(seconds);
        longest.get_or_create(plugin, &NoLabels).set(seconds);
        depth.get_or_create(plugin, &NoLabels).set(keys);
    }
    let text = scrape(&registry);
    for (series, value) in [
        (r#"kubeplug_h_bucket{le="0.1",plugin="a/*"}"#, 1.0),
        (r#"kubeplug_h_bucket{le="+Inf",plugin="a/*"}"#, 2.0),
        (r#"kubeplug_h_count{plugin="a/*"}"#, 2.0),
        (r#"kubeplug_longest{name="a/*"}"#, 0.5),
        (r#"kubeplug_depth{name="a/*"}"#, 7.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
}

#[test]
fn an_unlimited_family_is_per_plugin_and_forgets_removed_plugins() {
    let family: PluginFamily<Result, Counter> = PluginFamily::new("plugin", Counter::default);
    family.get_or_create("a/one", &OK).inc();
    family.remove("a/one");
    assert!(family.get("a/one", &OK).is_none());
    assert!(family.is_empty());
}
