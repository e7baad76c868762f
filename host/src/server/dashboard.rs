//! `GET /`: the dashboard, one page embedded in the binary with its script
//! (`/dashboard.js`) and stylesheet (`/dashboard.css`), no external resource. It polls
//! `/plugins` for the plugins table, reads the live stream from `/api/wds/logs` over a
//! WebSocket, plots each plugin's last 15 minutes from `/api/plugins` as inline SVG, and
//! shows one plugin's view (`#plugin=NAME`, from `/api/plugins/NAME`); plugin text is
//! inserted as text, never HTML.

use axum::http::header;
use axum::response::IntoResponse;

/// The page, embedded at build time.
pub(super) const PAGE: &str = include_str!("dashboard.html");
/// Its script.
pub(super) const SCRIPT: &str = include_str!("dashboard.js");
/// Its stylesheet.
pub(super) const STYLE: &str = include_str!("dashboard.css");

/// The page's content security policy: scripts and styles only from its own origin (no
/// inline code, so a plugin-provided string that somehow became markup could not run), and
/// connections only to its own origin (`'self'` covers the page's own `ws:`/`wss:` in CSP
/// Level 3 browsers), so nothing can be loaded from or sent elsewhere.
pub(super) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Serves the page.
pub(super) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
}

/// Serves the page's script. Like the stylesheet it needs no token: it is the binary's
/// own code, the same for everyone, and a `<script src>` could not carry the token.
pub(super) async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// Serves the page's stylesheet.
pub(super) async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::{CONTENT_SECURITY_POLICY, PAGE, SCRIPT, STYLE};

    #[test]
    fn page_is_self_contained_and_inserts_text_only() {
        assert!(PAGE.starts_with("<!doctype html>"));
        // No external resource: works offline, no CDN; no inline code for the policy to allow.
        // The SVG namespace is a name, not a resource: nothing is fetched from it.
        let script = SCRIPT.replace("\"http://www.w3.org/2000/svg\"", "");
        for external in ["http://", "https://"] {
            for text in [PAGE, &script, STYLE] {
                assert!(!text.contains(external), "refers to {external}");
            }
        }
        let refs: Vec<&str> = PAGE
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|v| v.starts_with('/'))
            .collect();
        assert_eq!(refs, ["/dashboard.css", "/dashboard.js"]);
        for inline in ["<style", "style=", "<script>"] {
            assert!(!PAGE.contains(inline), "page has inline {inline}");
        }
        let handler = PAGE.split(" on").skip(1).find(|rest| {
            let name = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            name.len() < rest.len() && name.starts_with('=')
        });
        assert_eq!(handler, None, "page has an inline event handler");
        // Plugins are adversaries: their strings never go through the HTML parser.
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!SCRIPT.contains(sink), "script uses {sink}");
        }
        assert!(SCRIPT.contains("/api/wds/logs") && SCRIPT.contains("/plugins"));
        // The plots and the per-plugin view read the host's series, drawn as inline SVG.
        assert!(SCRIPT.contains("/api/plugins") && SCRIPT.contains("createElementNS"));
        assert!(PAGE.contains(r#"id="plots""#) && PAGE.contains(r#"id="plugin-view""#));
    }

    #[test]
    fn the_policy_allows_no_inline_code_and_only_its_own_origin() {
        let directive = |name: &str| {
            CONTENT_SECURITY_POLICY
                .split(';')
                .map(str::trim)
                .find_map(|d| d.strip_prefix(name)?.strip_prefix(' '))
                .unwrap_or_else(|| panic!("no {name}"))
        };
        assert_eq!(directive("script-src"), "'self'");
        assert_eq!(directive("style-src"), "'self'");
        assert_eq!(directive("connect-src"), "'self'");
        assert_eq!(directive("default-src"), "'none'");
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
