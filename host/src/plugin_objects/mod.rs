//! Plugins as Kubernetes objects: tenants run their own plugins through the API (`Plugin`
//! in their namespace, the module in a ConfigMap there or an image in a registry), bounded by the platform team's
//! cluster-scoped `PluginPolicy`s, with kstatus conditions that `kubectl wait` and Argo CD
//! can trust. This is a second source of instances beside the plugins directory; both feed
//! the reloader's planner, and an object-backed instance is named `<namespace>/<name>`, so
//! it never collides with a file-backed one.

mod compiles;
mod config;
mod crd_status;
mod crds;
mod echoes;
mod events;
mod follow;
mod forgery;
mod grant;
mod image;
mod module;
mod pass_state;
mod policies;
mod prefetch;
mod records;
mod refusal;
mod report;
mod resolve;
mod rollout;
mod service_account;
mod shadow;
mod slots;
mod source;
mod spec;
mod status;
mod statuses;
mod time_slice;
mod truth;

pub use compiles::MAX_CONCURRENT_COMPILES;
pub use config::{DEFAULT_MAX_PLUGINS, PluginObjectsConfig};
pub use crd_status::{Condition, ConditionStatus, PluginPolicyStatus, PluginStatus};
pub use crds::generated as generated_crds;
pub use grant::{Effective, effective};
pub use image::DEFAULT_POLL as DEFAULT_IMAGE_POLL;
pub use module::DEFAULT_MAX_MODULE_BYTES;
pub use records::{MAX_RECORD_BYTES, RECORD_KIND, RECORD_LABEL};
pub use refusal::{Reason, Refusal};
pub use slots::default_per_namespace;
pub use source::{PluginObjects, PluginObjectsTask, plugin_resource, policy_resource};
pub use spec::{
    ClusterPolicySpec, GROUP, PluginObject, PluginObjectSpec, PluginPolicyObject, VERSION,
};
pub use statuses::PluginStatuses;
