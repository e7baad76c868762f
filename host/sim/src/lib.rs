//! kubeplug-sim: the embedded Kubernetes API server.
//!
//! A real HTTP/1.1 server on loopback that speaks the Kubernetes REST protocol for the kinds
//! kubeplug uses (discovery, CRUD, list and watch with label and field selectors, merge,
//! JSON, strategic-merge and server-side-apply patches, status and scale subresources,
//! Deployment status simulation, garbage collection, fault injection), so the host and
//! `kubectl` run the same client code as against a real cluster. It keeps everything in
//! memory and has no admission or aggregated discovery. Authentication (bearer tokens),
//! RBAC authorization, impersonation and the access reviews are off unless
//! [`SimBuilder::rbac`] turns them on; `README.md` beside this crate's manifest says exactly
//! where it differs from a real API server. It serves plain HTTP unless [`SimBuilder::tls`]
//! turns on HTTPS with a CA of its own (what kubectl needs to send tokens).
//!
//! It is a product of its own, not a test double: `kubeplug sim` serves it, `kubeplug run
//! --embedded` and the demo start it in-process, and the integration tests run against it.
//! It is its own crate so that it builds, tests and benchmarks on its own, and the host's
//! library builds without it. What both sides use and what belongs to the Kubernetes API,
//! the label selector syntax ([`selector`]), the patch types ([`PatchType`]) and DNS names,
//! lives in the crate below both, `kubeplug_vocab`; this crate never depends on `kubeplug`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubeplug_sim::SimError> {
//! use std::time::Duration;
//! let sim = kubeplug_sim::Sim::builder()
//!     .history(10_000)
//!     .status_delay(Duration::from_millis(200))
//!     .start()
//!     .await?;
//! let client = sim.client()?;
//! # let _ = client; Ok(()) }
//! ```

pub mod access_review;
pub mod attributes;
mod auth;
pub mod authn;
mod bootstrap_policy;
mod delete;
pub mod discovery;
pub mod errors;
mod events;
pub mod fault_schedule;
pub mod faults;
mod gc;
pub mod impersonation;
mod jsonpath;
pub mod kinds;
pub mod kubeconfig;
mod list;
pub mod load;
mod objects;
pub mod patch;
mod pod_status;
mod protobuf;
pub mod rbac;
pub mod request_log;
mod response_faults;
mod scale;
mod schema;
pub mod selectors;
mod server;
mod server_side_apply;
mod state;
mod status_sim;
pub mod store;
mod table;
pub mod tls;
mod validation;
mod watch;
mod watch_faults;

pub use attributes::{Attributes, ResourceAttributes};
pub use authn::UserInfo;
pub use errors::ApiError;
pub use fault_schedule::{Fault, Match, Rule, Schedule, ScheduleError, ScheduleReport};
pub use faults::{ErrorFault, FaultRequest, FaultState, Faults, HoldFault};
pub use kinds::{PrinterColumn, Registry, ResourceKind};
pub use kubeplug_vocab::selector;
pub use load::LoadError;
pub use patch::PatchType;
pub use request_log::{RequestLog, RequestRecord};

use serde_json::Value;
use state::{Config, Shared};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use store::Store;
use tokio::task::JoinHandle;

