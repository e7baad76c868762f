//! Locking a std mutex whose holder panicked: every such lock here guards bookkeeping a
//! panic leaves usable (counters, maps of keys), so the host takes the data and keeps
//! serving the other plugins instead of spreading one panic to every caller.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data of a lock a panicking holder poisoned.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::lock;
    use std::sync::Mutex;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let m = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let _held = m.lock().unwrap();
            panic!("a holder panics");
        });
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
