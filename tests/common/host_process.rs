//! `kubeplug run --embedded` as a child process, its stderr read line by line; killed if a
//! test fails while it runs (it would otherwise hold the test's output pipe open).

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use tempfile::TempDir;

pub struct HostProcess {
    child: Child,
    lines: Receiver<String>,
    /// Every stderr line read so far.
    pub seen: String,
    _tmp: TempDir,
}

impl HostProcess {
    /// Starts `kubeplug run --embedded --plugins <plugins> <args>` with its own kubeconfig
    /// output and state directory and the tests' shared compile cache, logging at info.
    pub fn start(plugins: &Path, args: &[&str]) -> HostProcess {
        let mut all = vec!["--plugins", plugins.to_str().unwrap()];
        all.extend_from_slice(args);
        HostProcess::start_run(&all)
    }

    /// Starts `kubeplug run --embedded <args>` (where the plugins come from is in `args`).
    pub fn start_run(args: &[&str]) -> HostProcess {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubeplug"))
            .args(["run", "--embedded"])
            .arg("--kubeconfig-out")
            .arg(tmp.path().join("kc"))
            .args(args)
            .env("KUBEPLUG_CACHE_DIR", super::compile_cache())
            .env("KUBEPLUG_STATE_DIR", tmp.path().join("state"))
            .env("KUBEPLUG_LOG", "info")
            .env_remove("KUBECONFIG")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(std::io::Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        HostProcess {
            child,
            lines,
            seen: String::new(),
            _tmp: tmp,
        }
    }

    /// The kubeconfig of the host's embedded API server (`--kubeconfig-out`), for kubectl.
    pub fn kubeconfig(&self) -> std::path::PathBuf {
        self._tmp.path().join("kc")
    }

    /// Reads stderr for `within`, or until a line holds `needle`; returns whether one did.
    pub fn saw_within(&mut self, needle: &str, within: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(50)) {
                let hit = line.contains(needle);
                self.push(line);
                if hit {
                    return true;
                }
            }
        }
        false
    }

    fn push(&mut self, line: String) {
        self.seen.push_str(&line);
        self.seen.push('\n');
    }

    /// Sends `signal` (as `kill` spells it: `-HUP`, `-TERM`).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// SIGTERMs it and waits: whether it exited 0, and all its stderr.
    pub fn terminate(mut self) -> (bool, String) {
        self.signal("-TERM");
        let status = self.child.wait().unwrap();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.push(line);
        }
        (status.success(), std::mem::take(&mut self.seen))
    }

    /// SIGTERMs it and waits at most `limit` for it to exit: `None` if it is still running
    /// then (it is killed when dropped), else whether it exited 0 and all its stderr.
    pub fn terminate_within(mut self, limit: Duration) -> Option<(bool, String)> {
        self.signal("-TERM");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > limit {
                return None;
            }
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(50)) {
                self.push(line);
            }
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.push(line);
        }
        Some((status.success(), std::mem::take(&mut self.seen)))
    }

    /// The value after `marker` in the first line seen holding `needle` (trailing `.` and
    /// `,` trimmed): an address the host logged, say.
    pub fn logged(&self, needle: &str, marker: &str) -> String {
        self.seen
            .lines()
            .find(|l| l.contains(needle))
            .and_then(|l| l.split(marker).nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {marker} in a line with {needle:?}: {}", self.seen))
            .trim_end_matches(['.', ','])
            .to_string()
    }

    /// SIGTERMs it, asserts it exited 0, and returns all its stderr.
    pub fn stop(self) -> String {
        let (ok, seen) = self.terminate();
        assert!(ok, "{seen}");
        seen
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
