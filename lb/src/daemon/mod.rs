//! `lb run`: the daemon. Opens the pinned datapath of its interface (`datapath`:
//! adopts it, or creates it), applies the configuration merged with the runtime changes
//! of its state file, attaches (replacing the program of a pinned link atomically), then
//! serves the control socket (one task per connection, within the protocol's limits:
//! [`crate::control::server`]; `lb trace` streams: `trace`), serves the metrics
//! endpoint ([`metrics`], `http`) and the remote API (`remote`), counts live connections with a periodic conntrack
//! walk ([`connections`]), reloads on SIGHUP and when the file's bytes change
//! (`watch`, debounced), samples counters every second (`stats`), checks and mends
//! its pins and its XDP link every second (`pins`), and tells systemd when it is ready
//! (`notify`).
//!
//! SIGINT/SIGTERM stop the daemon and leave the datapath forwarding with its last
//! state (health checks and changes pause until the next start), unless
//! `detach_on_exit` is set; `lb detach` removes it by hand. At the signal the daemon
//! first says it is exiting and gives up its socket, so a new daemon can start at once.
//! The announcement routes are left as the exit leaves the datapath ([`announce`]),
//! then a running `lb trace` is switched off: nobody would read its records.
//!
//! The logic is in [`service`] (tested without root); this module is the event loop
//! and the parts that need the real system (privileges, the interface's MAC, the
//! socket, signals, file watching). Health checks run on their own runtime thread
//! ([`health`]) and send their batches of transitions to the event loop; the backends'
//! next hops are watched by [`nexthop`]. After every change the VIP addresses this
//! instance can serve are published for BGP ([`announce`]).

pub mod announce;
mod change;
pub mod cleaning;
pub mod connections;
mod conns;
mod datapath;
pub mod drains;
pub mod health;
mod http;
mod link_events;
pub mod metrics;
mod neighbours;
pub mod nexthop;
mod notify;
pub mod offline;
mod pins;
mod push;
mod remote;
pub mod service;
mod start_phases;
pub mod state_file;
mod stats;
#[cfg(test)]
mod test_fixture;
mod trace;
mod watch;

use std::{
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, bail};
use tokio::{
    net::UnixListener,
    signal::unix::{SignalKind, signal},
    sync::{mpsc, oneshot},
};
use tracing::{debug, error, info, warn};

use crate::{
    config::{Config, Loaded, XdpMode},
    control::{
        Request,
        server::{self, Limits, Reply, ServeError},
    },
    controller::{ApplyReport, Controller},
};
use datapath::{CreatedDatapath, OpenedDatapath};
use lb_dataplane::{
    ActivityClock, AttachMode, ConntrackWalker, Dataplane as _, KernelDataplane, TraceReader,
    WalkSettings, offload,
};
use lb_health::coalesce::Batch;
use metrics::{Recorder, ReloadResult};
use service::Service;
use start_phases::StartPhases;
use state_file::StateFile;
pub use stats::RATE_WINDOW;
use watch::LastSeen;

/// Quiet time after a file change before reloading.
const DEBOUNCE: Duration = Duration::from_millis(300);
/// Counter sampling period for rates.
const SAMPLE_PERIOD: Duration = Duration::from_secs(1);
/// How long the control socket waits, after READY=1, for the first cleaning walk, so
/// that the first `lb status` already shows each VIP's slot states. The walk reads every
/// table's slots and both conntrack maps: about 13 ms at one VIP, 0.3 s with a million
/// pins. Past this bound the socket answers anyway, without them.
const FIRST_WALK_WAIT: Duration = Duration::from_secs(2);

/// How `lb run` is asked to start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// The configuration file.
    pub config: PathBuf,
    /// Discard the pinned datapath (and its connection tracking) and start fresh.
    pub reset: bool,
    /// Load the XDP object from this file instead of the embedded one (upgrade tests).
    pub object: Option<PathBuf>,
}

/// The MAC of `iface` (`/sys/class/net/<iface>/address`).
fn interface_mac(iface: &str) -> anyhow::Result<[u8; 6]> {
    let path = format!("/sys/class/net/{iface}/address");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("interface {iface} not found ({path})"))?;
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = text.trim().split(':').collect();
    if parts.len() != 6 {
        bail!("{path}: unexpected MAC {:?}", text.trim());
    }
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).with_context(|| format!("{path}: bad MAC"))?;
    }
    Ok(mac)
}

