//! `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]`: a module in an OCI registry, checked before
//! any request is made. Every part is bounded and every refusal names the part at fault.

use std::fmt;

/// The longest reference accepted, `oci://` included.
pub const MAX_REFERENCE_BYTES: usize = 512;
/// The longest repository path (the distribution spec's practical limit).
pub const MAX_REPOSITORY_BYTES: usize = 255;
/// The longest tag (the distribution spec: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`).
pub const MAX_TAG_BYTES: usize = 128;
/// The tag a reference without tag or digest means.
pub const DEFAULT_TAG: &str = "latest";

/// A checked `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciRef {
    /// `HOST` or `HOST:PORT`.
    pub registry: String,
    /// The repository path, lower case, components separated by `/`.
    pub repository: String,
    /// The tag, if one was named.
    pub tag: Option<String>,
    /// The pinned digest's 64 lower-case hex digits, if one was named.
    pub digest: Option<String>,
}

/// Why a text is not an `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference:?} is not an oci:// reference: {why}")]
pub struct RefError {
    /// The text, cut to 100 bytes.
    pub reference: String,
    /// What is wrong with it.
    pub why: String,
}

impl OciRef {
    /// Parses `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]`.
    pub fn parse(text: &str) -> Result<OciRef, RefError> {
        let fail = |why: String| RefError {
            reference: crate::contract::text::prefix(text, 100).to_string(),
            why,
        };
        if text.len() > MAX_REFERENCE_BYTES {
            return Err(fail(format!(
                "{} bytes, more than the {MAX_REFERENCE_BYTES} accepted",
                text.len()
            )));
        }
        let Some(rest) = text.strip_prefix("oci://") else {
            return Err(fail(
                "it must start with oci:// (oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST])".into(),
            ));
        };
        let (rest, digest) = match rest.split_once('@') {
            Some((before, digest)) => (before, Some(parse_digest(digest).map_err(fail)?)),
            None => (rest, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(fail(
                "no repository: expected HOST[:PORT]/REPO after oci://".into(),
            ));
        };
        check_registry(registry).map_err(fail)?;
        // A tag is after the last `:` of the last path component (`:` never occurs elsewhere
        // in a path).
        let last = path.rsplit('/').next().unwrap_or(path);
        let (repository, tag) = match last.split_once(':') {
            Some((_, tag)) => (&path[..path.len() - tag.len() - 1], Some(tag)),
            None => (path, None),
        };
        check_repository(repository).map_err(fail)?;
        if let Some(tag) = tag {
            check_tag(tag).map_err(fail)?;
        }
        Ok(OciRef {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// The registry host without its port.
    pub fn host(&self) -> &str {
        self.registry
            .split_once(':')
            .map_or(self.registry.as_str(), |(host, _)| host)
    }

    /// The same module pinned to `digest` (64 hex digits), its tag kept for display.
    pub fn pinned(&self, digest: &str) -> OciRef {
        OciRef {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }

    /// The same repository on another registry path: `dst`'s registry and repository, this
    /// reference's tag and digest unless `dst` names its own.
    pub fn retargeted(&self, dst: &OciRef) -> OciRef {
        OciRef {
            registry: dst.registry.clone(),
            repository: dst.repository.clone(),
            tag: dst.tag.clone().or_else(|| self.tag.clone()),
            digest: dst.digest.clone().or_else(|| self.digest.clone()),
        }
    }

    /// The reference as oci-client takes it: by digest when pinned, else by tag (`latest`
    /// when none was named).
    pub fn to_client(&self) -> oci_client::Reference {
        match &self.digest {
            Some(d) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                format!("sha256:{d}"),
            ),
            None => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                self.tag.clone().unwrap_or_else(|| DEFAULT_TAG.into()),
            ),
        }
    }

    /// The tag as pushed: the named one or `latest`.
    pub fn tag_or_default(&self) -> &str {
        self.tag.as_deref().unwrap_or(DEFAULT_TAG)
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@sha256:{digest}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for OciRef {
    type Err = RefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OciRef::parse(s)
    }
}

/// `sha256:` and 64 lower-case hex digits; returns the hex.
pub fn parse_digest(text: &str) -> Result<String, String> {
    let Some(hex) = text.strip_prefix("sha256:") else {
        return Err(format!(
            "digest {:?}: only sha256:<64 hex digits> digests are accepted",
            crate::contract::text::prefix(text, 80)
        ));
    };
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!(
            "digest sha256:{:?}: expected 64 lower-case hex digits",
            crate::contract::text::prefix(hex, 80)
        ));
    }
    Ok(hex.to_string())
}

fn check_registry(registry: &str) -> Result<(), String> {
    if registry.is_empty() {
        return Err("no registry host after oci://".into());
    }
    let (host, port) = match registry.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (registry, None),
    };
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) => {}
            _ => {
                return Err(format!(
                    "registry port {port:?} is not a number from 1 to 65535"
                ));
            }
        }
    }
    if !kubeplug_vocab::names::is_hostname(host) {
        return Err(format!(
            "registry host {:?} is not a host name or IPv4 address",
            crate::contract::text::prefix(host, 80)
        ));
    }
    Ok(())
}

