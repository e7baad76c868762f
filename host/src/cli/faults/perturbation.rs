//! The Sieve-style perturbations of what a plugin sees, each placed at one call of the
//! fault-free run: a stale read, a child not yet visible after its create, the same event
//! delivered twice, and a crash between two of a call's writes.

use super::world::Key;
use std::fmt;

/// The four families, one output line each per case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    /// The previous version of the object or of the objects it reads.
    StaleRead,
    /// A call does not see the children the call before it created.
    NotVisible,
    /// A call's input delivered a second time.
    Duplicate,
    /// Only a prefix of a call's writes applied, then the plugin called again.
    Crash,
}

impl Family {
    /// Every family, in the order they are reported.
    pub const ALL: [Family; 4] = [
        Family::StaleRead,
        Family::NotVisible,
        Family::Duplicate,
        Family::Crash,
    ];

    /// Its name in the output.
    pub fn name(self) -> &'static str {
        match self {
            Family::StaleRead => "stale read",
            Family::NotVisible => "child not yet visible",
            Family::Duplicate => "same event twice",
            Family::Crash => "crash and re-run",
        }
    }
}

/// One perturbation at one place of the run; calls are numbered from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Perturbation {
    /// Call `call` is given the object as it was at the call before (its reads current).
    StaleObject {
        /// The call perturbed.
        call: usize,
    },
    /// Call `call` reads the other objects as they were at the call before (the object
    /// current).
    StaleReads {
        /// The call perturbed.
        call: usize,
    },
    /// Call `call` does not see the objects call `call - 1` created.
    NotVisible {
        /// The call perturbed.
        call: usize,
        /// What it does not see.
        hidden: Vec<Key>,
    },
    /// Call `call` is made twice with the same input, both calls' writes applied.
    Duplicate {
        /// The call delivered twice.
        call: usize,
    },
    /// Only the first `after` writes of call `call` are applied; the plugin is then called
    /// again (a retry) on the state they left.
    Crash {
        /// The call interrupted.
        call: usize,
        /// How many of its writes were applied.
        after: usize,
    },
}

impl Perturbation {
    /// The family it belongs to.
    pub fn family(&self) -> Family {
        match self {
            Perturbation::StaleObject { .. } | Perturbation::StaleReads { .. } => Family::StaleRead,
            Perturbation::NotVisible { .. } => Family::NotVisible,
            Perturbation::Duplicate { .. } => Family::Duplicate,
            Perturbation::Crash { .. } => Family::Crash,
        }
    }

    /// The call it perturbs.
    pub fn call(&self) -> usize {
        match self {
            Perturbation::StaleObject { call }
            | Perturbation::StaleReads { call }
            | Perturbation::NotVisible { call, .. }
            | Perturbation::Duplicate { call }
            | Perturbation::Crash { call, .. } => *call,
        }
    }
}

impl fmt::Display for Perturbation {
    /// What happened, for a plugin author: "a crash between actions 1 and 2 of call 1".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Perturbation::StaleObject { call } => write!(
                f,
                "a stale read (call {call} was given the object as call {} saw it)",
                call - 1
            ),
            Perturbation::StaleReads { call } => write!(
                f,
                "a stale read (call {call} read the other objects as call {} saw them)",
                call - 1
            ),
            Perturbation::NotVisible { call, hidden } => {
                let names: Vec<String> = hidden.iter().map(Key::to_string).collect();
                write!(
                    f,
                    "a child not yet visible after its create (call {call} did not see {}, created by call {})",
                    names.join(", "),
                    call - 1
                )
            }
            Perturbation::Duplicate { call } => {
                write!(f, "the same event delivered twice (call {call})")
            }
            Perturbation::Crash { call, after } => write!(
                f,
                "a crash between write actions {after} and {} of call {call} and a re-run",
                after + 1
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_perturbation_says_where_it_struck() {
        let crash = Perturbation::Crash { call: 1, after: 1 };
        assert_eq!(
            crash.to_string(),
            "a crash between write actions 1 and 2 of call 1 and a re-run"
        );
        assert_eq!(crash.family(), Family::Crash);
        let hidden = Perturbation::NotVisible {
            call: 2,
            hidden: vec![Key {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: Some("shop".into()),
                name: "web-bbbbb".into(),
            }],
        };
        assert!(
            hidden
                .to_string()
                .contains("call 2 did not see Pod shop/web-bbbbb, created by call 1"),
            "{hidden}"
        );
        assert_eq!(Perturbation::StaleReads { call: 3 }.call(), 3);
        assert_eq!(Family::ALL.map(Family::name)[2], "same event twice");
    }
}