/// In FIB next-hop mode, has the kernel keep the backends' next hops resolved.
fn manage_neighbours(service: &Service<KernelDataplane>) {
    let Some(desired) = service.controller().applied() else {
        return;
    };
    if desired.globals.nexthop != crate::config::Nexthop::Fib {
        return;
    }
    let backends = desired
        .vips
        .values()
        .flat_map(|v| v.backends.keys().map(lb_maglev::BackendKey::ip))
        .collect::<Vec<_>>();
    neighbours::manage(service.interface(), backends);
    service.watch_nexthops();
}

/// After an interface came up or a route was added (`events`), installs the backends'
/// managed neighbour entries again: a link that went down took them with it.
fn neighbours_again(service: &Service<KernelDataplane>, events: &[link_events::LinkEvent]) {
    for event in events {
        if let link_events::LinkEvent::Up(index) = event {
            info!(
                "interface {} came up: installing the backends' managed neighbours again",
                link_events::name_of(*index)
            );
        }
    }
    manage_neighbours(service);
}

/// Gives the heap pages freed by the start back to the system: parsing the file and
/// building every table leave free chunks inside the heap that the allocator keeps
/// resident (about a third of the heap with 500 VIPs). glibc's `malloc_trim(3)`
/// releases them (`MADV_DONTNEED` on whole free pages), which keeps the daemon's
/// resident memory to what it holds.
fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only returns free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn log_report(report: &ApplyReport) {
    for line in report.lines() {
        info!("{line}");
    }
    for w in report.warnings.iter().chain(&report.policy_changes) {
        warn!("{w}");
    }
}

/// Refuses `xdp_mode = "native"` on an interface with receive VLAN offload before the
/// datapath is opened (see [`attach`]), so that the refused start creates nothing.
fn refuse_native_early(config: &Config) -> anyhow::Result<()> {
    if config.xdp_mode == XdpMode::Native
        && let Some(problem) = offload::native_vlan_problem(&config.interface)
    {
        bail!("native XDP refused: {problem}");
    }
    Ok(())
}

/// Attaches in the configured mode; `auto` falls back from native to skb with a
/// warning. A pinned link is reused in the mode it has.
///
/// Native mode on an interface with receive VLAN offload would send tagged frames back
/// untagged (`dataplane::offload`): `native` refuses it, `auto` takes skb mode.
fn attach(dp: &mut KernelDataplane, iface: &str, mode: XdpMode) -> anyhow::Result<AttachMode> {
    let vlan_problem = match mode {
        XdpMode::Skb => None,
        XdpMode::Native | XdpMode::Auto => offload::native_vlan_problem(iface),
    };
    let wanted = match (mode, vlan_problem) {
        (XdpMode::Native, Some(problem)) => bail!("native XDP refused: {problem}"),
        (XdpMode::Auto, Some(problem)) => {
            warn!("{problem}; attaching in skb (generic) mode");
            AttachMode::Skb
        }
        (XdpMode::Native, None) => AttachMode::Native,
        (XdpMode::Skb, _) => AttachMode::Skb,
        (XdpMode::Auto, None) => match dp.attach(iface, AttachMode::Native) {
            Ok(()) => return Ok(dp.attached_mode().unwrap_or(AttachMode::Native)),
            Err(e) => {
                warn!("native XDP on {iface} failed ({e}); falling back to skb (generic) mode");
                AttachMode::Skb
            }
        },
    };
    dp.attach(iface, wanted)
        .with_context(|| format!("attaching XDP to {iface} in {wanted} mode"))?;
    let used = dp.attached_mode().unwrap_or(wanted);
    if used != wanted {
        warn!(
            "xdp_mode asks for {wanted} but the pinned link runs in {used} mode: kept (`lb detach --interface {iface}`, then start, to change it)"
        );
    }
    Ok(used)
}

/// Creates the control socket: its directory (0700) if missing, a stale socket file
/// removed, the socket itself 0600.
fn bind_socket(path: &Path) -> anyhow::Result<std::os::unix::net::UnixListener> {
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "control socket {} is in use by another process (an lb daemon for another interface?)",
                path.display()
            );
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

type Shared = Arc<Mutex<Service<KernelDataplane>>>;

