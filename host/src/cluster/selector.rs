//! Kubernetes label selectors, as the cache's `list` import parses them: the API's own syntax,
//! defined in the embedded API server's crate ([`kubeplug_sim::selector`]) so that the host and
//! the sim share one parser, and re-exported here so host code names it where it always has.

pub use kubeplug_sim::selector::*;
