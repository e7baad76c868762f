//! Where a pull may go and what it may carry. A pull starts at the registry its reference
//! names; the registry then points elsewhere (a token realm, a blob redirect), and a tenant's
//! registry may point anywhere, an internal service included. So each hop is checked before
//! any request is sent to it: the same scheme, host and port as the registry, or a host the
//! [`Reach`] lists (for a Plugin object: the registry hosts of `spec.modules.images` of the
//! PluginPolicies applying to its namespace); never from https down to plain http. And each
//! entry of the credentials goes only to its own host: a realm on another host gets that
//! host's entry, or none.

use super::registry::Credentials;
use oci_client::secrets::RegistryAuth;
use reqwest::Url;

/// The most redirects followed in one request (reqwest's own default is 10).
pub const MAX_REDIRECTS: usize = 5;

/// The hosts a pull may contact besides the registry its reference names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Any host: the operator's own commands and flags (`--plugin oci://`, `kubeplug pull`),
    /// whose registries the operator chose. Downgrades to plain http are still refused.
    Any,
    /// Only these registry hosts (`HOST` or `HOST:PORT`, lowercase).
    Listed(Vec<String>),
}

/// The credentials a pull may send and the hosts it may contact.
#[derive(Debug, Clone)]
pub struct Access {
    /// Credentials by registry host; an entry is sent only to its own host.
    pub credentials: Credentials,
    /// Where token realms and redirects may point.
    pub reach: Reach,
}

impl Access {
    /// No credentials, any host: the operator's pulls without `--registry-config`.
    pub fn anonymous() -> Access {
        Access {
            credentials: Credentials::default(),
            reach: Reach::Any,
        }
    }

    /// The credentials for `registry` (`HOST[:PORT]` as a reference names it).
    pub fn auth_for(&self, registry: &str) -> RegistryAuth {
        self.credentials.auth_for(registry)
    }

    /// The credentials for the host `url` names: its entry as `HOST:PORT`, or as `HOST` when
    /// the URL has its scheme's default port. Anonymous when there is none.
    pub fn auth_for_url(&self, url: &Url) -> RegistryAuth {
        let Some(host) = url.host_str() else {
            return RegistryAuth::Anonymous;
        };
        match url.port() {
            Some(port) => self.credentials.auth_for(&format!("{host}:{port}")),
            None => match self.credentials.auth_for(host) {
                RegistryAuth::Anonymous => match url.port_or_known_default() {
                    Some(port) => self.credentials.auth_for(&format!("{host}:{port}")),
                    None => RegistryAuth::Anonymous,
                },
                auth => auth,
            },
        }
    }

    /// Whether a request that began at `origin` (the registry's own URL) may go from
    /// `previous` on to `next`: an http(s) URL, no downgrade from https to http, and the
    /// registry itself or a host the reach lists.
    pub fn check_hop(&self, origin: &Url, previous: &Url, next: &Url) -> Result<(), HopRefused> {
        if !matches!(next.scheme(), "http" | "https") || next.host_str().is_none() {
            return Err(HopRefused::NotHttp);
        }
        if next.scheme() == "http" && (previous.scheme() == "https" || origin.scheme() == "https") {
            return Err(HopRefused::Downgrade {
                host: authority(next),
            });
        }
        if same_origin(origin, next) {
            return Ok(());
        }
        match &self.reach {
            Reach::Any => Ok(()),
            Reach::Listed(hosts) if hosts.iter().any(|h| host_matches(h, next)) => Ok(()),
            Reach::Listed(_) => Err(HopRefused::Unlisted {
                host: authority(next),
            }),
        }
    }
}

/// Why a hop was not taken. Each names at most the host (as the URL parser normalised it,
/// cut and escaped), never a path or query the registry chose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopRefused {
    /// A host no applying PluginPolicy lists.
    #[error(
        "{host} is neither the registry nor a host listed in spec.modules.images of a PluginPolicy applying to the namespace; not contacted"
    )]
    Unlisted {
        /// `HOST[:PORT]`.
        host: String,
    },
    /// From https to plain http.
    #[error("{host} over plain http after https; not contacted")]
    Downgrade {
        /// `HOST[:PORT]`.
        host: String,
    },
    /// Not an http(s) URL with a host.
    #[error("not an http(s) URL with a host; not contacted")]
    NotHttp,
    /// More than [`MAX_REDIRECTS`] redirects.
    #[error("more than {MAX_REDIRECTS} redirects; stopped")]
    TooManyRedirects,
    /// A redirect outside a request of a pull (no reach to check it against).
    #[error("a redirect outside a pull; not followed")]
    Unscoped,
}

/// `HOST` or `HOST:PORT` of `url` (the port when not the scheme's default), cut to 260
/// bytes and escaped: what a message may say of a host a registry chose.
pub fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or("");
    let text = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    crate::contract::text::shown_max(&text, 260).to_string()
}