/// The control socket's file, removed on drop (at exit, and when start-up fails after
/// the socket was bound) — only while it is still ours: a daemon started while this
/// one exits may have bound a new socket at the same path.
struct SocketFile {
    path: PathBuf,
    inode: Option<(u64, u64)>,
}

impl SocketFile {
    fn new(path: &Path) -> Self {
        let inode = std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        Self {
            path: path.to_path_buf(),
            inode,
        }
    }

    fn remove(&mut self) {
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if self.inode.is_some() && now == self.inode {
            let _ = std::fs::remove_file(&self.path);
        }
        self.inode = None;
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The first step of a stop, taken as the signal arrives: unless the datapath goes
/// with the daemon (`detach_on_exit`), the lock's owner record says it is exiting, so
/// that a daemon started meanwhile (`systemctl restart`, a supervisor that does not
/// wait) waits for the lock instead of refusing. The rest of the stop (announcements,
/// probes, the runtime's tasks) follows the event loop.
fn stopping(service: &Shared) -> anyhow::Result<()> {
    let mut service = service.lock().unwrap_or_else(|p| p.into_inner());
    if !service.detach_on_exit() {
        service.controller_mut().dataplane_mut().mark_exiting();
    }
    Ok(())
}

/// What the event loop's tasks share besides the service.
#[derive(Clone)]
struct Context {
    recorder: Arc<Recorder>,
    tracer: trace::Tracer,
}

impl Context {
    /// Logs a change and records its table builds and swaps for the metrics.
    fn report(&self, report: &ApplyReport) {
        log_report(report);
        self.recorder.observe(report);
    }
}

/// Answers one control connection (within the protocol's [`Limits`]).
async fn serve_one(
    stream: tokio::net::UnixStream,
    service: Shared,
    context: Context,
) -> Result<(), ServeError> {
    server::serve_streaming(stream, Limits::default(), |request, change_id| {
        answer(request, change_id, &service, &context)
    })
    .await
}

/// Answers one control request, from the socket or the remote API ([`remote`]);
/// `change_id`: the id a client sent with a change, recorded for `lb status`.
fn answer(
    request: &Request,
    change_id: Option<&str>,
    service: &Shared,
    context: &Context,
) -> Reply {
    if let Request::Trace { vip, client } = request {
        return context.tracer.start(service, *vip, *client);
    }
    if let Request::Reload = request {
        return Reply::Once(reload_request(service));
    }
    if let Request::PushLearn { toml } = request {
        return Reply::Once(push::learn_request(service, toml));
    }
    if let Request::PushConfig { toml, dry_run } = request {
        return Reply::Once(push::push_request(service, toml, *dry_run));
    }
    if let Request::Conns {
        vip,
        backend,
        client,
        state,
        limit,
    } = *request
    {
        let query = conns::Query {
            vip,
            backend,
            client,
            state,
            limit,
        };
        return conns::start(service, query);
    }
    let mut service = service.lock().unwrap_or_else(|p| p.into_inner());
    let response = service.handle(request, &mut |report| context.report(report));
    if let Some(id) = change_id {
        info!(
            "change {id}: {}",
            if response.ok { "applied" } else { "refused" }
        );
        service.record_change(id, request, &response);
    }
    if matches!(request, Request::Backend { .. } | Request::Overrides { .. }) && response.ok {
        manage_neighbours(&service);
    }
    service.sync_announcements();
    Reply::Once(response)
}

/// `lb reload`: what a reload of the daemon's file will change, then SIGHUP to this
/// process, so the event loop reloads exactly as on the operator's signal.
fn reload_request(service: &Shared) -> crate::control::Response {
    use crate::control::Response;
    let diff = {
        let s = service.lock().unwrap_or_else(|p| p.into_inner());
        let file = s.config_file().to_path_buf();
        match Config::load(&file) {
            Err(e) => return Response::error(format!("{}: {e}", file.display())),
            Ok(loaded) => s.diff(&loaded, &file),
        }
    };
    match diff {
        Ok(d) => {
            info!("lb reload: reloading as on SIGHUP");
            // SAFETY: raise(3) sends a signal to this process; SIGHUP is handled by
            // the event loop (tokio's signal handler), never the default action.
            unsafe { libc::raise(libc::SIGHUP) };
            Response::ok(d)
        }
        Err(e) => Response::error(e),
    }
}

/// Why a reload was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    Signal,
    FileChanged,
}

/// Reloads `path` unless its bytes are those last seen: then nothing happens, and only
/// a debug line (an info line for SIGHUP, which an operator sent) is logged. With
/// `reload = "signal"` a write of the file is logged and left for SIGHUP.
fn reload(service: &Shared, path: &Path, why: Trigger, seen: &mut LastSeen, context: &Context) {
    if why == Trigger::FileChanged
        && !service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reload_on_write()
    {
        info!(
            "{} changed; reload = \"signal\": not reloaded until SIGHUP",
            path.display()
        );
        return;
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            error!(
                "reload: cannot read {}: {e}; nothing applied",
                path.display()
            );
            return;
        }
    };
    if !seen.differs(&bytes) {
        match why {
            Trigger::Signal => info!("SIGHUP: {} is unchanged; nothing to do", path.display()),
            Trigger::FileChanged => debug!("{} rewritten with the same bytes", path.display()),
        }
        return;
    }
    let why = match why {
        Trigger::Signal => "SIGHUP",
        Trigger::FileChanged => "file changed",
    };
    info!("reloading {} ({why})", path.display());
    let loaded = String::from_utf8(bytes)
        .map_err(|e| format!("not UTF-8 text: {e}"))
        .and_then(|text| Config::from_toml(&text).map_err(|e| e.to_string()));
    match loaded {
        Err(e) => {
            context.recorder.reload(ReloadResult::Invalid);
            error!("reload: invalid configuration, nothing applied: {e}");
        }
        Ok(loaded) => {
            for w in &loaded.warnings {
                warn!("{w}");
            }
            let mut service = service.lock().unwrap_or_else(|p| p.into_inner());
            match service.reload(&loaded) {
                Ok((report, dropped)) => {
                    context.recorder.reload(ReloadResult::Applied);
                    for line in &dropped {
                        info!("{line}");
                    }
                    context.report(&report);
                    manage_neighbours(&service);
                }
                Err(e) => {
                    context.recorder.reload(ReloadResult::Refused);
                    error!("reload failed, the running state is kept: {e}");
                }
            }
        }
    }
}

