//! A real OCI registry for the tests: Debian's `docker-registry` (CNCF distribution 2.8),
//! started on 127.0.0.1 with a temporary folder and, where asked, basic authentication
//! (an htpasswd file of bcrypt hashes, the only form distribution reads). Without the package
//! the tests say so and skip, except under `CI=true`, where they fail (`make test-deps`
//! installs it).

use kubeplug::oci::{OciRef, RegistryArgs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A registry process on 127.0.0.1, stopped when dropped.
pub struct Registry {
    child: Option<Child>,
    /// `127.0.0.1:PORT`, as references and `--insecure-registry` name it.
    pub addr: String,
    root: tempfile::TempDir,
    config: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Registry {
    /// Starts one without authentication, or `None` (after saying why) where the package is
    /// missing outside CI.
    pub fn start() -> Option<Registry> {
        Registry::start_with(None)
    }

    /// Starts one that asks for `user` and `password` (HTTP basic) on every request.
    pub fn start_with_auth(user: &str, password: &str) -> Option<Registry> {
        Registry::start_with(Some((user, password)))
    }

    fn start_with(auth: Option<(&str, &str)>) -> Option<Registry> {
        let install = "`make test-deps` installs the Debian package docker-registry";
        if !crate::common::tool("docker-registry", &["--version"], install) {
            return None;
        }
        for _ in 0..5 {
            let root = tempfile::tempdir().unwrap();
            let addr = crate::common::free_addr();
            let mut text = format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {}}}, delete: {{enabled: true}}}}\nhttp: {{addr: \"{addr}\"}}\n",
                root.path().join("data").display()
            );
            if let Some((user, password)) = auth {
                let htpasswd = root.path().join("htpasswd");
                let hash = bcrypt::hash(password, 4).unwrap();
                std::fs::write(&htpasswd, format!("{user}:{hash}\n")).unwrap();
                text.push_str(&format!(
                    "auth: {{htpasswd: {{realm: kubeplug-test, path: {}}}}}\n",
                    htpasswd.display()
                ));
            }
            let config = root.path().join("config.yml");
            std::fs::write(&config, text).unwrap();
            let mut reg = Registry {
                child: None,
                addr,
                root,
                config,
            };
            if reg.spawn_and_wait(auth.is_some()) {
                return Some(reg);
            }
        }
        panic!("docker-registry did not start");
    }

    /// Starts the process on the same port and storage; false if it did not answer in 10 s.
    fn spawn_and_wait(&mut self, auth: bool) -> bool {
        let child = Command::new("docker-registry")
            .args(["serve", self.config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let ready = if auth { 401 } else { 200 };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                return false; // the port was taken meanwhile
            }
            if std::net::TcpStream::connect(&self.addr).is_ok()
                && crate::common::http(&self.addr, "GET", "/v2/", &[], "").0 == ready
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Stops the process (the storage stays): a registry that is down.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same address and storage.
    pub fn restart(&mut self) {
        self.stop();
        let auth = std::fs::read_to_string(&self.config)
            .unwrap()
            .contains("htpasswd");
        assert!(self.spawn_and_wait(auth), "docker-registry did not restart");
    }

    /// The file of blob `hex` in the registry's storage.
    pub fn blob_file(&self, hex: &str) -> PathBuf {
        self.root
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// `oci://ADDR/REPO_TAG`.
    pub fn reference(&self, repo_tag: &str) -> OciRef {
        OciRef::parse(&format!("oci://{}/{repo_tag}", self.addr)).unwrap()
    }

    /// Registry flags for this registry (plain HTTP) with the module cache in `cache`.
    pub fn args(&self, cache: &Path) -> RegistryArgs {
        RegistryArgs {
            insecure_registry: vec![self.addr.clone()],
            module_cache: Some(cache.to_path_buf()),
            max_module_mib: 64,
            ..RegistryArgs::default()
        }
    }
}
