//! Kubernetes label selectors, as the cache's `list` import parses them: the API's own syntax,
//! defined in the vocabulary crate below the host and the embedded API server
//! ([`kubeplug_vocab::selector`]) so that both share one parser, with its limits ([`MAX_SELECTOR_BYTES`]) beside it. Re-exported
//! with the contract's vocabulary, so the cache and the imports that bound a read's arguments
//! name it from below both.

pub use kubeplug_vocab::selector::*;