/// Counts live connections every `interval` (on a blocking thread: a walk of large
/// maps takes milliseconds) and hands each result to the service.
async fn walk_conntrack(
    walker: ConntrackWalker,
    settings: WalkSettings,
    interval: Duration,
    service: Shared,
) {
    let mut walker = Some(walker);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(w) = walker.take() else { return };
        let Ok((w, census)) = tokio::task::spawn_blocking(move || {
            let census = w.walk(&settings);
            (w, census)
        })
        .await
        else {
            return;
        };
        walker = Some(w);
        match census {
            Ok(census) => service
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .set_census(census),
            Err(e) => warn!("counting connections: {e}"),
        }
    }
}

/// Runs the daemon as `options` say until SIGINT or SIGTERM: `start`, `serve`,
/// `stop`.
///
/// # Errors
/// Not privileged, an invalid file or state file, an interface another daemon controls,
/// an incompatible pinned datapath, or a failure loading, attaching or applying. A
/// datapath this start created is removed again; an adopted one is left as it was
/// found, forwarding.
pub fn run(options: &RunOptions) -> anyhow::Result<()> {
    let (started, serving) = start(options)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    // A runtime that cannot be built ends `run` before the stop: nothing was served.
    let result = serve(runtime, &started, serving, &options.config);
    stop(started);
    result
}

/// A started daemon: what [`serve`] shares and [`stop`] takes down. The fields drop in
/// this order: the service (and with it the data plane and its lock), then the health
/// checks' runtime, then the socket file.
struct Started {
    service: Shared,
    /// Held, never read: runs the health checks until the daemon is gone.
    _health_runtime: health::HealthRuntime,
    /// Removes the socket file however `run` ends after the bind.
    socket_file: SocketFile,
    config: Config,
}

/// What [`start`] hands to [`serve`]: the bound control socket and the loop's inputs.
struct Serving {
    listener: std::os::unix::net::UnixListener,
    inputs: Loop,
}

