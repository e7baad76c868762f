//! The host imports a plugin calls (`log`, `get-object`, `list-objects`), independent of the
//! contract version: each version's module (`wit/since_*.rs`) converts its arguments and calls
//! these. Each one refuses to start once the call's deadline has passed (the call then fails as a timeout: the epoch
//! deadline cannot interrupt host code, so host time is checked here), bounds its arguments
//! before any work, runs reads off the call's thread under the deadline (a slow read cannot
//! hold the call past it), and bounds the bytes the reads return per call.

use super::sandbox::{LogSource, SandboxState};
use crate::contract::selector::MAX_SELECTOR_BYTES;
use crate::contract::text::shown_max;
use crate::contract::{KindRef, LogLevel};
use crate::contract::{MAX_API_VERSION_BYTES, MAX_KIND_BYTES};
use std::time::Instant;

/// The longest namespace a read may name (a DNS-1123 label).
pub const MAX_NAMESPACE_BYTES: usize = crate::contract::names::MAX_LABEL;
/// The longest object name a read may name (a DNS-1123 subdomain).
pub const MAX_OBJECT_NAME_BYTES: usize = crate::contract::names::MAX_SUBDOMAIN;

/// The error an import fails with (trapping the guest) when the call's deadline has passed:
/// the call is reported as a timeout.
#[derive(Debug, thiserror::Error)]
#[error("the call's deadline passed in a host call")]
pub(crate) struct DeadlineExceeded;

fn too_long(what: &str, value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        return Err(format!(
            "{what} of {} bytes is longer than the limit of {max}: {}",
            value.len(),
            shown_max(value, 64)
        ));
    }
    Ok(())
}

/// Checks the sizes of a read's arguments; the message names the argument, not its content.
pub(crate) fn check_read_args(
    kind: &KindRef,
    namespace: Option<&str>,
    name: Option<&str>,
    selector: Option<&str>,
) -> Result<(), String> {
    too_long("apiVersion", &kind.api_version, MAX_API_VERSION_BYTES)?;
    too_long("kind", &kind.kind, MAX_KIND_BYTES)?;
    too_long("namespace", namespace.unwrap_or(""), MAX_NAMESPACE_BYTES)?;
    too_long("name", name.unwrap_or(""), MAX_OBJECT_NAME_BYTES)?;
    too_long("label selector", selector.unwrap_or(""), MAX_SELECTOR_BYTES)
}

impl SandboxState {
    /// Fails the call as a timeout when its deadline has passed.
    fn check_deadline(&self) -> wasmtime::Result<()> {
        if Instant::now() >= self.deadline {
            return Err(wasmtime::Error::new(DeadlineExceeded));
        }
        Ok(())
    }

    /// Takes `bytes` from the call's read budget, or explains why not.
    fn take_read_room(&mut self, what: &str, bytes: usize) -> Result<(), String> {
        if bytes > self.read_room {
            return Err(format!(
                "{what} would return {bytes} bytes, more than the {} left of this call's read limit: narrow it (namespace, label selector)",
                self.read_room
            ));
        }
        self.read_room -= bytes;
        Ok(())
    }
}

/// Runs a read on a blocking thread and waits for it at most until `deadline`; past it the
/// call fails as a timeout and the read is left to finish on its own (it holds no lock the
/// host needs: the cache hands out snapshots).
async fn read<T: Send + 'static>(
    deadline: Instant,
    work: impl FnOnce() -> T + Send + 'static,
) -> wasmtime::Result<T> {
    let deadline = tokio::time::Instant::from_std(deadline);
    match tokio::time::timeout_at(deadline, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(join)) => Err(wasmtime::Error::new(join).context("host read failed")),
        Err(_) => Err(wasmtime::Error::new(DeadlineExceeded)),
    }
}

/// The imports themselves. The outer `wasmtime::Result` fails the call (a trap: the deadline
/// passed); the inner `Result` is an error the plugin receives and may handle.
impl SandboxState {
    /// `log`: one plugin log line, through the call's and the plugin's log gate.
    pub(crate) fn import_log(&mut self, level: LogLevel, message: &str) -> wasmtime::Result<()> {
        self.check_deadline()?;
        self.record_log(LogSource::Import, level, message);
        Ok(())
    }

    /// `get-object`: one object from the call's object source, charged to the read budget.
    pub(crate) async fn import_get(
        &mut self,
        kind: KindRef,
        namespace: Option<String>,
        name: String,
    ) -> wasmtime::Result<Result<Option<String>, String>> {
        self.check_deadline()?;
        if let Err(e) = check_read_args(&kind, namespace.as_deref(), Some(&name), None) {
            return Ok(Err(e));
        }
        let objects = self.objects.clone();
        let found = match read(self.deadline, move || {
            objects.get(&kind, namespace.as_deref(), &name)
        })
        .await?
        {
            Ok(found) => found,
            Err(e) => return Ok(Err(e)),
        };
        let bytes = found.as_ref().map_or(0, |o| o.len());
        if let Err(e) = self.take_read_room("get-object", bytes) {
            return Ok(Err(e));
        }
        Ok(Ok(found.map(|o| o.to_string())))
    }

