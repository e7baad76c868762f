//! Why an instance could not start, or could not get a new revision.

use super::instance::{InstanceName, InvalidName};
use crate::contract::KindRef;

/// An instance that could not start or get a new revision; a revision already running keeps
/// running, and other running plugins are unaffected.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The API server does not serve a kind the plugin reconciles, owns or may read.
    #[error("plugin {plugin}: the API server does not serve {kind}: {source}")]
    KindNotServed {
        /// The instance.
        plugin: InstanceName,
        /// The kind its watch could not start for.
        kind: KindRef,
        /// What discovery or the list said.
        #[source]
        source: Box<kube::Error>,
    },
    /// Its policy selects namespaces by label, but Namespaces cannot be watched.
    #[error(
        "plugin {plugin}: its policy selects namespaces by label, but Namespaces cannot be watched: {source}"
    )]
    NamespacesUnwatchable {
        /// The instance.
        plugin: InstanceName,
        /// Why the Namespace watch could not start.
        #[source]
        source: Box<kube::Error>,
    },
    /// An instance with this name already runs
    /// ([`Controller::add`](crate::controller::Controller::add)).
    #[error("plugin {0}: another plugin with the same name is running")]
    DuplicateName(InstanceName),
    /// Its instance name cannot name a queue, a field manager and a policy file.
    #[error("plugin instance name {0}")]
    InvalidName(#[from] InvalidName),
    /// Its policy pins a digest (`spec.plugin.sha256`) the plugin file does not have.
    #[error(
        "plugin {plugin}: the file's sha256 is {actual}, but its policy {policy} pins {pinned} (spec.plugin.sha256); not started (a running version keeps running)"
    )]
    DigestMismatch {
        /// The instance.
        plugin: InstanceName,
        /// The policy file.
        policy: String,
        /// The digest the policy pins.
        pinned: String,
        /// The file's digest.
        actual: String,
    },
    /// It declares it reconciles a kind its policy does not name: the plugin would be handed
    /// objects (for example Secrets) the operator never granted.
    #[error(
        "plugin {plugin}: it reconciles {kind}, which its policy {policy} does not grant (add the kind to spec.reads or to a rule)"
    )]
    KindNotGranted {
        /// The instance.
        plugin: InstanceName,
        /// The kind it reconciles.
        kind: KindRef,
        /// The policy file.
        policy: String,
    },
    /// Its workqueue could not be built (bad queue settings).
    #[error("plugin {plugin}: cannot build its workqueue: {source}")]
    Queue {
        /// The instance.
        plugin: InstanceName,
        /// Why the queue could not be built.
        #[source]
        source: crate::queue::QueueError,
    },
    /// The controller is shutting down.
    #[error("the controller is shutting down")]
    ShuttingDown,
}
