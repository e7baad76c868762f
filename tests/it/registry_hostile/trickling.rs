//! A registry that never finishes an answer: headers, then a byte of body now and then, for as
//! long as the client stays. Shared by the integration tests and the host's own unit tests
//! (`host/src/plugin_objects/image.rs` includes this file), so it uses nothing but tokio.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// A running trickling registry: its address, and its counts of connections accepted and of
/// those the client closed.
pub struct Trickling {
    pub addr: String,
    pub accepted: watch::Receiver<usize>,
    pub closed: watch::Receiver<usize>,
}

/// Starts a registry on 127.0.0.1 that answers every request with a manifest of a million
/// bytes, sent a byte every `every` (each byte keeps a client's read timeout from firing: a
/// pull from it ends only at the client's own deadline).
pub async fn trickling_registry(every: Duration) -> Trickling {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (accepted_tx, accepted) = watch::channel(0usize);
    let (closed_tx, closed) = watch::channel(0usize);
    let closed_tx = Arc::new(closed_tx);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            accepted_tx.send_modify(|n| *n += 1);
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let (mut read, mut write) = stream.into_split();
                let mut buf = [0u8; 4096];
                let _ = read.read(&mut buf).await;
                let trickle = tokio::spawn(async move {
                    let head = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: 1000000\r\n\r\n";
                    if write.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    while write.write_all(b" ").await.is_ok() {
                        tokio::time::sleep(every).await;
                    }
                });
                // A read of 0 (or an error) is the client leaving.
                while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
                trickle.abort();
                closed_tx.send_modify(|n| *n += 1);
            });
        }
    });
    Trickling {
        addr,
        accepted,
        closed,
    }
}
