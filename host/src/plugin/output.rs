//! Bounded capture of a plugin's stdout and stderr.
//!
//! wasmtime-wasi's `MemoryOutputPipe` traps the guest once its capacity is reached; a plugin
//! that prints a little too much should not fail its reconcile, so this capture keeps the
//! first bytes and silently drops the rest (marking the capture truncated).

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    truncated: bool,
}

/// A bounded, shareable output buffer handed to WASI as stdout or stderr.
#[derive(Debug, Clone)]
pub(crate) struct CapturedOutput {
    cap: usize,
    inner: Arc<Mutex<Captured>>,
}

impl CapturedOutput {
    pub(crate) fn new(cap: usize) -> Self {
        CapturedOutput {
            cap,
            inner: Arc::default(),
        }
    }

    fn append(&self, data: &[u8]) {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let room = self.cap.saturating_sub(c.bytes.len());
        if data.len() > room {
            c.truncated = true;
        }
        c.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// The captured text (lossy UTF-8) and whether output was dropped.
    pub(crate) fn take(&self) -> (String, bool) {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let text = String::from_utf8_lossy(&c.bytes).into_owned();
        c.bytes.clear();
        (text, c.truncated)
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_and_marks_truncation() {
        let out = CapturedOutput::new(5);
        out.append(b"hel");
        out.append(b"lo world");
        assert_eq!(out.take(), ("hello".to_string(), true));
    }

    #[test]
    fn small_output_is_not_truncated() {
        let out = CapturedOutput::new(100);
        out.append(b"ok\n");
        assert_eq!(out.take(), ("ok\n".to_string(), false));
    }
}
