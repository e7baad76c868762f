//! Cluster access: connecting, resolving kinds, and one shared watch + cache per kind.

pub mod cache;
pub mod connect;
pub mod kinds;
pub mod selector;
pub mod watch;

pub use cache::{CacheWriter, CachedObject, Change, ChangeType, KindCache, ObjKey, OwnerRef};
pub use connect::{ClusterArgs, connect};
pub use kinds::{KindRegistry, ResolveError, ResolvedKind};
pub use watch::{WatchHandle, spawn_watch};
