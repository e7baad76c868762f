//! Status conditions set the Kubernetes way (`meta.SetStatusCondition` of apimachinery):
//! one condition per type; `lastTransitionTime` moves only when the status changes; reason,
//! message and `observedGeneration` are updated in place.
//!
//! Contract 0.1.0 gives plugins no clock (their WASI clocks are frozen), so the caller
//! supplies the time of the transition.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition of `type_` with status `True` or `False`, at `now`, for `generation`.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: Time(now),
    }
}

/// Sets `new` in `conditions`, returning whether anything changed. An existing condition of
/// the same type keeps its `lastTransitionTime` unless its status changes.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if old.status != new.status {
        old.status = new.status;
        old.last_transition_time = new.last_transition_time;
        changed = true;
    }
    for (field, value) in [
        (&mut old.reason, new.reason),
        (&mut old.message, new.message),
    ] {
        if *field != value {
            *field = value;
            changed = true;
        }
    }
    if old.observed_generation != new.observed_generation {
        old.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

/// Removes the condition of `type_`, returning whether there was one.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The condition of `type_`, if set.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is set with status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let mut cs = Vec::new();
        let t0 = at("2026-01-01T00:00:00Z");
        let t1 = at("2026-01-01T00:01:00Z");
        let t2 = at("2026-01-01T00:02:00Z");
        assert!(set_condition(
            &mut cs,
            condition("Ready", false, "Waiting", "0/3", Some(1), t0)
        ));
        // Same status, new message and generation: updated in place, time kept.
        assert!(set_condition(
            &mut cs,
            condition("Ready", false, "Waiting", "2/3", Some(2), t1)
        ));
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].last_transition_time, Time(t0));
        assert_eq!(
            (cs[0].message.as_str(), cs[0].observed_generation),
            ("2/3", Some(2))
        );
        // Nothing differs: no change reported (so no status write).
        assert!(!set_condition(
            &mut cs,
            condition("Ready", false, "Waiting", "2/3", Some(2), t2)
        ));
        // Status flips: the transition time moves.
        assert!(set_condition(
            &mut cs,
            condition("Ready", true, "AllReady", "3/3", Some(2), t2)
        ));
        assert_eq!(cs[0].last_transition_time, Time(t2));
        assert!(is_condition_true(&cs, "Ready"));
        assert!(!is_condition_true(&cs, "Degraded"));
        let json = serde_json::to_value(&cs[0]).unwrap();
        assert_eq!(json["lastTransitionTime"], "2026-01-01T00:02:00Z");
        assert_eq!(json["type"], "Ready");
        assert!(remove_condition(&mut cs, "Ready"));
        assert!(!remove_condition(&mut cs, "Ready"));
    }
}
