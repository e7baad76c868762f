//! How replicas coordinate: the mode, the Lease they use, who this replica is, and the
//! timings (client-go's names and defaults).

use crate::contract::names;
use std::time::Duration;

/// How several replicas share the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One leader reconciles every key; the others keep their caches warm (`--leader-elect`).
    LeaderElection,
    /// Every replica reconciles the keys the ring gives it (`--sharding`).
    Sharding,
}

/// Lease timings, as client-go's leader election names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a Lease holds without renewal: how long the others wait before taking over.
    pub lease_duration: Duration,
    /// How long a holder keeps trying to renew before it stops acting (before the Lease can
    /// expire for the others).
    pub renew_deadline: Duration,
    /// How often to try to acquire, renew, and look at the ring.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTimings {
    /// Checks client-go's rules: lease duration > renew deadline > 1.2 × retry period > 0;
    /// otherwise a holder could act after others see its Lease expire.
    pub fn check(&self) -> Result<(), String> {
        if self.retry_period.is_zero() {
            return Err("the retry period must be positive".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "the renew deadline ({}s) must be shorter than the lease duration ({}s)",
                self.renew_deadline.as_secs_f64(),
                self.lease_duration.as_secs_f64()
            ));
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err(format!(
                "the renew deadline ({}s) must be longer than 1.2 × the retry period ({}s)",
                self.renew_deadline.as_secs_f64(),
                self.retry_period.as_secs_f64()
            ));
        }
        Ok(())
    }
}

/// Everything a coordinated replica needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinationConfig {
    /// Leader election or sharding.
    pub mode: Mode,
    /// The leader Lease's name, and the ring's name (member Leases are
    /// `<lease_name>-<identity>`, labelled [`RING_LABEL`]` = <lease_name>`).
    pub lease_name: String,
    /// The namespace of the Leases.
    pub lease_namespace: String,
    /// This replica's name in the Leases (unique among replicas).
    pub identity: String,
    /// How long Leases hold, and how often they are renewed.
    pub timings: LeaseTimings,
}

/// The label that marks a member Lease of a ring.
pub const RING_LABEL: &str = "kubeplug.dev/ring";
/// The annotation where a member records the ring it applied.
pub const APPLIED_RING_ANNOTATION: &str = "kubeplug.dev/applied-ring";

/// The longest identity accepted (a member Lease's name must stay within 253 characters).
pub const MAX_IDENTITY_LEN: usize = 128;

/// Checks that `identity` can be part of a Lease name: a DNS-1123 subdomain (lowercase
/// letters, digits, `-` and `.`, each part starting and ending with a letter or digit) of at
/// most [`MAX_IDENTITY_LEN`] bytes.
pub fn check_identity(identity: &str) -> Result<(), String> {
    match identity.len() <= MAX_IDENTITY_LEN && names::is_dns_subdomain(identity) {
        true => Ok(()),
        false => Err(format!(
            "{:?}: must be a DNS-1123 subdomain of 1 to {MAX_IDENTITY_LEN} lowercase letters, digits, '-' or '.', each part starting and ending with a letter or digit",
            crate::contract::text::shown_max(identity, 64)
        )),
    }
}

/// Checks that a sharding member's Lease name (`<lease-name>-<identity>`) is a name the API
/// server accepts: each part may be up to [`MAX_IDENTITY_LEN`] bytes, their sum not.
pub fn check_member_lease_name(name: &str) -> Result<(), String> {
    match names::is_dns_subdomain(name) {
        true => Ok(()),
        false => Err(format!(
            "the member Lease name {:?} ({} bytes) must be a DNS-1123 subdomain of at most 253 bytes: shorten --lease-name or --identity",
            crate::contract::text::shown_max(name, 64),
            name.len()
        )),
    }
}

/// The default identity: the hostname (a pod's name), lowercased, plus a random suffix so
/// a restarted process never mistakes the previous one's Lease for its own.
pub fn default_identity(hostname: &str) -> String {
    let base: String = hostname
        .to_ascii_lowercase()
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .take(MAX_IDENTITY_LEN - 9)
        .collect();
    // Each dot-separated part must start and end with a letter or digit.
    let parts: Vec<&str> = base
        .split('.')
        .map(|part| part.trim_matches('-'))
        .filter(|part| !part.is_empty())
        .collect();
    let base = match parts.join(".") {
        joined if joined.is_empty() => "kubeplug".to_string(),
        joined => joined,
    };
    let mut seed = [0u8; 4];
    getrandom_fill(&mut seed);
    let suffix: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    format!("{base}-{suffix}")
}

fn getrandom_fill(buf: &mut [u8]) {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS per process: enough to tell two processes apart.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    let bytes = h.finish().to_be_bytes();
    for (b, r) in buf.iter_mut().zip(bytes) {
        *b = r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_go_defaults_are_valid_and_bad_timings_are_refused() {
        LeaseTimings::default().check().unwrap();
        let bad = LeaseTimings {
            renew_deadline: Duration::from_secs(15),
            ..LeaseTimings::default()
        };
        assert!(bad.check().unwrap_err().contains("renew deadline"));
        let bad = LeaseTimings {
            retry_period: Duration::from_secs(9),
            ..LeaseTimings::default()
        };
        assert!(bad.check().unwrap_err().contains("retry period"));
    }

    #[test]
    fn identities_fit_lease_names() {
        check_identity("kubeplug-7d9f-abc").unwrap();
        for bad in [
            "",
            "Upper",
            "a_b",
            "-a",
            "a/b",
            "a..b",
            "a-.b",
            &"x".repeat(MAX_IDENTITY_LEN + 1),
        ] {
            assert!(check_identity(bad).is_err(), "{bad}");
        }
        check_identity(&"x".repeat(MAX_IDENTITY_LEN)).unwrap();
        let id = default_identity("My_Host.example");
        check_identity(&id).unwrap();
        assert!(id.starts_with("my-host.example-"), "{id}");
        assert_ne!(default_identity("h"), default_identity("h"));
        check_identity(&default_identity("___")).unwrap();
        let odd = default_identity("a-.-b..c-");
        check_identity(&odd).unwrap();
        assert!(odd.starts_with("a.b.c-"), "{odd}");
    }
}