/// The first step of [`run`]: checks the privileges, reads the file and the state
/// file, opens the datapath, then brings the daemon up on it ([`bring_up`]). Every
/// failure after the open removes a datapath this start created ([`CreatedDatapath`]).
fn start(options: &RunOptions) -> anyhow::Result<(Started, Serving)> {
    let begun = std::time::Instant::now();
    let path = options.config.as_path();
    if !lb_dataplane::may_load_xdp() {
        bail!(
            "lb run needs root (or CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN): try `sudo lb run --config {}`",
            path.display()
        );
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let loaded: Loaded = std::str::from_utf8(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not UTF-8 text: {e}", path.display()))
        .and_then(|text| {
            Config::from_toml(text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
        })?;
    for w in &loaded.warnings {
        warn!("{w}");
    }
    let config = &loaded.config;
    let if_mac = interface_mac(&config.interface)?;
    let state_file = StateFile::new(&config.state_dir, &config.interface);
    // Before anything touches the datapath: a corrupt state file stops the start, and
    // so does an interface native XDP is refused on.
    state_file.load()?;
    refuse_native_early(config)?;
    let opening = std::time::Instant::now();
    let opened = datapath::open(config, options)?;
    let mut phases = StartPhases::new(begun);
    phases.config = opening.duration_since(begun);
    phases.open = opening.elapsed();
    phases.load = opened.dp.load_times();
    let created = CreatedDatapath::new(config, opened.created);
    let file = StartFile {
        path,
        bytes: &bytes,
        loaded: &loaded,
        if_mac,
    };
    bring_up(opened, created, &file, state_file, phases)
}

/// What [`start`] read before the datapath was opened.
struct StartFile<'a> {
    path: &'a Path,
    /// The file's bytes, which the first reload compares with.
    bytes: &'a [u8],
    loaded: &'a Loaded,
    if_mac: [u8; 6],
}

/// Brings the daemon up on the opened datapath: recovers the controller, binds the
/// sockets, applies the configuration, attaches, and starts the health checks. Disarms
/// `created` once all of it succeeded.
fn bring_up(
    opened: OpenedDatapath,
    created: CreatedDatapath,
    file: &StartFile<'_>,
    state_file: StateFile,
    mut phases: StartPhases,
) -> anyhow::Result<(Started, Serving)> {
    let config = file.loaded.config.clone();
    let (fresh, layout, created_line) = (opened.created, opened.layout, opened.created_line);
    let migration = opened.migration;
    let recovering = std::time::Instant::now();
    let (controller, recovery) =
        Controller::adopt(opened.dp).context("reading the adopted datapath")?;
    phases.recover = recovering.elapsed();
    for line in recovery.lines() {
        info!("{line}");
    }
    let listener = bind_socket(&config.control_socket)?;
    // Removes the socket file however `run` ends from here on.
    let socket_file = SocketFile::new(&config.control_socket);
    // Bound again after the controller and the socket file, the guard drops before
    // them: a failed start removes its datapath while it holds the datapath's lock,
    // then the socket file goes.
    let created = created;
    let metrics_listener = config
        .metrics
        .listen
        .map(|addr| http::bind(addr).with_context(|| format!("metrics.listen: binding {addr}")))
        .transpose()?;
    let api_server = crate::api::Server::bind(&config.api)?;
    let applying = std::time::Instant::now();
    let (mut service, context) = apply(controller, file, state_file, &mut phases)?;
    phases.apply_total = applying.elapsed();
    let mut tasks = take_tasks(&mut service, &config, metrics_listener);
    tasks.api = api_server;
    // Again, after the service, which now holds the data plane and its lock.
    let created = created;
    let attaching = std::time::Instant::now();
    let mode = attach(
        service.controller_mut().dataplane_mut(),
        &config.interface,
        config.xdp_mode,
    )?;
    phases.attach = attaching.elapsed();
    let parts = service.controller_mut().dataplane_mut().syn_cache_parts();
    service.set_syn_cache_parts(parts);
    let following = std::time::Instant::now();
    let (health_runtime, batches) = attached(&mut service, &config, mode, layout)?;
    phases.health = following.elapsed();
    service.set_migration(migration);
    info!(
        "attached to {} in {mode} mode; control socket {}",
        config.interface,
        config.control_socket.display()
    );
    let ready = format!(
        "forwarding on {} ({mode} XDP), datapath {}",
        config.interface,
        if fresh { "created" } else { "adopted" }
    );
    let mut seen = LastSeen::default();
    seen.differs(file.bytes);
    let inputs = Loop {
        batches,
        seen,
        ready,
        tasks,
        context,
    };
    let started = Started {
        service: Arc::new(Mutex::new(service)),
        _health_runtime: health_runtime,
        socket_file,
        config,
    };
    created.disarm();
    if let Some(line) = created_line {
        info!("{line}");
    }
    info!(target: start_phases::TARGET, "{}", phases.line(phases.elapsed()));
    Ok((started, Serving { listener, inputs }))
}

/// What follows the attach: the service learns its mode and announces, the health
/// checks start on their runtime (returned with the receiver of their batches), the
/// next hops are watched and the status names the datapath.
fn attached(
    service: &mut Service<KernelDataplane>,
    config: &Config,
    mode: AttachMode,
    layout: String,
) -> anyhow::Result<(
    health::HealthRuntime,
    mpsc::Receiver<Batch<crate::config::Vip>>,
)> {
    service.set_mode(mode.to_string());
    service.set_attached(true);
    service.sync_announcements();
    let health_runtime = health::HealthRuntime::start().context("starting the health checker")?;
    let batches = service.start_health(health_runtime.handle(), config);
    health::attach_probe_program(service.controller_mut().dataplane_mut(), &config.interface);
    match nexthop::NexthopMonitor::start() {
        Ok(monitor) => service.set_nexthop_monitor(monitor),
        Err(e) => warn!("not watching the backends' next hops: {e}"),
    }
    // The pins as they are now, the link among them: the pin check mends from these.
    service.controller_mut().dataplane_mut().keep_pins();
    let dp = service.controller().dataplane();
    service.set_datapath(
        dp.pin_dir().map(|d| d.shown().display().to_string()),
        Some(layout),
    );
    Ok((health_runtime, batches))
}

/// Applies the file merged with the state file through `controller`. The maps are
/// filled before the program is attached (or, adopted, brought to the configuration
/// while the old program forwards), so the first packet the new program sees already
/// meets the whole configuration.
fn apply(
    controller: Controller<KernelDataplane>,
    file: &StartFile<'_>,
    state_file: StateFile,
    phases: &mut StartPhases,
) -> anyhow::Result<(Service<KernelDataplane>, Context)> {
    let started = Service::start(
        controller,
        file.path.to_path_buf(),
        file.loaded,
        file.if_mac,
        String::new(),
        Some(state_file),
    );
    let (service, report, dropped) =
        started.map_err(|e| anyhow::anyhow!("applying the configuration: {e}"))?;
    for line in &dropped {
        info!("{line}");
    }
    let context = Context {
        recorder: Arc::new(Recorder::default()),
        tracer: trace::Tracer::default(),
    };
    context.report(&report);
    phases.applied(&report);
    drop(report);
    release_free_heap();
    manage_neighbours(&service);
    Ok((service, context))
}

/// Takes from the data plane what the event loop's tasks read.
fn take_tasks(
    service: &mut Service<KernelDataplane>,
    config: &Config,
    metrics_listener: Option<std::net::TcpListener>,
) -> Tasks {
    let dp = service.controller_mut().dataplane_mut();
    Tasks {
        trace_reader: dp.take_trace_reader(),
        walker: dp.take_conntrack_walker(),
        cleaner: dp
            .take_cleaner()
            .map(|c| (c, cleaning::times(&config.cleaning, config.udp_timeout))),
        clean_interval: config.cleaning.interval,
        activity: dp.take_activity_clock(),
        walk: WalkSettings {
            udp_timeout: config.udp_timeout,
            idle: config.metrics.idle,
            syn_window: WalkSettings::SYN_WINDOW,
        },
        metrics_listener,
        api: None,
    }
}

/// The second step of [`run`]: the event loop on `runtime` until SIGINT or SIGTERM.
/// The runtime, and every task it spawned, ends with this step, before the stop.
fn serve(
    runtime: tokio::runtime::Runtime,
    started: &Started,
    serving: Serving,
    path: &Path,
) -> anyhow::Result<()> {
    runtime.block_on(event_loop(
        serving.listener,
        Arc::clone(&started.service),
        path.to_path_buf(),
        &started.config,
        serving.inputs,
    ))
}

/// The last step of [`run`], after the event loop: leaves the announcements, switches
/// the trace off, detaches the probe program, gives up the socket, then removes the
/// datapath (`detach_on_exit`) or says that it stays and forwards.
fn stop(mut started: Started) {
    let config = &started.config;
    let mut service = started.service.lock().unwrap_or_else(|p| p.into_inner());
    let detach_on_exit = service.detach_on_exit();
    // Before the program goes, the routers are told to stop sending; a datapath that
    // stays keeps its announcements (see `announce`).
    leave_announcements(&mut service, detach_on_exit);
    // No client reads the trace records once the daemon is gone.
    if let Err(e) = service.controller_mut().dataplane_mut().set_trace(None) {
        warn!("switching the trace off: {e}");
    }
    // The tunnel-probe program serves the health checks only, which pause with the
    // daemon: it goes whether or not the datapath stays.
    health::detach_probe_program(service.controller_mut().dataplane_mut(), &config.interface);
    let dp = service.controller_mut().dataplane_mut();
    notify::stopping("stopping");
    started.socket_file.remove();
    if detach_on_exit {
        match dp.remove_pins() {
            Ok(Some(gone)) => info!(
                "detach_on_exit: detached from {} and removed the pinned datapath ({gone})",
                config.interface
            ),
            Ok(None) => {}
            Err(e) => error!("detach_on_exit: {e}"),
        }
    } else if let Some(problems) = pins::at_exit(&mut service) {
        error!(
            "the datapath of {} is degraded and does NOT stay whole after this exit: {problems}; start lb run again (it recreates what is missing) or `lb detach --interface {}`",
            config.interface, config.interface
        );
    } else {
        info!(
            "the datapath stays attached to {} and forwards with its last state; health checks and changes pause until the next start (`lb detach --interface {}` removes it)",
            config.interface, config.interface
        );
    }
}

/// Leaves the announcement routes as the exit leaves the data plane (see
/// [`announce`]): `detaching` removes them first, so the routers stop sending traffic
/// before the program goes (`detach_on_exit`); otherwise they stay with the pinned data
/// plane that keeps forwarding (a plain stop). `lb detach` removes them with
/// [`lb_dataplane::routes::flush`].
fn leave_announcements(service: &mut Service<KernelDataplane>, detaching: bool) {
    service.announcer_mut().exit(if detaching {
        announce::DatapathAtExit::Detached
    } else {
        announce::DatapathAtExit::KeepsForwarding
    });
}

/// What the event loop starts besides the control socket.
struct Tasks {
    trace_reader: Option<TraceReader>,
    walker: Option<ConntrackWalker>,
    /// The cleaning walk and its times.
    cleaner: Option<(lb_dataplane::Cleaner, lb_common::fastpath::Config)>,
    clean_interval: Duration,
    activity: Option<ActivityClock>,
    walk: WalkSettings,
    metrics_listener: Option<std::net::TcpListener>,
    /// The remote API, bound (`[api]`).
    api: Option<crate::api::Server>,
}

/// The event loop's inputs besides the socket, the service and the file.
struct Loop {
    /// Health transitions, batched.
    batches: mpsc::Receiver<Batch<crate::config::Vip>>,
    /// The file's bytes last applied.
    seen: LastSeen,
    /// The READY=1 status line.
    ready: String,
    tasks: Tasks,
    context: Context,
}

/// Refreshes the data plane's activity tick every [`SAMPLE_PERIOD`], from the start.
async fn keep_activity_tick(mut clock: ActivityClock) {
    let mut ticker = tokio::time::interval(SAMPLE_PERIOD);
    loop {
        ticker.tick().await;
        if let Err(e) = clock.refresh() {
            warn!("activity tick: {e}");
        }
    }
}

/// Starts the trace reader, the activity tick, the conntrack walk, the cleaning and the
/// metrics endpoint. Returns, when the cleaning runs, what tells of its first walk.
fn spawn_tasks(
    tasks: Tasks,
    service: &Shared,
    config: &Config,
    context: &Context,
) -> Option<oneshot::Receiver<()>> {
    if let Some(reader) = tasks.trace_reader {
        tokio::spawn(trace::read_records(
            reader,
            Arc::clone(service),
            context.tracer.clone(),
        ));
    }
    if let Some(clock) = tasks.activity {
        tokio::spawn(keep_activity_tick(clock));
    }
    if let Some(walker) = tasks.walker {
        tokio::spawn(walk_conntrack(
            walker,
            tasks.walk,
            config.metrics.connections_interval,
            Arc::clone(service),
        ));
    }
    let first_walk = tasks.cleaner.map(|(cleaner, times)| {
        let (walked, first_walk) = oneshot::channel();
        tokio::spawn(cleaning::run(
            cleaner,
            times,
            tasks.clean_interval,
            Arc::clone(service),
            walked,
        ));
        first_walk
    });
    if let Some(metrics) = tasks.metrics_listener {
        if let Ok(addr) = metrics.local_addr() {
            info!("metrics at http://{addr}/metrics");
        }
        tokio::spawn(http::serve(
            metrics,
            Arc::clone(service),
            Arc::clone(&context.recorder),
            config.metrics.removed_retention,
        ));
    }
    if let Some(api) = tasks.api {
        remote::spawn(api, service, context);
    }
    first_walk
}

/// Returns once the first cleaning walk ended (or failed), `FIRST_WALK_WAIT` at most;
/// at once without the cleaning.
async fn first_walk_done(first_walk: Option<oneshot::Receiver<()>>) {
    if let Some(walked) = first_walk
        && tokio::time::timeout(FIRST_WALK_WAIT, walked).await.is_err()
    {
        warn!(
            "the first cleaning walk took over {FIRST_WALK_WAIT:?}: lb status shows no \
             slot states until it ends"
        );
    }
}

async fn event_loop(
    listener: std::os::unix::net::UnixListener,
    service: Shared,
    path: PathBuf,
    config: &Config,
    inputs: Loop,
) -> anyhow::Result<()> {
    let Loop {
        mut batches,
        mut seen,
        ready,
        tasks,
        context,
    } = inputs;
    let listener = UnixListener::from_std(listener)?;
    let first_walk = spawn_tasks(tasks, &service, config, &context);
    let mut hangup = signal(SignalKind::hangup())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    // Ready only once a SIGTERM would be handled (not kill the process half-way).
    notify::ready(&ready);
    let (tx, mut file_events) = mpsc::unbounded_channel();
    let _watcher = match watch::watch(&path, tx) {
        Ok(w) => Some(w),
        Err(e) => {
            warn!(
                "not watching {} for changes ({e}); reload with SIGHUP",
                path.display()
            );
            None
        }
    };
    let mut ticker = tokio::time::interval(SAMPLE_PERIOD);
    let mut pin_check = tokio::time::interval(pins::CHECK_PERIOD);
    let (tx, mut link_events) = mpsc::unbounded_channel();
    if let Err(e) = link_events::watch(tx) {
        warn!(
            "not watching link events ({e}): managed neighbours are not installed again after a link flap"
        );
    }
    // Control connections wait in the socket's backlog until the first cleaning walk.
    let first_walk = first_walk_done(first_walk);
    tokio::pin!(first_walk);
    let mut serving = false;
    loop {
        tokio::select! {
            () = &mut first_walk, if !serving => serving = true,
            accepted = listener.accept(), if serving => match accepted {
                Ok((stream, _)) => {
                    let (service, context) = (Arc::clone(&service), context.clone());
                    tokio::spawn(async move {
                        match serve_one(stream, service, context).await {
                            Ok(()) | Err(ServeError::Closed) => {}
                            Err(e) => warn!("control connection: {e}"),
                        }
                    });
                }
                Err(e) => warn!("control socket accept: {e}"),
            },
            _ = hangup.recv() => reload(&service, &path, Trigger::Signal, &mut seen, &context),
            Some(()) = file_events.recv() => {
                // Debounce: wait until the file has been quiet for a while.
                while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, file_events.recv()).await {}
                reload(&service, &path, Trigger::FileChanged, &mut seen, &context);
            }
            _ = ticker.tick() => service.lock().unwrap_or_else(|p| p.into_inner()).tick(),
            _ = pin_check.tick() => pins::check(&mut service.lock().unwrap_or_else(|p| p.into_inner())),
            Some(event) = link_events.recv() => {
                let mut events = vec![event];
                while let Ok(Some(e)) = tokio::time::timeout(DEBOUNCE, link_events.recv()).await {
                    events.push(e);
                }
                neighbours_again(&service.lock().unwrap_or_else(|p| p.into_inner()), &events);
            }
            Some(batch) = batches.recv() => {
                service::apply_batch(&service, &batch, &mut |report| context.report(report));
            }
            _ = interrupt.recv() => { info!("SIGINT: shutting down"); return stopping(&service); }
            _ = terminate.recv() => { info!("SIGTERM: shutting down"); return stopping(&service); }
        }
        service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sync_announcements();
    }
}