fn check_repository(repo: &str) -> Result<(), String> {
    if repo.is_empty() {
        return Err("empty repository".into());
    }
    if repo.len() > MAX_REPOSITORY_BYTES {
        return Err(format!(
            "repository is {} bytes, more than {MAX_REPOSITORY_BYTES}",
            repo.len()
        ));
    }
    // [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* per component.
    for comp in repo.split('/') {
        let b = comp.as_bytes();
        let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        let ok = !b.is_empty() && alnum(b[0]) && alnum(b[b.len() - 1]) && {
            let mut ok = true;
            let mut i = 0;
            while i < b.len() {
                if alnum(b[i]) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < b.len() && !alnum(b[i]) {
                    i += 1;
                }
                let sep = &comp[start..i];
                if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
                    ok = false;
                    break;
                }
            }
            ok
        };
        if !ok {
            return Err(format!(
                "repository component {:?} is not lower-case letters and digits separated by . _ __ or -",
                crate::contract::text::prefix(comp, 80)
            ));
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let b = tag.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= MAX_TAG_BYTES
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {:?} is not 1 to {MAX_TAG_BYTES} of [A-Za-z0-9_.-] starting with a letter, digit or _",
            crate::contract::text::prefix(tag, 80)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_forms_a_user_types() {
        let r = OciRef::parse("oci://127.0.0.1:5000/team-a/pinner:v1").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.host(), "127.0.0.1");
        assert_eq!(r.repository, "team-a/pinner");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest, None);
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/team-a/pinner:v1");

        let pinned = format!("oci://ghcr.io/org/a/b:v2@sha256:{D}");
        let r = OciRef::parse(&pinned).unwrap();
        assert_eq!(r.digest.as_deref(), Some(D));
        assert_eq!(r.to_string(), pinned);
        assert_eq!(r.to_client().digest(), Some(format!("sha256:{D}").as_str()));

        let r = OciRef::parse("oci://registry.example/pinner").unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.to_client().tag(), Some("latest"));
        let r = OciRef::parse(&format!("oci://localhost:5000/p@sha256:{D}")).unwrap();
        assert_eq!((r.tag, r.digest.as_deref()), (None, Some(D)));
    }

    #[test]
    fn each_bad_part_is_named() {
        let cases: &[(&str, &str)] = &[
            ("ghcr.io/a/b:v1", "must start with oci://"),
            ("docker://ghcr.io/a/b", "must start with oci://"),
            ("oci://ghcr.io", "no repository"),
            ("oci:///a/b", "no registry host"),
            ("oci://ghcr.io:0/a", "port \"0\""),
            ("oci://ghcr.io:99999/a", "port \"99999\""),
            ("oci://ghcr.io:/a", "port \"\""),
            ("oci://gh_cr.io/a", "registry host \"gh_cr.io\""),
            ("oci://user@ghcr.io/a", "digest"),
            ("oci://ghcr.io/A/b", "repository component \"A\""),
            ("oci://ghcr.io/a//b", "repository component \"\""),
            ("oci://ghcr.io/a/", "repository component \"\""),
            ("oci://ghcr.io/a/b..c", "repository component"),
            ("oci://ghcr.io/a/b:", "tag \"\""),
            ("oci://ghcr.io/a/b:-x", "tag \"-x\""),
            ("oci://ghcr.io/a/b:v1:v2", "tag \"v1:v2\""),
            ("oci://ghcr.io/a/b@sha512:00", "only sha256"),
            ("oci://ghcr.io/a/b@sha256:ABC", "64 lower-case hex"),
        ];
        for (text, why) in cases {
            let err = OciRef::parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn bounds() {
        let long_tag = format!("oci://h/r:{}", "t".repeat(129));
        assert!(
            OciRef::parse(&long_tag)
                .unwrap_err()
                .to_string()
                .contains("tag")
        );
        let long_repo = format!("oci://h/{}", "r".repeat(256));
        assert!(
            OciRef::parse(&long_repo)
                .unwrap_err()
                .to_string()
                .contains("256 bytes, more than 255")
        );
        let huge = format!("oci://h/{}", "r/".repeat(100_000));
        let err = OciRef::parse(&huge).unwrap_err();
        assert!(err.why.contains("more than the 512 accepted"), "{err}");
        assert!(err.reference.len() <= 100);
        assert!(OciRef::parse(&format!("oci://h/r:{}", "t".repeat(128))).is_ok());
    }
}
