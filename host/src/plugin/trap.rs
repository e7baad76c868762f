//! Turns what a failed call left behind (the wasmtime error, the limiter's record, the
//! guest's stderr) into a typed [`CallError`].

use super::error::CallError;
use super::imports::DeadlineExceeded;
use super::reply::cap_error;
use wasmtime::Trap;

/// Classifies a failed call. Memory refusal wins: a Rust guest that cannot allocate aborts
/// with an `unreachable` trap, which would otherwise look like a panic.
pub(crate) fn classify(
    err: &wasmtime::Error,
    refused_memory: Option<usize>,
    memory_cap: usize,
    stderr: &str,
    timeout: std::time::Duration,
) -> CallError {
    if err.downcast_ref::<DeadlineExceeded>().is_some() {
        return CallError::Timeout { limit: timeout };
    }
    if let Some(requested) = refused_memory {
        return CallError::OutOfMemory {
            requested,
            limit: memory_cap,
        };
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => CallError::Timeout { limit: timeout },
        Some(Trap::StackOverflow) => CallError::StackOverflow,
        Some(Trap::UnreachableCodeReached) => match panic_message(stderr) {
            Some(message) => CallError::Panic { message },
            None => CallError::Trap {
                message: "wasm `unreachable` instruction executed".into(),
            },
        },
        Some(Trap::MemoryOutOfBounds) => CallError::Trap {
            message: "out of bounds memory access (also how a Rust guest's stack overflow in linear memory shows)".into(),
        },
        Some(trap) => CallError::Trap {
            message: trap.to_string(),
        },
        None => CallError::Trap {
            message: cap_error(&format!("{err:#}")),
        },
    }
}

/// Extracts a Rust panic message from stderr: `thread '…' panicked at FILE:L:C:\nMESSAGE\nnote: …`.
pub(crate) fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.find("panicked at ")?;
    let rest = &stderr[start + "panicked at ".len()..];
    let (location, message) = match rest.split_once(":\n") {
        Some((loc, msg)) => (loc, msg),
        None => return Some(cap_error(rest.trim())),
    };
    let message = message.split("\nnote:").next().unwrap_or(message).trim();
    Some(cap_error(&format!("{message} (at {location})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_message_and_location() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:10:20:\nboom happened\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            panic_message(stderr).unwrap(),
            "boom happened (at src/lib.rs:10:20)"
        );
    }

    #[test]
    fn no_panic_no_message() {
        assert_eq!(panic_message("just some output"), None);
    }
}
