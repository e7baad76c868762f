//! The reload planner: from what a scan saw and what runs, which instances to start or swap
//! and which to stop. Pure, so every case is a table row.

use super::state::{FailedStart, Runnable, Running, Target};
use crate::controller::InstanceName;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

/// Starts or swaps one instance to a new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Start<O = PathBuf> {
    /// The instance.
    pub name: InstanceName,
    /// Where it runs from: the plugin file, or the API object.
    pub file: O,
    /// The version to run.
    pub target: Target,
}

/// What one rescan does to the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan<O = PathBuf> {
    /// Instances to start, or to swap to a new version, in name order.
    pub start: Vec<Start<O>>,
    /// Running instances to stop: their file is gone (or no longer names an instance).
    pub stop: Vec<String>,
    /// Every instance that has a file with a version to run: what the reloader keeps
    /// remembering (policies, failed starts) after the plan is applied.
    pub keep: BTreeSet<String>,
}

impl<O> Default for Plan<O> {
    fn default() -> Self {
        Plan {
            start: Vec::new(),
            stop: Vec::new(),
            keep: BTreeSet::new(),
        }
    }
}

/// Plans a rescan of one source (the plugins directory, or the `Plugin` objects); each
/// source plans over the instances it started, whose names never collide with another
/// source's.
///
/// - An instance starts (or swaps) when its target (plugin digest, policy content) differs
///   from what runs, once its policy has parsed at least once.
/// - A start that failed is not retried on the same target unless `force` (SIGHUP).
/// - A running instance stops when no file with a version to run names it anymore; a file
///   whose current content fails keeps its last good version, so it does not stop.
pub(crate) fn plan<'a, O: ?Sized + ToOwned + 'a>(
    runnable: impl IntoIterator<Item = Runnable<'a, O>>,
    running: &HashMap<String, Running<O::Owned>>,
    failed_starts: &HashMap<String, FailedStart>,
    force: bool,
) -> Plan<O::Owned> {
    let mut plan = Plan::default();
    for file in runnable {
        plan.keep.insert(file.name.to_string());
        let Some(policy) = file.policy else {
            continue;
        };
        let target = Target {
            plugin: file.plugin.to_string(),
            policy: policy.clone(),
        };
        if running
            .get(file.name.as_str())
            .is_some_and(|r| r.target == target)
        {
            continue;
        }
        let failed_before = failed_starts
            .get(file.name.as_str())
            .is_some_and(|f| f.target == target);
        if failed_before && !force {
            continue;
        }
        plan.start.push(Start {
            name: file.name,
            file: file.file.to_owned(),
            target,
        });
    }
    plan.start.sort_by(|a, b| a.name.cmp(&b.name));
    plan.stop = running
        .keys()
        .filter(|name| !plan.keep.contains(*name))
        .cloned()
        .collect();
    plan.stop.sort();
    plan
}

#[cfg(test)]
mod tests {
    use super::super::state::PolicyContent;
    use super::*;
    use rstest::rstest;
    use std::path::Path;

    const A1: &str = "a1";
    const A2: &str = "a2";

