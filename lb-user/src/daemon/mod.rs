//! `lb run`: the daemon. Loads and attaches the XDP program, applies the
//! configuration, then serves the control socket (one task per connection, within the
//! protocol's limits: [`crate::control::server`]), reloads on SIGHUP and when the file
//! changes (debounced), samples counters every second (`stats`), and detaches on
//! SIGINT/SIGTERM.
//!
//! The logic is in [`service`] (tested without root); this module is the event loop
//! and the parts that need the real system (privileges, the interface's MAC, the
//! socket, signals, file watching).

mod neighbours;
pub mod service;
mod stats;

use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, bail};
use tokio::{
    net::UnixListener,
    signal::unix::{SignalKind, signal},
    sync::mpsc,
};
use tracing::{error, info, warn};

use crate::{
    config::{Config, Loaded, XdpMode},
    control::{
        Request,
        server::{self, Limits, ServeError},
    },
    controller::ApplyReport,
    dataplane::{AttachMode, Dataplane as _, KernelDataplane, LoadOptions, offload},
};
use service::Service;

/// Quiet time after a file change before reloading.
const DEBOUNCE: Duration = Duration::from_millis(300);
/// Counter sampling period for rates.
const SAMPLE_PERIOD: Duration = Duration::from_secs(1);

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
        .flat_map(|v| v.backends.keys().map(crate::maglev::BackendKey::ip))
        .collect::<Vec<_>>();
    neighbours::manage(service.interface(), backends);
}

fn log_report(report: &ApplyReport) {
    for line in report.lines() {
        info!("{line}");
    }
    for w in &report.warnings {
        warn!("{w}");
    }
}

/// Attaches in the configured mode; `auto` falls back from native to skb with a
/// warning.
///
/// Native mode on an interface with receive VLAN offload would send tagged frames back
/// untagged (`dataplane::offload`): `native` refuses it, `auto` takes skb mode.
fn attach(dp: &mut KernelDataplane, iface: &str, mode: XdpMode) -> anyhow::Result<AttachMode> {
    let vlan_problem = match mode {
        XdpMode::Skb => None,
        XdpMode::Native | XdpMode::Auto => offload::native_vlan_problem(iface),
    };
    let mode = match (mode, vlan_problem) {
        (XdpMode::Native, Some(problem)) => bail!("native XDP refused: {problem}"),
        (XdpMode::Auto, Some(problem)) => {
            warn!("{problem}; attaching in skb (generic) mode");
            AttachMode::Skb
        }
        (XdpMode::Native, None) => AttachMode::Native,
        (XdpMode::Skb, _) => AttachMode::Skb,
        (XdpMode::Auto, None) => match dp.attach(iface, AttachMode::Native) {
            Ok(()) => return Ok(AttachMode::Native),
            Err(e) => {
                warn!("native XDP on {iface} failed ({e}); falling back to skb (generic) mode");
                AttachMode::Skb
            }
        },
    };
    dp.attach(iface, mode)
        .with_context(|| format!("attaching XDP to {iface} in {mode} mode"))?;
    Ok(mode)
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
                "control socket {} is in use: another lb daemon is running",
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
/// the socket was bound).
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Answers one control connection (within the protocol's [`Limits`]).
async fn serve_one(stream: tokio::net::UnixStream, service: Shared) -> Result<(), ServeError> {
    server::serve(stream, Limits::default(), |request| {
        let mut service = service.lock().unwrap_or_else(|p| p.into_inner());
        let response = service.handle(request, &mut log_report);
        if matches!(request, Request::Backend { .. }) && response.ok {
            manage_neighbours(&service);
        }
        response
    })
    .await
}

fn reload(service: &Shared, path: &Path, why: &str) {
    info!("reloading {} ({why})", path.display());
    match Config::load(path) {
        Err(e) => error!("reload: invalid configuration, nothing applied: {e}"),
        Ok(loaded) => {
            for w in &loaded.warnings {
                warn!("{w}");
            }
            let mut service = service.lock().unwrap_or_else(|p| p.into_inner());
            match service.reload(&loaded) {
                Ok(report) => {
                    if report.operations == 0 {
                        info!("reload: no change");
                    }
                    log_report(&report);
                    manage_neighbours(&service);
                }
                Err(e) => error!("reload failed, the running state is kept: {e}"),
            }
        }
    }
}

/// Watches `path` (through its directory, as editors replace files) and sends a unit
/// for every event on it.
fn watch(path: &Path, tx: mpsc::UnboundedSender<()>) -> anyhow::Result<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let file_name = path.file_name().map(ToOwned::to_owned);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && event
                .paths
                .iter()
                .any(|p| p.file_name().map(ToOwned::to_owned) == file_name)
        {
            let _ = tx.send(());
        }
    })?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// Runs the daemon with the configuration file `path` until SIGINT or SIGTERM.
