//! Stream-level faults of one watch: closed after K events, stalled after K events (held
//! open, silent, until the client gives up), aborted after K events (a connection reset
//! mid-body), or every line delayed by D ms (in order, so never reordered per object).

use super::faults::StallGuard;
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What goes wrong with one watch stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFault {
    /// End cleanly after this many events.
    Close(u64),
    /// Go silent after this many events until the client leaves.
    Stall(u64),
    /// Abort the connection after this many events.
    Reset(u64),
    /// Send every line this much later.
    Delay(Duration),
}

/// One piece of a watch body; an error aborts the connection (no terminating chunk).
pub(crate) type Chunk = Result<Bytes, std::io::Error>;

/// What the watch does after a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Keep going.
    Continue,
    /// End the stream (the client left, or a close or reset fault ended it).
    End,
    /// Go silent: a stall fault's moment came.
    Stall,
}

enum Sink {
    Direct(mpsc::Sender<Chunk>),
    Delayed(mpsc::Sender<(Instant, Bytes)>, Duration),
}

/// Where a watch writes its lines, with its fault applied.
pub(crate) struct Outlet {
    sink: Sink,
    /// The real channel (also the delayed sink's destination), kept for resets.
    tx: mpsc::Sender<Chunk>,
    fault: Option<WatchFault>,
    events: u64,
    stalled: Arc<AtomicU64>,
}

impl Outlet {
    /// Writes into `tx`; a delay fault starts a task that forwards each line when due.
    pub(crate) fn new(
        tx: mpsc::Sender<Chunk>,
        fault: Option<WatchFault>,
        stalled: Arc<AtomicU64>,
    ) -> Self {
        let sink = match fault {
            Some(WatchFault::Delay(delay)) => {
                let (delayed_tx, delayed_rx) = mpsc::channel(1024);
                tokio::spawn(forward(delayed_rx, tx.clone()));
                Sink::Delayed(delayed_tx, delay)
            }
            _ => Sink::Direct(tx.clone()),
        };
        Self {
            sink,
            tx,
            fault,
            events: 0,
            stalled,
        }
    }

    /// Whether the fault fires before any event (K = 0).
    pub(crate) async fn begin(&mut self) -> Next {
        self.after_events().await
    }

    /// Sends an event line (counted for the K of a fault).
    pub(crate) async fn event(&mut self, chunk: Bytes) -> Next {
        if !self.send(chunk).await {
            return Next::End;
        }
        self.events += 1;
        self.after_events().await
    }

    /// Sends a line that is not an event (a bookmark).
    pub(crate) async fn other(&mut self, chunk: Bytes) -> Next {
        if self.send(chunk).await {
            Next::Continue
        } else {
            Next::End
        }
    }

    async fn send(&mut self, chunk: Bytes) -> bool {
        match &self.sink {
            Sink::Direct(tx) => tx.send(Ok(chunk)).await.is_ok(),
            Sink::Delayed(tx, delay) => tx.send((Instant::now() + *delay, chunk)).await.is_ok(),
        }
    }

    async fn after_events(&mut self) -> Next {
        match self.fault {
            Some(WatchFault::Close(k)) if self.events >= k => Next::End,
            Some(WatchFault::Stall(k)) if self.events >= k => Next::Stall,
            Some(WatchFault::Reset(k)) if self.events >= k => {
                let reset = std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "connection reset (injected fault)",
                );
                let _ = self.tx.send(Err(reset)).await;
                Next::End
            }
            _ => Next::Continue,
        }
    }

    /// Resolves when the client has gone.
    pub(crate) async fn closed(&self) {
        match &self.sink {
            Sink::Direct(tx) => tx.closed().await,
            Sink::Delayed(tx, _) => tx.closed().await,
        }
    }

    /// Holds the stream open and silent until the client leaves or `until` resolves (the
    /// sim stops or drops every watch); counted in `stalledWatches` meanwhile.
    pub(crate) async fn stall(&self, until: impl Future<Output = ()>) {
        let _guard = StallGuard::new(self.stalled.clone());
        tokio::select! {
            _ = self.closed() => {}
            _ = until => {}
        }
    }
}

/// Forwards delayed lines in order, each when it is due.
async fn forward(mut rx: mpsc::Receiver<(Instant, Bytes)>, tx: mpsc::Sender<Chunk>) {
    loop {
        let (due, chunk) = tokio::select! {
            next = rx.recv() => match next {
                Some(next) => next,
                None => return,
            },
            _ = tx.closed() => return,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            _ = tx.closed() => return,
        }
        if tx.send(Ok(chunk)).await.is_err() {
            return;
        }
    }
}
