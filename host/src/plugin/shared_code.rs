//! Compiled components in memory, by digest: plugin files with the same bytes (one plugin
//! run under several names and policies) share one copy of the machine code and memory
//! image instead of holding one each (2.8 MiB for image-pinner).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use wasmtime::component::Component;

/// One compiled component, held by every plugin loaded from its bytes; freed with the last.
pub(super) struct SharedCode(pub(super) Component);

/// One digest's place on the shelf. Loads of a digest hold its lock while they compile, so
/// plugins loaded at the same time from the same bytes compile once and share the result.
pub(super) type Slot = Arc<tokio::sync::Mutex<Weak<SharedCode>>>;

/// The components of the plugins alive now, by digest. Entries are weak: the shelf never
/// keeps code alive that no plugin uses.
#[derive(Default)]
pub(super) struct CodeShelf {
    by_digest: Mutex<HashMap<String, Slot>>,
}

impl CodeShelf {
    /// The slot of `digest`: lock it, take the code if still alive, or load and store it.
    /// Forgets the slots of code no plugin holds any more.
    pub(super) fn slot(&self, digest: &str) -> Slot {
        let mut shelf = self.by_digest.lock().unwrap_or_else(|p| p.into_inner());
        shelf.retain(|_, slot| slot.try_lock().map_or(true, |code| code.strong_count() > 0));
        shelf.entry(digest.to_string()).or_default().clone()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_digest.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code() -> Arc<SharedCode> {
        let engine = wasmtime::Engine::default();
        // The empty component, in binary (no text parser in this build).
        let empty = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
        Arc::new(SharedCode(Component::new(&engine, empty).unwrap()))
    }

    #[tokio::test]
    async fn shares_while_held_and_forgets_after() {
        let shelf = CodeShelf::default();
        let a = code();
        *shelf.slot("a").lock().await = Arc::downgrade(&a);
        let again = shelf.slot("a").lock().await.upgrade();
        assert!(again.is_some_and(|c| Arc::ptr_eq(&c, &a)));
        assert!(shelf.slot("b").lock().await.upgrade().is_none());
        drop(a);
        assert!(
            shelf.slot("a").lock().await.upgrade().is_none(),
            "kept code alive"
        );
        let b = code();
        *shelf.slot("b").lock().await = Arc::downgrade(&b);
        shelf.slot("b");
        assert_eq!(shelf.len(), 1, "a dead slot was not forgotten");
    }

    #[tokio::test]
    async fn a_slot_being_filled_is_kept() {
        let shelf = CodeShelf::default();
        let slot = shelf.slot("a");
        let filling = slot.lock().await;
        shelf.slot("b");
        assert!(
            Arc::ptr_eq(&shelf.slot("a"), &slot),
            "a slot in use was dropped"
        );
        drop(filling);
    }
}