    /// `list-objects`: objects of a kind from the call's object source, charged to the read
    /// budget as a whole.
    pub(crate) async fn import_list(
        &mut self,
        kind: KindRef,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        self.check_deadline()?;
        if let Err(e) =
            check_read_args(&kind, namespace.as_deref(), None, label_selector.as_deref())
        {
            return Ok(Err(e));
        }
        let objects = self.objects.clone();
        let items = match read(self.deadline, move || {
            objects.list(&kind, namespace.as_deref(), label_selector.as_deref())
        })
        .await?
        {
            Ok(items) => items,
            Err(e) => return Ok(Err(e)),
        };
        let bytes = items.iter().map(|o| o.len()).sum();
        if let Err(e) = self.take_read_room("list-objects", bytes) {
            return Ok(Err(e));
        }
        Ok(Ok(items.iter().map(|o| o.to_string()).collect()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::contract::ObjectSource;
    use crate::plugin::limits::Limits;
    use crate::plugin::log_gate::{LogRate, LogRateConfig};
    use crate::plugin::sandbox::CallIdentity;
    use std::sync::Arc;
    use std::time::Duration;

    /// A source that must not be reached.
    pub(crate) struct Untouchable;

    impl ObjectSource for Untouchable {
        fn get(&self, _: &KindRef, _: Option<&str>, _: &str) -> Result<Option<Arc<str>>, String> {
            panic!("read reached the object source")
        }

        fn list(
            &self,
            _: &KindRef,
            _: Option<&str>,
            _: Option<&str>,
        ) -> Result<Vec<Arc<str>>, String> {
            panic!("read reached the object source")
        }
    }

    /// A source with `n` objects of `size` bytes each.
    struct Many(usize, usize);

    impl ObjectSource for Many {
        fn get(&self, _: &KindRef, _: Option<&str>, _: &str) -> Result<Option<Arc<str>>, String> {
            Ok(Some("x".repeat(self.1).into()))
        }

        fn list(
            &self,
            _: &KindRef,
            _: Option<&str>,
            _: Option<&str>,
        ) -> Result<Vec<Arc<str>>, String> {
            let one: Arc<str> = "x".repeat(self.1).into();
            Ok(vec![one; self.0])
        }
    }

    /// The store data of a call that reads from `objects` and must end by `deadline`.
    pub(crate) fn state(objects: Arc<dyn ObjectSource>, deadline: Instant) -> SandboxState {
        let mut state = SandboxState::new(
            &Limits::default(),
            objects,
            CallIdentity {
                plugin: "p".into(),
                key: "ns/k".into(),
                log_rate: Arc::new(LogRate::new(LogRateConfig::default())),
                cpu: None,
            },
        );
        state.deadline = deadline;
        state
    }

    fn pod() -> KindRef {
        KindRef::new("v1", "Pod")
    }

    #[tokio::test]
    async fn imports_after_the_deadline_fail_the_call_as_a_timeout() {
        let mut s = state(Arc::new(Untouchable), Instant::now());
        let err = s.import_list(pod(), None, None).await.unwrap_err();
        assert!(err.downcast_ref::<DeadlineExceeded>().is_some(), "{err:#}");
        let err = s.import_get(pod(), None, "a".into()).await.unwrap_err();
        assert!(err.downcast_ref::<DeadlineExceeded>().is_some(), "{err:#}");
        let err = s.import_log(LogLevel::Info, "late").unwrap_err();
        assert!(err.downcast_ref::<DeadlineExceeded>().is_some(), "{err:#}");
    }

    #[tokio::test]
    async fn oversized_arguments_are_refused_before_the_source_sees_them() {
        let later = Instant::now() + Duration::from_secs(60);
        let mut s = state(Arc::new(Untouchable), later);
        let huge = "a".repeat(10 << 20);
        let selector = Some(format!("!{}", "k,!".repeat(1_000_000)));
        let refused = [
            s.import_list(pod(), None, selector).await,
            s.import_list(pod(), Some(huge.clone()), None).await,
            s.import_get(pod(), None, huge.clone())
                .await
                .map(|r| r.map(|_| vec![])),
            s.import_get(
                KindRef {
                    api_version: "v1".into(),
                    kind: huge.clone(),
                },
                None,
                "a".into(),
            )
            .await
            .map(|r| r.map(|_| vec![])),
        ];
        for r in refused {
            let message = r.unwrap().unwrap_err();
            assert!(message.contains("longer than the limit"), "{message}");
            assert!(message.len() < 512, "the error repeats the argument");
        }
    }

    #[tokio::test]
    async fn reads_are_bounded_in_bytes_per_call() {
        let later = Instant::now() + Duration::from_secs(60);
        let mut s = state(Arc::new(Many(100_000, 200)), later);
        let err = s.import_list(pod(), None, None).await.unwrap().unwrap_err();
        assert!(err.contains("more than the"), "{err}");
        // Small reads share what is left of the budget.
        let mut s = state(Arc::new(Many(1, 6 << 20)), later);
        assert!(s.import_get(pod(), None, "a".into()).await.unwrap().is_ok());
        assert!(s.import_get(pod(), None, "a".into()).await.unwrap().is_ok());
        assert!(
            s.import_get(pod(), None, "a".into())
                .await
                .unwrap()
                .is_err()
        );
    }
}
