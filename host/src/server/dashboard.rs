//! `GET /`: the dashboard, one self-contained page (inline CSS and JS, no external resource)
//! embedded in the binary. It polls `/plugins` for the plugins table and reads the live
//! stream from `/api/wds/logs` over a WebSocket; plugin text is inserted as text, never HTML.

use axum::http::header;
use axum::response::IntoResponse;

/// The page, embedded at build time.
pub(super) const PAGE: &str = include_str!("dashboard.html");

/// Serves the page. The content security policy keeps it to its own inline code and its own
/// origin: a plugin-provided string that somehow became markup still could not load or send
/// anything elsewhere.
pub(super) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self' ws: wss:; img-src 'self' data:; base-uri 'none'; form-action 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
}

#[cfg(test)]
mod tests {
    use super::PAGE;

    #[test]
    fn page_is_self_contained_and_inserts_text_only() {
        assert!(PAGE.starts_with("<!doctype html>"));
        // No external resource: works offline, no CDN.
        for external in ["http://", "https://", "src=\"", "<link"] {
            assert!(!PAGE.contains(external), "page refers to {external}");
        }
        // Plugins are adversaries: their strings never go through the HTML parser.
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
        ] {
            assert!(!PAGE.contains(sink), "page uses {sink}");
        }
        assert!(PAGE.contains("/api/wds/logs") && PAGE.contains("/plugins"));
    }
}