///
/// # Errors
/// Not privileged, an invalid file, or a failure loading, attaching or applying;
/// nothing is left attached.
pub fn run(path: &Path) -> anyhow::Result<()> {
    if !crate::dataplane::may_load_xdp() {
        bail!(
            "lb run needs root (or CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN): try `sudo lb run --config {}`",
            path.display()
        );
    }
    let loaded: Loaded =
        Config::load(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    for w in &loaded.warnings {
        warn!("{w}");
    }
    let config = loaded.config.clone();
    let if_mac = interface_mac(&config.interface)?;
    let dp = KernelDataplane::load(LoadOptions {
        ct_capacity: config.ct_capacity,
        ct_syn_capacity: config.ct_syn_capacity,
        frag_capacity: config.frag_capacity,
    })
    .context("loading the XDP program")?;
    let listener = bind_socket(&config.control_socket)?;
    // Removes the socket file however `run` ends from here on.
    let _socket_file = SocketFile(config.control_socket.clone());
    // The maps are filled before the program is attached, so the first packet it sees
    // already meets the whole configuration.
    let (mut service, report) =
        Service::start(dp, path.to_path_buf(), &loaded, if_mac, String::new())
            .map_err(|e| anyhow::anyhow!("applying the configuration: {e}"))?;
    log_report(&report);
    manage_neighbours(&service);
    let mode = attach(
        service.controller_mut().dataplane_mut(),
        &config.interface,
        config.xdp_mode,
    )?;
    service.set_mode(mode.to_string());
    info!(
        "attached to {} in {mode} mode; control socket {}",
        config.interface,
        config.control_socket.display()
    );
    let service: Shared = Arc::new(Mutex::new(service));
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(event_loop(
            listener,
            Arc::clone(&service),
            path.to_path_buf(),
        ));
    let mut service = service.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = service.controller_mut().dataplane_mut().detach() {
        error!("detaching: {e}");
    } else {
        info!("detached from {}", config.interface);
    }
    result
}

async fn event_loop(
    listener: std::os::unix::net::UnixListener,
    service: Shared,
    path: PathBuf,
) -> anyhow::Result<()> {
    let listener = UnixListener::from_std(listener)?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let (tx, mut file_events) = mpsc::unbounded_channel();
    let _watcher = match watch(&path, tx) {
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
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let service = Arc::clone(&service);
                    tokio::spawn(async move {
                        match serve_one(stream, service).await {
                            Ok(()) | Err(ServeError::Closed) => {}
                            Err(e) => warn!("control connection: {e}"),
                        }
                    });
                }
                Err(e) => warn!("control socket accept: {e}"),
            },
            _ = hangup.recv() => reload(&service, &path, "SIGHUP"),
            Some(()) = file_events.recv() => {
                // Debounce: wait until the file has been quiet for a while.
                while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, file_events.recv()).await {}
                reload(&service, &path, "file changed");
            }
            _ = ticker.tick() => service.lock().unwrap_or_else(|p| p.into_inner()).tick(),
            _ = interrupt.recv() => { info!("SIGINT: shutting down"); return Ok(()); }
            _ = terminate.recv() => { info!("SIGTERM: shutting down"); return Ok(()); }
        }
    }
}