/// Whether `a` and `b` have the same scheme, host and port.
fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str().map(str::to_ascii_lowercase) == b.host_str().map(str::to_ascii_lowercase)
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Whether a listed `HOST[:PORT]` names the host and port of `url` (`HOST` alone: the
/// scheme's default port).
fn host_matches(listed: &str, url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let listed = listed.to_ascii_lowercase();
    let host = host.to_ascii_lowercase();
    match url.port() {
        Some(port) => listed == format!("{host}:{port}"),
        None => {
            listed == host
                || url
                    .port_or_known_default()
                    .is_some_and(|p| listed == format!("{host}:{p}"))
        }
    }
}

/// The registry hosts of `modules.images` patterns (`HOST[:PORT]` or `HOST[:PORT]/REPO`),
/// lowercase, each once.
pub fn registry_hosts<'a>(patterns: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut hosts: Vec<String> = patterns
        .into_iter()
        .filter_map(|p| p.split('/').next())
        .filter(|h| !h.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The hop a request of a pull is in: where it began and what it may reach.
#[derive(Debug, Clone)]
pub(crate) struct Hops {
    pub(crate) access: Access,
    pub(crate) origin: Url,
}

tokio::task_local! {
    /// The hops of the request being sent on this task (reqwest's redirect policy is the
    /// client's, one for every request; this gives it the request's own reach).
    static HOPS: Hops;
}

/// Runs `request` (a send) with `hops` as the reach its redirects are checked against.
pub(crate) async fn within<F: Future>(hops: Hops, request: F) -> F::Output {
    HOPS.scope(hops, request).await
}

/// The redirect policy of the pull client: every hop checked against the reach of the
/// request being sent ([`within`]), at most [`MAX_REDIRECTS`] of them.
pub(crate) fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        // previous() holds the first URL too: MAX_REDIRECTS hops followed already.
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(HopRefused::TooManyRedirects);
        }
        let Some(previous) = attempt.previous().last().cloned() else {
            return attempt.error(HopRefused::Unscoped);
        };
        let verdict = HOPS.try_with(|h| h.access.check_hop(&h.origin, &previous, attempt.url()));
        match verdict {
            Ok(Ok(())) => attempt.follow(),
            Ok(Err(refused)) => {
                tracing::warn!(from = %authority(&previous), to = %authority(attempt.url()), why = %refused, "a registry redirect was refused");
                attempt.error(refused)
            }
            Err(_) => attempt.error(HopRefused::Unscoped),
        }
    })
}

/// The [`HopRefused`] in the source chain of `err`, if a redirect was refused.
pub(crate) fn refused_hop(err: &(dyn std::error::Error + 'static)) -> Option<HopRefused> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(refused) = e.downcast_ref::<HopRefused>() {
            return Some(refused.clone());
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn listed(hosts: &[&str]) -> Access {
        Access {
            credentials: Credentials::default(),
            reach: Reach::Listed(hosts.iter().map(|h| h.to_string()).collect()),
        }
    }

    #[test]
    fn hops_go_only_to_the_registry_and_listed_hosts() {
        let a = listed(&["reg.example", "auth.example:8443", "127.0.0.1:6000"]);
        let origin = url("https://reg.example/v2/x/manifests/v1");
        let ok = |next: &str| a.check_hop(&origin, &origin, &url(next));
        assert_eq!(ok("https://reg.example/token?x=1"), Ok(()));
        assert_eq!(ok("https://REG.example:443/other"), Ok(()));
        assert_eq!(ok("https://auth.example:8443/token"), Ok(()));
        assert_eq!(
            ok("https://auth.example/token"),
            Err(HopRefused::Unlisted {
                host: "auth.example".into()
            })
        );
        assert_eq!(
            ok("https://10.0.0.1:8080/internal?secret"),
            Err(HopRefused::Unlisted {
                host: "10.0.0.1:8080".into()
            })
        );
        assert_eq!(
            ok("http://reg.example/v2/"),
            Err(HopRefused::Downgrade {
                host: "reg.example".into()
            })
        );
        assert_eq!(ok("file:///etc/passwd"), Err(HopRefused::NotHttp));
        // A plain-http registry may go on to a listed plain-http host, not to another.
        let origin = url("http://127.0.0.1:5000/v2/x/blobs/sha256:aa");
        assert_eq!(
            a.check_hop(&origin, &origin, &url("http://127.0.0.1:6000/t")),
            Ok(())
        );
        assert_eq!(
            a.check_hop(&origin, &origin, &url("http://127.0.0.1:5000/b")),
            Ok(())
        );
        assert!(
            a.check_hop(&origin, &origin, &url("http://127.0.0.1:7000/t"))
                .is_err()
        );
        // The operator's reach: any host, never a downgrade.
        let any = Access::anonymous();
        let origin = url("https://reg.example/v2/");
        assert_eq!(
            any.check_hop(&origin, &origin, &url("https://cdn.example/blob")),
            Ok(())
        );
        assert!(
            any.check_hop(&origin, &origin, &url("http://cdn.example/blob"))
                .is_err()
        );
    }

    #[test]
    fn credentials_follow_their_host() {
        let credentials = Credentials::from_docker_config(
            br#"{"auths":{"reg.example":{"username":"r","password":"p"},
                 "auth.example:8443":{"username":"a","password":"q"}}}"#,
        )
        .unwrap();
        let a = Access {
            credentials,
            reach: Reach::Any,
        };
        assert!(
            matches!(a.auth_for_url(&url("https://reg.example/token")), RegistryAuth::Basic(u, _) if u == "r")
        );
        assert!(
            matches!(a.auth_for_url(&url("https://auth.example:8443/t")), RegistryAuth::Basic(u, _) if u == "a")
        );
        assert!(matches!(
            a.auth_for_url(&url("https://reg.example:8443/t")),
            RegistryAuth::Anonymous
        ));
        assert!(matches!(
            a.auth_for_url(&url("https://other.example/t")),
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn hosts_of_patterns() {
        let patterns = vec![
            "Reg.example/team-a".to_string(),
            "reg.example".into(),
            "127.0.0.1:5000/x/y".into(),
        ];
        assert_eq!(registry_hosts(&patterns), ["127.0.0.1:5000", "reg.example"]);
    }
}
