//! Cluster access, the first stages of the data flow: connecting, resolving kinds, one
//! list+watch per kind (shared by every plugin that needs it) filling that kind's cache, and
//! the plugins' read view of the caches.

pub mod access_review;
pub mod cache;
mod cache_objects;
pub mod connect;
pub mod feed;
pub mod kinds;
pub mod principal;
pub mod watch;
pub mod watched;
mod watches;

pub use access_review::{AccessReviewer, KubeAccessReviewer, ResourceAccess, ReviewError};
pub use cache::{
    CacheWriter, CachedObject, Change, ChangeType, KindCache, ObjKey, OwnerRef,
    strip_managed_fields,
};
pub use cache_objects::{CacheObjects, CallObjects, NamespaceFilter};
pub use connect::{ClusterArgs, connect, connect_as};
pub use feed::{Feed, Routed};
pub use kinds::{KindRegistry, ResolveError, ResolvedKind};
pub use principal::{DEFAULT_SERVICE_ACCOUNT, Principal, PrincipalError};
pub use watch::{DEFAULT_WATCH_TIMEOUT, WatchHandle, WatchSettings, spawn_watch};
pub use watched::WatchedObject;
pub use watches::WatchScope;
pub(crate) use watches::Watches;
