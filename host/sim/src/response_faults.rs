//! Faults on a whole (non-watch) answer: the connection aborted half-way through the body
//! (a list's client must see an error, never a shorter list) or closed with no answer after
//! a while (a timeout).

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use bytes::Bytes;
use std::time::Duration;

fn reset() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "connection reset (injected fault)",
    )
}

/// `response` with only the first half of its body sent before the connection is aborted.
pub(crate) async fn cut_mid_body(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let half = bytes.slice(..bytes.len() / 2);
    // Without a length the body goes out chunked: the abort leaves it without its last chunk.
    parts.headers.remove(header::CONTENT_LENGTH);
    let stream = futures::stream::unfold(Some(Some(half)), |step| async move {
        match step? {
            Some(half) => Some((Ok::<Bytes, std::io::Error>(half), Some(None))),
            None => {
                // Pending once, so the first half is written before the abort.
                tokio::time::sleep(Duration::from_millis(10)).await;
                Some((Err(reset()), None))
            }
        }
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// After `wait`, a response whose body fails at once: the connection closes without an
/// answer (or with its head only), as when a server stops answering.
pub(crate) async fn timed_out(wait: Duration) -> Response {
    tokio::time::sleep(wait).await;
    let stream = futures::stream::once(async { Err::<Bytes, std::io::Error>(reset()) });
    Response::new(Body::from_stream(stream))
}
