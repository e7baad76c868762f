//! Why a `Plugin` (or a `PluginPolicy`) does not run as written: a machine-readable reason
//! for its `Stalled` and `Ready` conditions and a one-line message for people.

use std::fmt;

/// The reasons a Plugin's status can give for not running its current spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The spec does not parse (an unknown field, a wrong type, a bad duration).
    InvalidSpec,
    /// The namespace and name cannot name an instance.
    InvalidName,
    /// `module.image` names a registry no applying PluginPolicy lists in `spec.modules.images`.
    ImageNotAllowed,
    /// The image is being pulled for the first time (not a failure).
    Pulling,
    /// The registry could not be reached or answered an error: retried with backoff, the
    /// running revision keeps running.
    PullFailed,
    /// The registry holds something that is not a usable module there (not a wasm module,
    /// no such tag, a digest that does not match): retried slowly.
    ImageInvalid,
    /// The module's signatures do not satisfy the verification the host or a policy requires.
    VerificationFailed,
    /// The ConfigMap or its key does not exist.
    ModuleNotFound,
    /// The ConfigMap could not be read (forbidden, server error): retried.
    ModuleUnavailable,
    /// The module is larger than the host accepts.
    ModuleTooLarge,
    /// The namespace compiled too many modules lately: this one waits its turn.
    CompileThrottled,
    /// The module is being compiled, or waits in its namespace's compile queue (not a
    /// failure).
    Compiling,
    /// The module's SHA-256 is not the pinned one.
    DigestMismatch,
    /// The bytes are not a WebAssembly component that compiles.
    CompileFailed,
    /// The component implements no contract version this host supports.
    ContractUnsupported,
    /// The request asks for more than the applying PluginPolicies grant.
    PermissionsExceedPolicy,
    /// The plugin would read a kind its ServiceAccount may not get, list or watch.
    PermissionsExceedServiceAccount,
    /// The API server could not say what the ServiceAccount may do: retried.
    AccessReviewFailed,
    /// The controller refused to start it (e.g. it reconciles a kind its grant omits).
    StartRefused,
    /// More Plugin objects exist than the host runs; this one is among the newest.
    TooManyPlugins,
    /// The new revision runs in shadow beside the live one (not a failure: a rollout).
    Shadowing,
    /// The shadow differed on more keys than allowed: the live revision keeps running.
    RolloutHeld,
}

impl Reason {
    /// The reason as written in conditions and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::InvalidName => "InvalidName",
            Reason::ImageNotAllowed => "ImageNotAllowed",
            Reason::Pulling => "Pulling",
            Reason::PullFailed => "PullFailed",
            Reason::ImageInvalid => "ImageInvalid",
            Reason::VerificationFailed => "VerificationFailed",
            Reason::ModuleNotFound => "ModuleNotFound",
            Reason::ModuleUnavailable => "ModuleUnavailable",
            Reason::ModuleTooLarge => "ModuleTooLarge",
            Reason::CompileThrottled => "CompileThrottled",
            Reason::Compiling => "Compiling",
            Reason::DigestMismatch => "DigestMismatch",
            Reason::CompileFailed => "CompileFailed",
            Reason::ContractUnsupported => "ContractUnsupported",
            Reason::PermissionsExceedPolicy => "PermissionsExceedPolicy",
            Reason::PermissionsExceedServiceAccount => "PermissionsExceedServiceAccount",
            Reason::AccessReviewFailed => "AccessReviewFailed",
            Reason::StartRefused => "StartRefused",
            Reason::TooManyPlugins => "TooManyPlugins",
            Reason::Shadowing => "Shadowing",
            Reason::RolloutHeld => "RolloutHeld",
        }
    }

    /// Whether the same spec may run later without a change (the API server answered an
    /// error): such a failure is retried, the others wait for a new spec.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Reason::ModuleUnavailable
                | Reason::AccessReviewFailed
                | Reason::Pulling
                | Reason::PullFailed
                | Reason::CompileThrottled
                | Reason::Compiling
                | Reason::Shadowing
                | Reason::TooManyPlugins
        )
    }

    /// Whether this reason is news rather than trouble (its Event is `Normal`).
    pub fn is_normal(self) -> bool {
        matches!(
            self,
            Reason::Shadowing | Reason::Pulling | Reason::Compiling
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason and a one-line message (at most [`MAX_MESSAGE`] bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The machine-readable reason.
    pub reason: Reason,
    /// What is wrong, and where.
    pub message: String,
}

/// The longest condition message written: status stays small whatever a module or a
/// compiler says.
pub const MAX_MESSAGE: usize = 1024;

impl Refusal {
    /// A refusal with `message` made one line and capped.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Refusal {
            reason,
            message: one_line(&message.into(), MAX_MESSAGE),
        }
    }
}

/// `text` on one line (control characters as spaces), at most `max` bytes.
pub fn one_line(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > max {
        let mut cut = max.saturating_sub(3);
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_capped_line() {
        let r = Refusal::new(Reason::CompileFailed, format!("a\nb{}", "é".repeat(2000)));
        assert!(r.message.starts_with("a b"));
        assert!(r.message.len() <= MAX_MESSAGE && !r.message.contains('\n'));
    }
}
