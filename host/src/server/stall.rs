//! The status server's connections, with a send timeout: a client that accepts no byte for
//! the timeout while the server has bytes for it gets its connection closed. It works
//! below HTTP, so the live stream's WebSocket and Server-Sent Events clients share it (an
//! SSE body is pulled by hyper only while the socket takes bytes, so no code above the
//! socket would ever run for a stalled SSE client), and so does any other response. Each
//! connection closed so counts in `kubeplug_server_clients_disconnected_total`.

use axum::serve::Listener;
use prometheus_client::metrics::counter::Counter;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// Accepts TCP connections (without Nagle's delay: stream frames are small writes in quick
/// succession) and hands them out as [`GuardedStream`]s.
pub(super) struct GuardedListener {
    inner: TcpListener,
    send_timeout: Duration,
    disconnected: Counter,
}

impl GuardedListener {
    /// Connections accepted from `inner` fail their writes once no byte went out for
    /// `send_timeout`; `disconnected` counts the connections closed so.
    pub(super) fn new(
        inner: TcpListener,
        send_timeout: Duration,
        disconnected: Counter,
    ) -> GuardedListener {
        GuardedListener {
            inner,
            send_timeout,
            disconnected,
        }
    }
}

impl Listener for GuardedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (tcp, addr) = Listener::accept(&mut self.inner).await;
        let _ = tcp.set_nodelay(true);
        (
            GuardedStream {
                tcp,
                send_timeout: self.send_timeout,
                stalled: None,
                disconnected: self.disconnected.clone(),
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Listener::local_addr(&self.inner)
    }
}

/// A TCP connection whose writes fail with [`io::ErrorKind::TimedOut`] once the peer has
/// accepted nothing for the send timeout: hyper then drops the connection, and with it the
/// response body or WebSocket (and their stream subscription).
pub(super) struct GuardedStream {
    tcp: TcpStream,
    send_timeout: Duration,
    /// Running from the first write the socket could not take, until one goes through.
    stalled: Option<Pin<Box<Sleep>>>,
    /// Counts this connection once if the send timeout closes it.
    disconnected: Counter,
}

impl GuardedStream {
    /// Passes on a write's outcome; a write that is pending starts (or keeps) the stall clock,
    /// and fails once the clock has run out.
    fn guard<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.send_timeout;
        let clock = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(clock.as_mut().poll(cx));
        self.stalled = None;
        self.disconnected.inc();
        tracing::debug!(
            timeout_ms = timeout.as_millis() as u64,
            peer = ?self.tcp.peer_addr().ok(),
            "status server client accepted nothing for the send timeout: disconnecting"
        );
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client accepted nothing for the send timeout",
        )))
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.tcp).poll_write(cx, buf);
        self.guard(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.tcp).poll_flush(cx);
        self.guard(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connected pair: the guarded server side, and a client that reads only when told.
    async fn pair(send_timeout: Duration, disconnected: Counter) -> (GuardedStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut guarded = GuardedListener::new(listener, send_timeout, disconnected);
        let client = tokio::spawn(TcpStream::connect(addr));
        let (server, _) = Listener::accept(&mut guarded).await;
        (server, client.await.unwrap().unwrap())
    }

    #[tokio::test]
    async fn a_peer_that_accepts_nothing_fails_the_writes_after_the_timeout() {
        let disconnected = Counter::default();
        let (mut server, _client) = pair(Duration::from_millis(300), disconnected.clone()).await;
        let chunk = vec![b'x'; 64 * 1024];
        let start = std::time::Instant::now();
        let err = loop {
            if let Err(err) = server.write_all(&chunk).await {
                break err;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "never failed");
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert_eq!(disconnected.get(), 1, "the disconnection is counted once");
    }

    #[tokio::test]
    async fn a_peer_that_reads_slowly_is_kept() {
        let disconnected = Counter::default();
        // Each read comes 5 ms after the last; the timeout leaves room for a loaded machine
        // pausing the reader far longer than that.
        let (mut server, mut client) = pair(Duration::from_secs(5), disconnected.clone()).await;
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0;
            while total < 16 << 20 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                total += client.read(&mut buf).await.unwrap();
            }
        });
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..256 {
            server.write_all(&chunk).await.unwrap();
        }
        reader.await.unwrap();
        assert_eq!(disconnected.get(), 0);
    }
}