    fn file(
        name: &'static str,
        plugin: &'static str,
        policy: Option<&'static PolicyContent>,
    ) -> Runnable<'static> {
        Runnable {
            name: InstanceName::parse(name).unwrap(),
            file: Path::new(match name {
                "a" => "/p/a.wasm",
                _ => "/p/b.wasm",
            }),
            plugin,
            policy,
        }
    }

    static NONE: PolicyContent = PolicyContent::Absent;
    static P1: std::sync::LazyLock<PolicyContent> =
        std::sync::LazyLock::new(|| PolicyContent::File("p1".into()));

    fn target(plugin: &str, policy: &PolicyContent) -> Target {
        Target {
            plugin: plugin.into(),
            policy: policy.clone(),
        }
    }

    fn runs(name: &str, t: Target) -> (String, Running) {
        let file = PathBuf::from(format!("/p/{name}.wasm"));
        (name.to_string(), Running { file, target: t })
    }

    fn start(name: &str, t: Target) -> Start {
        Start {
            name: InstanceName::parse(name).unwrap(),
            file: PathBuf::from(format!("/p/{name}.wasm")),
            target: t,
        }
    }

    #[rstest]
    #[case::a_new_file_without_a_policy_file_starts_in_dry_run(
        vec![file("a", A1, Some(&NONE))], vec![], vec![], false,
        vec![start("a", target(A1, &NONE))], vec![])]
    #[case::a_new_file_whose_policy_never_parsed_waits(
        vec![file("a", A1, None)], vec![], vec![], false, vec![], vec![])]
    #[case::an_unchanged_file_is_left_alone(
        vec![file("a", A1, Some(&NONE))], vec![runs("a", target(A1, &NONE))], vec![], false,
        vec![], vec![])]
    #[case::a_forced_rescan_leaves_what_runs_alone(
        vec![file("a", A1, Some(&NONE))], vec![runs("a", target(A1, &NONE))], vec![], true,
        vec![], vec![])]
    #[case::new_plugin_content_swaps(
        vec![file("a", A2, Some(&NONE))], vec![runs("a", target(A1, &NONE))], vec![], false,
        vec![start("a", target(A2, &NONE))], vec![])]
    #[case::new_policy_content_swaps(
        vec![file("a", A1, Some(&P1))], vec![runs("a", target(A1, &NONE))], vec![], false,
        vec![start("a", target(A1, &P1))], vec![])]
    #[case::a_failed_start_is_not_retried_on_the_same_target(
        vec![file("a", A1, Some(&P1))], vec![], vec![failed("a", target(A1, &P1))], false,
        vec![], vec![])]
    #[case::a_failed_start_is_retried_when_forced(
        vec![file("a", A1, Some(&P1))], vec![], vec![failed("a", target(A1, &P1))], true,
        vec![start("a", target(A1, &P1))], vec![])]
    #[case::a_failed_start_is_retried_on_a_new_target(
        vec![file("a", A2, Some(&P1))], vec![], vec![failed("a", target(A1, &P1))], false,
        vec![start("a", target(A2, &P1))], vec![])]
    #[case::a_running_instance_whose_file_is_gone_stops(
        vec![file("b", A1, Some(&NONE))],
        vec![runs("a", target(A1, &NONE)), runs("b", target(A1, &NONE))], vec![], false,
        vec![], vec!["a"])]
    #[case::a_running_instance_whose_policy_breaks_keeps_running(
        vec![file("a", A1, None)], vec![runs("a", target(A1, &NONE))], vec![], false,
        vec![], vec![])]
    #[case::starts_come_in_name_order(
        vec![file("b", A1, Some(&NONE)), file("a", A2, Some(&NONE))], vec![], vec![], false,
        vec![start("a", target(A2, &NONE)), start("b", target(A1, &NONE))], vec![])]
    fn plans(
        #[case] files: Vec<Runnable<'static>>,
        #[case] running: Vec<(String, Running)>,
        #[case] failed_starts: Vec<(String, FailedStart)>,
        #[case] force: bool,
        #[case] want_start: Vec<Start>,
        #[case] want_stop: Vec<&str>,
    ) {
        let keep: BTreeSet<String> = files.iter().map(|f| f.name.to_string()).collect();
        let got = plan(
            files,
            &running.into_iter().collect(),
            &failed_starts.into_iter().collect(),
            force,
        );
        assert_eq!(got.start, want_start);
        assert_eq!(got.stop, want_stop);
        assert_eq!(got.keep, keep);
    }

    fn failed(name: &str, t: Target) -> (String, FailedStart) {
        let error = "refused".to_string();
        (name.to_string(), FailedStart { target: t, error })
    }
}