/// Why the sim could not start or a library call failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The listening socket could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// Address tried.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Manifests or CRD files could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// An object or CRD was refused.
    #[error("{context}: {source}")]
    Api {
        /// Which object.
        context: String,
        /// The API error.
        source: ApiError,
    },
    /// The fault schedule is not valid.
    #[error("fault schedule: {0}")]
    Faults(#[from] ScheduleError),
    /// The kube client could not be built.
    #[error("building kube client: {0}")]
    Client(#[from] kube::Error),
    /// The kubeconfig could not be produced or written.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The certificates or TLS configuration could not be made.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// Configures and starts a [`Sim`].
#[derive(Debug, Clone)]
pub struct SimBuilder {
    port: u16,
    history: usize,
    watch_buffer: usize,
    request_log: usize,
    status_delay: Duration,
    bookmark_interval: Duration,
    auto_create_namespaces: bool,
    record_write_bodies: bool,
    kinds: Vec<ResourceKind>,
    crd_files: Vec<PathBuf>,
    load_dirs: Vec<PathBuf>,
    manifests: Vec<String>,
    rbac: bool,
    tls: bool,
    schedule: Option<Schedule>,
}

impl Default for SimBuilder {
    fn default() -> Self {
        Self {
            port: 0,
            history: 10_000,
            watch_buffer: 16_384,
            request_log: 100_000,
            status_delay: Duration::from_millis(200),
            bookmark_interval: Duration::from_secs(10),
            auto_create_namespaces: false,
            record_write_bodies: false,
            kinds: Vec::new(),
            crd_files: Vec::new(),
            load_dirs: Vec::new(),
            manifests: Vec::new(),
            rbac: false,
            tls: false,
            schedule: None,
        }
    }
}

impl SimBuilder {
    /// Port on 127.0.0.1 (0, the default, picks a free one).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Number of events kept for watch replay (default 10,000); older resourceVersions get 410.
    pub fn history(mut self, events: usize) -> Self {
        self.history = events;
        self
    }

    /// How many events a watcher may lag behind before its watch is closed (default 16,384).
    pub fn watch_buffer(mut self, events: usize) -> Self {
        self.watch_buffer = events;
        self
    }

    /// Number of requests the request log keeps (default 100,000).
    pub fn request_log_capacity(mut self, records: usize) -> Self {
        self.request_log = records;
        self
    }

    /// Delay before a Deployment's status reaches its spec and a Pod runs (default 200 ms).
    pub fn status_delay(mut self, delay: Duration) -> Self {
        self.status_delay = delay;
        self
    }

    /// Interval of BOOKMARK events on watches that allow them (default 10 s).
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Create missing namespaces on first write instead of answering 404 (default off).
    pub fn auto_create_namespaces(mut self, on: bool) -> Self {
        self.auto_create_namespaces = on;
        self
    }

    /// Keep each write's JSON body in the request log ([`RequestRecord::body`]), so a test
    /// can check what a client wrote, not only where (default off: bodies cost memory).
    pub fn record_write_bodies(mut self, on: bool) -> Self {
        self.record_write_bodies = on;
        self
    }

    /// Authentication by bearer token and RBAC authorization, impersonation and the access
    /// reviews checked as a real API server does (default off: every request is allowed, as
    /// the sim's administrator). On, the sim starts with the bootstrap ClusterRoles and
    /// bindings (`cluster-admin` for `system:masters`, discovery and self reviews for every
    /// authenticated user, `admin`/`edit`/`view`); [`Sim::client`] and the kubeconfig carry
    /// the administrator's token (user `kubeplug-admin` in `system:masters`); other users'
    /// tokens come from [`Sim::token_for`] and [`Sim::service_account_token`].
    pub fn rbac(mut self, on: bool) -> Self {
        self.rbac = on;
        self
    }

    /// HTTPS instead of plain HTTP (default off): at start the sim makes a CA and a server
    /// certificate for `127.0.0.1`, `::1` and `localhost` in memory; [`Sim::url`] is
    /// `https://`, and [`Sim::client`] and the kubeconfigs trust that CA. kubectl sends a
    /// kubeconfig's token and `--as` only over TLS, so kubectl with [`SimBuilder::rbac`] needs
    /// this.
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// Injects faults by `schedule` from the start (also settable later through
    /// [`Sim::faults`] and `POST /sim/faults`).
    pub fn fault_schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// Registers a custom kind.
    pub fn kind(mut self, kind: ResourceKind) -> Self {
        self.kinds.push(kind);
        self
    }

    /// Registers the kinds of a CRD YAML file (the CRD objects are stored too).
    pub fn crd_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.crd_files.push(path.into());
        self
    }

    /// Loads every YAML/JSON manifest of a directory at start (CRDs first, then namespaces).
    pub fn load_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.load_dirs.push(dir.into());
        self
    }

    /// Loads multi-document YAML text at start.
    pub fn manifest(mut self, yaml: impl Into<String>) -> Self {
        self.manifests.push(yaml.into());
        self
    }

    /// Binds 127.0.0.1, seeds namespaces `default` and `kube-system` and the configured
    /// content, and serves until the returned [`Sim`] is dropped.
    pub async fn start(self) -> Result<Sim, SimError> {
        let mut registry = Registry::builtin();
        for kind in self.kinds {
            registry.register(kind);
        }
        let mut seeds = load::Seeds::default();
        for file in &self.crd_files {
            seeds.add(load::read_file(file)?);
        }
        for dir in &self.load_dirs {
            load::read_dir(dir, &mut seeds)?;
        }
        for (i, text) in self.manifests.iter().enumerate() {
            seeds.add(load::parse_documents(text, &format!("manifest #{i}"))?);
        }
        for crd in seeds.crds() {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let kinds = kinds::kinds_from_crd(crd).map_err(|source| SimError::Api {
                context: format!("CRD {name}"),
                source,
            })?;
            for kind in kinds {
                registry.register(kind);
            }
        }
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            store: Store::new(self.history, self.watch_buffer),
            registry: RwLock::new(registry),
            faults: Faults::default(),
            log: RequestLog::new(self.request_log),
            config: Config {
                auto_create_namespaces: self.auto_create_namespaces,
                bookmark_interval: self.bookmark_interval,
                status_delay: self.status_delay,
                rbac: self.rbac,
                record_write_bodies: self.record_write_bodies,
            },
            shutdown: shutdown_rx.clone(),
            tokens: authn::Tokens::new(),
            admin: Arc::new(UserInfo::admin()),
        });
        for ns in ["default", "kube-system"] {
            let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            seed(&shared, namespace).map_err(|source| SimError::Api {
                context: format!("namespace {ns}"),
                source,
            })?;
        }
        if self.rbac {
            let mut policy = load::parse_documents(bootstrap_policy::YAML, "bootstrap policy")?;
            load::creation_order(&mut policy);
            for object in policy {
                let what = describe(&object);
                seed(&shared, object).map_err(|source| SimError::Api {
                    context: what,
                    source,
                })?;
            }
        }
        for object in seeds.into_objects() {
            let what = describe(&object);
            seed(&shared, object).map_err(|source| SimError::Api {
                context: what,
                source,
            })?;
        }
        let certificates = self.tls.then(tls::Certificates::generate).transpose()?;
        let tls_config = certificates
            .as_ref()
            .map(tls::Certificates::server_config)
            .transpose()?;
        if let Some(schedule) = self.schedule {
            shared.faults.set_schedule(schedule)?;
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| SimError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SimError::Bind { addr, source })?;
        let app = server::router(shared.clone());
        let server = match tls_config {
            Some(config) => tokio::spawn(serve(
                tls::TlsListener::new(listener, config),
                app,
                shutdown_rx,
            )),
            None => {
                // Watch events are small writes that follow each other: with Nagle's
                // algorithm on, one waits for the client's delayed ACK of the last
                // (measured: 20–40 ms).
                let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                tokio::spawn(serve(listener, app, shutdown_rx))
            }
        };
        let tasks = vec![
            tokio::spawn(status_sim::run(shared.clone())),
            tokio::spawn(gc::run(shared.clone())),
        ];
        tracing::info!(%addr, rbac = self.rbac, tls = self.tls, "sim API server listening");
        Ok(Sim {
            shared,
            addr,
            certificates,
            shutdown: shutdown_tx,
            server: Some(server),
            tasks,
        })
    }
}

