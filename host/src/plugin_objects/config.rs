//! How the API source of plugin instances behaves: its bounds (module size, Plugins per
//! host and per namespace, compiles at once), its timings and where it keeps its records.

use super::compiles::MAX_CONCURRENT_COMPILES;
use std::time::Duration;

/// The default most Plugin objects one host runs.
pub const DEFAULT_MAX_PLUGINS: usize = 256;

/// How the API source behaves.
#[derive(Debug, Clone)]
pub struct PluginObjectsConfig {
    /// The largest module accepted, in bytes.
    pub max_module_bytes: usize,
    /// A pass at least this often (namespace labels, counts in status).
    pub resync: Duration,
    /// How often to look whether the CRDs are served, until they are.
    pub crd_poll: Duration,
    /// This replica's name, shown as the runner in status.
    pub identity: String,
    /// Counts alone are written to status at most this often.
    pub counts_every: Duration,
    /// The most Plugin objects this host runs; the oldest run, newer ones are refused
    /// (`TooManyPlugins`), so tenants together cannot exhaust the host. Plugins that cannot
    /// load hold no slot.
    pub max_plugins: usize,
    /// The most Plugin objects of one namespace this host runs (`None`: a quarter of
    /// `max_plugins`, see [`default_per_namespace`](super::default_per_namespace)), so one
    /// tenant's flood is refused for itself while another tenant's Plugin loads.
    pub max_plugins_per_namespace: Option<usize>,
    /// The most modules compiled at once, host-wide (each namespace one at a time, the
    /// namespaces served in turn).
    pub max_compiles: usize,
    /// The registry client for `spec.module.image` (None: images are refused).
    pub registries: Option<crate::oci::Registries>,
    /// How often a tag is resolved again.
    pub image_poll: Duration,
    /// The signatures every image must carry (`--verification-config`).
    pub verification: Option<crate::oci::verification::VerificationConfig>,
    /// How long an answer about a ServiceAccount's rights is believed.
    pub access_ttl: Duration,
    /// The host's own namespace (`--host-namespace`), where it keeps each Plugin's status
    /// record; tenants must have no rights there.
    pub host_namespace: String,
}

impl Default for PluginObjectsConfig {
    fn default() -> Self {
        PluginObjectsConfig {
            max_module_bytes: super::module::DEFAULT_MAX_MODULE_BYTES,
            resync: Duration::from_secs(30),
            crd_poll: Duration::from_secs(10),
            identity: "kubeplug".into(),
            counts_every: Duration::from_secs(30),
            max_plugins: DEFAULT_MAX_PLUGINS,
            max_plugins_per_namespace: None,
            max_compiles: MAX_CONCURRENT_COMPILES,
            registries: None,
            image_poll: super::image::DEFAULT_POLL,
            verification: None,
            access_ttl: crate::cluster::access_review::DEFAULT_TTL,
            host_namespace: "default".into(),
        }
    }
}
