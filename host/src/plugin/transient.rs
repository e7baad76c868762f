//! Instantiation that survives a busy machine. Creating a sandbox can fail for reasons that
//! are the kernel's, not the plugin's: wasmtime builds a module's copy-on-write memory image
//! (a sealed memfd) at its first instantiation, and `F_ADD_SEALS` answers `EBUSY` while
//! pages of it are transiently pinned; `mmap`/`madvise` of a pool slot can answer `ENOMEM` or
//! `EAGAIN` under memory pressure; a signal can interrupt a syscall. Such a failure is
//! retried in a fresh store, a bounded number of times with a doubling back-off, so a plugin
//! never fails to load (nor a key counts a failure against it) because the machine was busy
//! for a moment. Anything else (a trap in a start function, a limit) fails at once.
//!
//! wasmtime does not cache a failed memory image (it is built again at the next
//! instantiation), so a retry really does try again.

use std::io::ErrorKind;
use std::time::Duration;

/// The most attempts at one instantiation (the first included).
pub const MAX_INSTANTIATE_ATTEMPTS: u32 = 5;

/// The wait before the second attempt; doubled before each further one (5, 10, 20, 40 ms:
/// 75 ms in all, short beside a call's default timeout, long beside a pinned page).
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(5);

/// The wait before attempt `next` (2 and up).
pub(crate) fn backoff(next: u32) -> Duration {
    FIRST_BACKOFF * 2u32.saturating_pow(next.saturating_sub(2).min(10))
}

/// Whether `err` was caused by a transient OS error: an `io::Error` somewhere in its chain
/// saying the resource is busy (`EBUSY`), to try again (`EAGAIN`), interrupted (`EINTR`), or
/// out of memory (`ENOMEM`, from a syscall: a guest's refused memory growth is no
/// `io::Error` but the limiter's record, and is never retried).
pub(crate) fn is_transient(err: &wasmtime::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(io_is_transient)
    })
}

fn io_is_transient(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::ResourceBusy
            | ErrorKind::WouldBlock
            | ErrorKind::Interrupted
            | ErrorKind::OutOfMemory
    )
}

#[cfg(test)]
thread_local! {
    /// Instantiations on this thread still to fail with an injected `EBUSY` (tests only:
    /// each test runs on its own thread, and a current-thread runtime instantiates there).
    static FAIL_NEXT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Whether the injected failures are permanent (not an OS error) instead.
    static FAIL_PERMANENTLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes the next `n` instantiations on this thread fail as wasmtime does when it cannot seal
/// a memory image (`EBUSY`), or, with `permanent`, with an error that is no OS error.
#[cfg(test)]
pub(crate) fn fail_next_instantiations(n: u32, permanent: bool) {
    FAIL_NEXT.set(n);
    FAIL_PERMANENTLY.set(permanent);
}

/// The injected failure for this instantiation, if one is due (always `None` outside tests).
pub(crate) fn injected() -> Option<wasmtime::Error> {
    #[cfg(test)]
    {
        let left = FAIL_NEXT.get();
        if left > 0 {
            FAIL_NEXT.set(left - 1);
            if FAIL_PERMANENTLY.get() {
                return Some(wasmtime::format_err!(
                    "injected permanent instantiation failure"
                ));
            }
            let busy = std::io::Error::from(ErrorKind::ResourceBusy);
            return Some(wasmtime::Error::from(busy).context("cannot add seals to the memfd"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_that_pass_are_transient_and_others_are_not() {
        let wrapped = |e: std::io::Error| wasmtime::Error::from(e).context("cannot add seals");
        for kind in [
            ErrorKind::ResourceBusy,
            ErrorKind::WouldBlock,
            ErrorKind::Interrupted,
            ErrorKind::OutOfMemory,
        ] {
            assert!(is_transient(&wrapped(kind.into())), "{kind:?}");
        }
        // As the kernel reports them (raw errno): EBUSY, EAGAIN, EINTR, ENOMEM.
        for errno in [16, 11, 4, 12] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert!(is_transient(&wrapped(e)), "errno {errno}");
        }
        assert!(!is_transient(&wrapped(ErrorKind::PermissionDenied.into())));
        assert!(!is_transient(&wasmtime::format_err!(
            "out of bounds memory access"
        )));
        assert!(!is_transient(
            &wasmtime::Trap::UnreachableCodeReached.into()
        ));
    }

    #[test]
    fn backoff_doubles_from_the_first() {
        assert_eq!(backoff(2), FIRST_BACKOFF);
        assert_eq!(backoff(3), FIRST_BACKOFF * 2);
        assert_eq!(backoff(5), FIRST_BACKOFF * 8);
        let total: Duration = (2..=MAX_INSTANTIATE_ATTEMPTS).map(backoff).sum();
        assert_eq!(total, Duration::from_millis(75));
    }
}