/// Serves `app` on `listener` until `stop` turns true.
async fn serve<L>(listener: L, app: axum::Router, mut stop: tokio::sync::watch::Receiver<bool>)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let shutdown = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    if let Err(err) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(%err, "sim server failed");
    }
}

/// Writes a kubeconfig readable by its owner only (it may hold a token).
fn write_yaml(config: &kube::config::Kubeconfig, path: &Path) -> Result<(), SimError> {
    use std::io::Write;
    let text = kubeconfig::to_yaml(config).map_err(|e| SimError::Kubeconfig(e.to_string()))?;
    let failed =
        |e: std::io::Error| SimError::Kubeconfig(format!("writing {}: {e}", path.display()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(failed)
}

fn describe(object: &Value) -> String {
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or("<no kind>"),
        object["metadata"]["namespace"].as_str().unwrap_or(""),
        object["metadata"]["name"].as_str().unwrap_or("<no name>")
    )
}

/// Creates or replaces one object (namespace defaulted to `default`).
fn seed(shared: &Shared, mut object: Value) -> Result<Arc<Value>, ApiError> {
    let api_version = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind_name = object["kind"].as_str().unwrap_or_default().to_string();
    let kind = shared
        .registry()
        .by_type(&api_version, &kind_name)
        .ok_or_else(|| {
            ApiError::no_route(&format!(
                "no kind {kind_name} in {api_version} is registered"
            ))
        })?;
    let ns = if kind.namespaced {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_string();
        object["metadata"]["namespace"] = Value::String(ns.clone());
        ns
    } else {
        String::new()
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let crd = kind.group == "apiextensions.k8s.io" && kind.kind == "CustomResourceDefinition";
    if crd {
        kinds::kinds_from_crd(&object)?;
    }
    let stored = seed_object(shared, &kind, &ns, &name, object)?;
    if crd {
        server::register_crd(shared, &stored);
    }
    Ok(stored)
}

/// Creates or replaces one object of `kind` in `ns` (its namespace created as needed).
fn seed_object(
    shared: &Shared,
    kind: &ResourceKind,
    ns: &str,
    name: &str,
    mut object: Value,
) -> Result<Arc<Value>, ApiError> {
    const MANAGER: &str = "kubeplug-sim";
    if !name.is_empty() && shared.store.get(&kind.storage_name(), ns, name).is_some() {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        return shared.update(kind, ns, name, object, objects::Sub::Main, MANAGER);
    }
    let namespace = kind.namespaced.then_some(ns);
    if kind.namespaced && shared.store.get("namespaces", "", ns).is_none() {
        let namespace =
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        let ns_kind = shared.kind("namespaces")?;
        shared.create(&ns_kind, None, namespace, MANAGER, false)?;
    }
    shared.create(kind, namespace, object, MANAGER, false)
}

/// A running embedded API server. Dropping it stops the server, ends every watch and the
/// background controllers.
pub struct Sim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    certificates: Option<tls::Certificates>,
    shutdown: tokio::sync::watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Sim {
    /// A builder with defaults (random port, history 10,000, status delay 200 ms).
    pub fn builder() -> SimBuilder {
        SimBuilder::default()
    }

    /// Starts a sim with all defaults.
    pub async fn start() -> Result<Self, SimError> {
        SimBuilder::default().start().await
    }

    /// `http://127.0.0.1:<port>`, or `https://` when it serves TLS ([`SimBuilder::tls`]).
    pub fn url(&self) -> String {
        let scheme = if self.certificates.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA certificate the sim's server certificate is signed by, PEM, when it serves TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.certificates.as_ref().map(tls::Certificates::ca_pem)
    }

    /// The same CA certificate, DER.
    pub fn ca_der(&self) -> Option<&[u8]> {
        self.certificates.as_ref().map(tls::Certificates::ca_der)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A `kube::Client` for this sim (default namespace `default`; over TLS trusting the
    /// sim's CA when it serves TLS), as the administrator when authorization is on.
    pub fn client(&self) -> Result<kube::Client, SimError> {
        self.client_as(self.admin_token())
    }

    /// A `kube::Client` that sends `token` (from [`Sim::token_for`] or
    /// [`Sim::service_account_token`]) as its bearer token.
    pub fn client_with_token(&self, token: &str) -> Result<kube::Client, SimError> {
        self.client_as(Some(token))
    }

    fn client_as(&self, token: Option<&str>) -> Result<kube::Client, SimError> {
        Ok(kube::Client::try_from(self.config_as(token)?)?)
    }

    /// The `kube::Config` of [`Sim::client`] (the administrator's token when authorization
    /// is on), to change before building a client: impersonation
    /// (`auth_info.impersonate`, `impersonate_groups`), timeouts.
    pub fn kube_config(&self) -> Result<kube::Config, SimError> {
        self.config_as(self.admin_token())
    }

    /// The `kube::Config` of [`Sim::client_with_token`].
    pub fn kube_config_with_token(&self, token: &str) -> Result<kube::Config, SimError> {
        self.config_as(Some(token))
    }

    fn config_as(&self, token: Option<&str>) -> Result<kube::Config, SimError> {
        let uri: axum::http::Uri = self
            .url()
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| SimError::Kubeconfig(e.to_string()))?;
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        config.root_cert = self.ca_der().map(|der| vec![der.to_vec()]);
        if let Some(token) = token {
            config.auth_info.token = Some(token.to_string().into());
        }
        Ok(config)
    }

    /// Whether authentication and RBAC authorization are on ([`SimBuilder::rbac`]).
    pub fn rbac(&self) -> bool {
        self.shared.config.rbac
    }

    /// The administrator's bearer token (user `kubeplug-admin` in `system:masters`), which
    /// [`Sim::client`] and the kubeconfig send; `None` when authorization is off.
    pub fn admin_token(&self) -> Option<&str> {
        self.rbac().then(|| self.shared.tokens.admin())
    }

    /// Registers a new random bearer token for `user` in `groups` (`system:authenticated` is
    /// added) and returns it.
    pub fn token_for(&self, user: &str, groups: &[&str]) -> String {
        self.shared.tokens.issue(UserInfo::new(user, groups))
    }

    /// Registers a new random bearer token for the ServiceAccount `namespace`/`name` (user
    /// `system:serviceaccount:NS:NAME` in `system:serviceaccounts`,
    /// `system:serviceaccounts:NS` and `system:authenticated`) and returns it. The
    /// ServiceAccount object need not exist.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let user = authn::service_account_user(namespace, name);
        let groups = authn::service_account_groups(namespace);
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        self.token_for(&user, &groups)
    }

    /// A kubeconfig pointing at this sim (context `kubeplug-sim`, namespace `default`), with
    /// the administrator's token when authorization is on and the CA when it serves TLS.
    pub fn kubeconfig(&self) -> Result<kube::config::Kubeconfig, SimError> {
        kubeconfig::build(&self.url(), self.admin_token(), self.ca_pem())
            .map_err(|e| SimError::Kubeconfig(e.to_string()))
    }

    /// Writes the kubeconfig as YAML (for kubectl: `kubectl --kubeconfig <path> get deploy`).
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), SimError> {
        write_yaml(&self.kubeconfig()?, path.as_ref())
    }

    /// Writes a kubeconfig that sends `token` (for `kubectl --kubeconfig` and `kubeplug run
    /// --kubeconfig` as that user).
    pub fn kubeconfig_with_token(
        &self,
        token: &str,
        path: impl AsRef<Path>,
    ) -> Result<(), SimError> {
        let config = kubeconfig::build(&self.url(), Some(token), self.ca_pem())
            .map_err(|e| SimError::Kubeconfig(e.to_string()))?;
        write_yaml(&config, path.as_ref())
    }

    /// The request log.
    pub fn requests(&self) -> &RequestLog {
        &self.shared.log
    }

    /// The fault switches.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// An object by resource (`deployments`, `deployments.apps`, `deploy`, kind name),
    /// namespace (`None` means `default`; ignored for cluster-scoped kinds) and name.
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let kind = self.shared.registry().by_name(resource)?;
        let ns = if kind.namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        self.shared
            .store
            .get(&kind.storage_name(), ns, name)
            .map(|o| kind.from_stored(&o).unwrap_or_else(|| (*o).clone()))
    }

    /// Objects of a resource, in one namespace or all (`None`).
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<Value> {
        let Some(kind) = self.shared.registry().by_name(resource) else {
            return Vec::new();
        };
        let (items, _, _) =
            self.shared
                .store
                .list(&kind.storage_name(), namespace, None, None, |_| true);
        items
            .iter()
            .map(|o| kind.from_stored(o).unwrap_or_else(|| (**o).clone()))
            .collect()
    }

    /// Number of objects of a resource, in one namespace or all (`None`).
    pub fn count(&self, resource: &str, namespace: Option<&str>) -> usize {
        self.shared
            .registry()
            .by_name(resource)
            .map_or(0, |k| self.shared.store.count(&k.storage_name(), namespace))
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Creates or replaces the objects of multi-document YAML (namespaces created as needed,
    /// `default` when none is given); returns them as stored.
    pub fn apply_yaml(&self, yaml: &str) -> Result<Vec<Value>, SimError> {
        let mut objects = load::parse_documents(yaml, "<yaml>")?;
        load::creation_order(&mut objects);
        let mut out = Vec::new();
        for object in objects {
            let what = describe(&object);
            out.push(
                (*seed(&self.shared, object).map_err(|source| SimError::Api {
                    context: what,
                    source,
                })?)
                .clone(),
            );
        }
        Ok(out)
    }

    /// Stops serving and waits for the server to finish (dropping does the same without
    /// waiting).
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for task in &self.tasks {
            task.abort();
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}
