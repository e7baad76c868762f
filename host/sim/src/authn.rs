//! Authentication: bearer tokens the sim issued, each naming a user and its groups, as a real
//! API server's token authenticators do (static tokens, ServiceAccount tokens). Tokens are
//! random (256 bits from the OS), kept in memory only, and never logged.

use axum::http::{HeaderMap, header};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

/// The user the sim's own token (the kubeconfig's, `Sim::client()`'s) authenticates as.
pub const ADMIN_USER: &str = "kubeplug-admin";
/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The user of a request without credentials (anonymous authentication, on by default in a
/// real API server).
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of requests without credentials.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group the authorizer allows everything (as the real server's privileged group).
pub const MASTERS: &str = "system:masters";
/// The group of every ServiceAccount.
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
/// The prefix of a ServiceAccount's user name (`system:serviceaccount:NS:NAME`).
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Longest bearer token looked up; longer ones are refused without a lookup.
const MAX_TOKEN_LEN: usize = 1024;

/// Who a request is from: the authenticated (or impersonated) user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name, e.g. `system:serviceaccount:t1:default`.
    pub name: String,
    /// UID (empty when none was given).
    pub uid: String,
    /// Groups, e.g. `system:authenticated`.
    pub groups: Vec<String>,
    /// Extra attributes (from `Impersonate-Extra-*`); RBAC does not use them.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with groups.
    pub fn new(name: &str, groups: &[&str]) -> Self {
        Self {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Self::default()
        }
    }

    /// The sim's administrator (`kubeplug-admin` in `system:masters`).
    pub fn admin() -> Self {
        Self::new(ADMIN_USER, &[MASTERS, AUTHENTICATED])
    }

    /// A request without credentials: `system:anonymous` in `system:unauthenticated`, with
    /// only what RBAC grants those (the bootstrap policy: `/version` and health paths).
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS, &[UNAUTHENTICATED])
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// `system:serviceaccount:NS:NAME`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
}

/// The groups of a ServiceAccount of `namespace` (without `system:authenticated`).
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        SERVICE_ACCOUNTS.to_string(),
        format!("{SERVICE_ACCOUNTS}:{namespace}"),
    ]
}

/// `(namespace, name)` of a ServiceAccount user name; `None` for other users (and for a
/// malformed one, as the real server's `SplitUsername` refuses it).
pub fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

/// The tokens one sim issued.
pub struct Tokens {
    by_token: RwLock<HashMap<String, Arc<UserInfo>>>,
    admin: String,
}

impl Default for Tokens {
    fn default() -> Self {
        Self::new()
    }
}

impl Tokens {
    /// A registry holding only a fresh admin token.
    pub fn new() -> Self {
        let admin = random_token();
        let mut by_token = HashMap::new();
        by_token.insert(admin.clone(), Arc::new(UserInfo::admin()));
        Self {
            by_token: RwLock::new(by_token),
            admin,
        }
    }

    /// The admin token.
    pub fn admin(&self) -> &str {
        &self.admin
    }

    /// Registers a new random token for `user` (its groups as given; `system:authenticated`
    /// is added when missing, as every authenticator does).
    pub fn issue(&self, mut user: UserInfo) -> String {
        if !user.in_group(AUTHENTICATED) {
            user.groups.push(AUTHENTICATED.into());
        }
        let token = random_token();
        self.by_token
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.clone(), Arc::new(user));
        token
    }

    /// The user of a request's `Authorization: Bearer` token; `None` when it has none or an
    /// unknown one.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<Arc<UserInfo>> {
        let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") || token.len() > MAX_TOKEN_LEN {
            return None;
        }
        self.by_token
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(token.trim())
            .cloned()
    }
}

/// 256 random bits from the OS, as hex (two v4 UUIDs' bytes).
fn random_token() -> String {
    let mut token = String::with_capacity(64);
    for _ in 0..2 {
        token.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    token
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        headers
    }

    #[test]
    fn issued_tokens_authenticate_and_others_do_not() {
        let tokens = Tokens::new();
        let admin = tokens.authenticate(&bearer(tokens.admin())).unwrap();
        assert_eq!(admin.name, ADMIN_USER);
        assert!(admin.in_group(MASTERS));
        let token = tokens.issue(UserInfo::new("alice", &["dev"]));
        let alice = tokens.authenticate(&bearer(&token)).unwrap();
        assert_eq!(alice.groups, vec!["dev", AUTHENTICATED]);
        assert!(tokens.authenticate(&bearer("nope")).is_none());
        assert!(tokens.authenticate(&HeaderMap::new()).is_none());
        assert!(tokens.authenticate(&bearer(&"a".repeat(5000))).is_none());
        assert_ne!(token, tokens.issue(UserInfo::new("alice", &[])));
    }

    #[test]
    fn service_account_names() {
        assert_eq!(
            split_service_account("system:serviceaccount:t1:default"),
            Some(("t1", "default"))
        );
        assert_eq!(split_service_account("system:serviceaccount:t1"), None);
        assert_eq!(split_service_account("system:serviceaccount::x"), None);
        assert_eq!(split_service_account("alice"), None);
    }
}
