//! Kubernetes label selectors, as the cache's `list` import parses them: the API's own syntax,
//! defined in the embedded API server's crate ([`kubeplug_sim::selector`]) so that the host and
//! the sim share one parser, with its limits ([`MAX_SELECTOR_BYTES`]) beside it. Re-exported
//! with the contract's vocabulary, so the cache and the imports that bound a read's arguments
//! name it from below both.

pub use kubeplug_sim::selector::*;
