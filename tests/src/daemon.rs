//! The real `lb run` daemon in a test bed: a generated configuration, the process
//! started inside the bed's LB namespace, and the `lb` CLI to talk to it.
//!
//! - Binary: [`lb_binary`] finds the `lb` built next to the running executable
//!   (`target/<profile>/lb`; `cargo test` does not build other packages' binaries, so
//!   `cargo build -p lb --bin lb` must run first, as `cargo xtask test` does).
//!   `LB_BIN=/path/to/lb` overrides the search.
//! - Configuration: [`DaemonConfig`] renders the TOML of `lb run --config`: interface
//!   `lb0`, native XDP, FIB next hop (the bed keeps static neighbours and forwarding on
//!   in the LB namespace), outer sources 192.0.2.1 / 2001:db8:c::1, a small conntrack
//!   (65,536 entries: quick to create), and the four VIPs of the bed (VIP4 and VIP6,
//!   80/tcp and 53/udp), each with the same backends (IPv4 addresses for the IPv4 VIPs,
//!   IPv6 ones for the IPv6 VIPs).
//! - Process: [`Daemon::start`] writes the file and the control socket into a fresh
//!   temporary directory, runs `ip netns exec <lb-ns> lb run --config <dir>/lb.toml`
//!   (`ip netns exec` execs, so the child's pid is the daemon's) with its stderr in
//!   `<dir>/lb.log`, and waits until `lb status` answers. The CLI runs from the test's
//!   own namespace: the control socket is a filesystem path.
//! - Restarts: [`Daemon::restart`] stops the process (SIGTERM or SIGKILL) and starts a
//!   new one on the same directory (configuration, state file, socket), as systemd does;
//!   the datapath stays pinned in between.
//! - Teardown: dropping a [`Daemon`] sends SIGTERM (the daemon removes its socket and
//!   leaves its datapath pinned), waits up to [`STOP_TIMEOUT`], then SIGKILLs; the
//!   temporary directory is removed afterwards, and the bed's namespace removes the pins
//!   when it is dropped ([`crate::netns`]). When the drop happens during a panic, the daemon's
//!   log is printed first. As a backstop for a test process that dies without unwinding,
//!   the daemon gets SIGTERM when the thread that started it exits
//!   (`PR_SET_PDEATHSIG`): start it on the thread that owns the [`Daemon`] until the end
//!   (a test's own thread, the demo's main thread), not on a short-lived helper thread.
//!   What a process killed outright cannot remove is its temporary directory
//!   (`$TMPDIR/lb-run-<pid>-<n>`), like the bed's namespaces: delete those by hand.
//!   The daemon runs in its own process group, so a Ctrl-C on the terminal reaches only
//!   the test or demo process, which then stops the daemon itself.
//! - The [`Daemon`] borrows the [`TestBed`] it runs in, so it is always dropped before
//!   the bed's namespaces.
//!
//! ```no_run
//! use lb_tests::{daemon::{Daemon, DaemonConfig, vip_text}, testbed::{TestBed, TestBedOptions}};
//!
//! let bed = TestBed::new(TestBedOptions::default())?;
//! let lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3))?;
//! let status = lb.status()?; // `lb status --json`, parsed
//! lb.backend("drain", &vip_text(false, true), 2, None)?; // `lb backend drain ...`
//! let stats = lb.stats()?; // `lb stats --json`, parsed
//! # let _ = (status, stats);
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::{
    fmt::Write as _,
    fs::File,
    marker::PhantomData,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use lb::control::{Client, FlowReport, Stats, Status};

use crate::{
    netns::NetNs,
    packets::{LB4, LB6},
    testbed::{LB_IFACE, TestBed, backend4, backend6, vip_tcp, vip_udp},
};

/// How long [`Daemon::start`] waits for `lb status` to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the drop waits after SIGTERM before it sends SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Conntrack capacity of the generated configuration (small: created quickly).
pub const CT_CAPACITY: u32 = 65_536;
/// SYN cache slots of the generated configuration.
pub const CT_SYN_CAPACITY: u32 = 16_384;
/// Poll period of the waits.
const POLL: Duration = Duration::from_millis(25);

/// The VIP in `lb`'s text form (`203.0.113.10:80/tcp`, `[2001:db8:f::10]:53/udp`):
/// the bed's TCP service (`tcp`) or UDP service of one family.
pub fn vip_text(v6: bool, tcp: bool) -> String {
    if tcp {
        format!("{}/tcp", vip_tcp(v6))
    } else {
        format!("{}/udp", vip_udp(v6))
    }
}

/// Backend `k`'s address of one family (what `lb status` and `lb stats` show).
pub fn backend_addr(k: u8, v6: bool) -> IpAddr {
    if v6 {
        backend6(k).into()
    } else {
        backend4(k).into()
    }
}

/// The bed's backend number `k` of a backend address as `lb` prints it (either
/// family), if it is one.
pub fn backend_of(addr: &str) -> Option<u8> {
    let addr: IpAddr = addr.parse().ok()?;
    (1..=crate::testbed::MAX_BACKENDS)
        .find(|&k| backend_addr(k, false) == addr || backend_addr(k, true) == addr)
}

/// A backend's administrative state in the configuration file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendState {
    /// In the table with its weight.
    Active,
    /// No new flows; established flows stay.
    Drain,
    /// No new flows; established flows are re-picked.
    Down,
}

impl BackendState {
    fn text(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Drain => "drain",
            Self::Down => "down",
        }
    }
}

/// One backend of every VIP in the generated configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendLine {
    /// The bed's backend number (1-based).
    pub k: u8,
    /// Weight.
    pub weight: u32,
    /// State.
    pub state: BackendState,
}

/// What [`Daemon::start`] writes as `lb.toml` (see the module documentation for the
/// fixed parts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonConfig {
    /// The backends of every VIP, in file order.
    pub backends: Vec<BackendLine>,
    /// Maglev table size of every VIP (a prime).
    pub table_size: u32,
    /// UDP conntrack idle timeout.
    pub udp_timeout_secs: u32,
    /// Keys of the `[metrics]` table, one `key = value` per line (empty: the defaults,
    /// the endpoint on 127.0.0.1:9469 of the LB namespace).
    pub metrics: String,
    /// Top-level tables written before the VIPs (e.g. `[health]`), empty by default.
    pub extra: String,
    /// The outer source addresses (`[encap]`): the bed LB's 192.0.2.1 and
    /// 2001:db8:c::1 by default; each instance of a fleet has its own.
    pub sources: (Ipv4Addr, Ipv6Addr),
    /// `[vip.health]` bodies by VIP ([`vip_text`]); VIPs not listed have none.
    pub vip_health: Vec<(String, String)>,
    /// `[vip.backend.health]` bodies by VIP and backend number.
    pub backend_health: Vec<(String, u8, String)>,
    /// `conntrack.capacity`.
    pub ct_capacity: u32,
    /// Keys added to the `[[vip]]` table of a VIP ([`vip_text`]), such as
    /// `allowed_sources = [...]`.
    pub vip_keys: Vec<(String, String)>,
    /// Keys added to the `[conntrack]` table, one `key = value` per line (empty by
    /// default), such as `quiet_secs = 60`.
    pub conntrack_keys: String,
    /// Top-level keys written before the first table, one `key = value` per line
    /// (empty by default), such as `reload = "signal"`.
    pub top_level: String,
}

impl DaemonConfig {
    /// Backends `ks`, all active with weight 1; table size 65,537; UDP timeout 30 s.
    pub fn equal(ks: impl IntoIterator<Item = u8>) -> Self {
        Self::weighted(ks.into_iter().map(|k| (k, 1)))
    }

    /// Backends `(k, weight)`, all active; otherwise as [`Self::equal`].
    pub fn weighted(backends: impl IntoIterator<Item = (u8, u32)>) -> Self {
        Self {
            backends: backends
                .into_iter()
                .map(|(k, weight)| BackendLine {
                    k,
                    weight,
                    state: BackendState::Active,
                })
                .collect(),
            table_size: lb::defaults::TABLE_SIZE,
            udp_timeout_secs: 30,
            metrics: String::new(),
            extra: String::new(),
            sources: (LB4, LB6),
            vip_health: Vec::new(),
            backend_health: Vec::new(),
            ct_capacity: CT_CAPACITY,
            vip_keys: Vec::new(),
            conntrack_keys: String::new(),
            top_level: String::new(),
        }
    }

    /// This configuration with `body` as the `[vip.health]` table of `vip`.
    #[must_use]
    pub fn with_health(mut self, vip: &str, body: &str) -> Self {
        self.vip_health.push((vip.to_owned(), body.to_owned()));
        self
    }

    /// This configuration with `body` as backend `k`'s `[vip.backend.health]` in `vip`.
    #[must_use]
    pub fn with_backend_health(mut self, vip: &str, k: u8, body: &str) -> Self {
        self.backend_health
            .push((vip.to_owned(), k, body.to_owned()));
        self
    }

    /// The configuration file for a daemon whose control socket is `socket`.
    pub fn to_toml(&self, socket: &Path) -> String {
        let mut out = format!(
            "# Generated by lb-tests (daemon.rs) for one test bed.\n\
             interface = \"{LB_IFACE}\"\n\
             xdp_mode = \"native\"\n\
             control_socket = \"{}\"\n\
             state_dir = \"{}\"\n\
             mtu = 1500\n{}\n\
             [encap]\nsource_v4 = \"{}\"\nsource_v6 = \"{}\"\n\n\
             [nexthop]\nmode = \"fib\"\n\n\
             [conntrack]\ncapacity = {}\nsyn_capacity = {CT_SYN_CAPACITY}\n\
             udp_timeout_secs = {}\n{}\n[metrics]\n{}\n",
            socket.display(),
            socket.with_file_name("state").display(),
            self.top_level,
            self.sources.0,
            self.sources.1,
            self.ct_capacity,
            self.udp_timeout_secs,
            self.conntrack_keys,
            self.metrics,
        );
        out.push_str(&self.extra);
        for v6 in [false, true] {
            for (tcp, port) in [(true, vip_tcp(v6).port()), (false, vip_udp(v6).port())] {
                let addr = vip_tcp(v6).ip();
                let proto = if tcp { "tcp" } else { "udp" };
                let _ = write!(
                    out,
                    "\n[[vip]]\naddress = \"{addr}\"\nport = {port}\nprotocol = \"{proto}\"\n\
                     table_size = {}\n",
                    self.table_size
                );
                let vip = vip_text(v6, tcp);
                for (_, keys) in self.vip_keys.iter().filter(|(v, _)| *v == vip) {
                    let _ = writeln!(out, "{keys}");
                }
                for (_, body) in self.vip_health.iter().filter(|(v, _)| *v == vip) {
                    let _ = write!(out, "[vip.health]\n{body}\n");
                }
                for b in &self.backends {
                    let _ = write!(
                        out,
                        "\n[[vip.backend]]\naddress = \"{}\"\nweight = {}\nstate = \"{}\"\n",
                        backend_addr(b.k, v6),
                        b.weight,
                        b.state.text()
                    );
                    for (_, _, body) in self
                        .backend_health
                        .iter()
                        .filter(|(v, k, _)| *v == vip && *k == b.k)
                    {
                        let _ = write!(out, "[vip.backend.health]\n{body}\n");
                    }
                }
            }
        }
        out
    }
}

/// Finds the `lb` binary: `$LB_BIN` if set, else `lb` in the target directory of the
/// running executable (`target/<profile>/deps/<test>` or `target/<profile>/<bin>`).
///
/// Prints a warning when a source of the binary (the manifests, build scripts and
/// sources of its seven crates) changed after it was built: it is then stale.
///
/// # Panics
/// When the binary does not exist, saying how to build it.
pub fn lb_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("LB_BIN") {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "LB_BIN={} is not a file", path.display());
        return path;
    }
    let exe = std::env::current_exe().expect("the path of the running executable");
    let mut dir = exe.parent().expect("the executable's directory").to_owned();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let lb = dir.join("lb");
    assert!(
        lb.is_file(),
        "the `lb` binary is missing at {}: run `cargo build -p lb --bin lb` first (with \
         --release for a release build); `cargo xtask test` and `cargo xtask demo` do this",
        lb.display()
    );
    warn_if_stale(&lb);
    lb
}

/// The crates the `lb` binary is built from, relative to the workspace root: their
/// manifests, build scripts and every file under `src`.
const LB_CRATES: [&str; 7] = [
    "lb",
    "lb-dataplane",
    "lb-health",
    "lb-hashlab",
    "lb-maglev",
    "lb-common",
    "lb-ebpf",
];

/// Warns when a source of `lb` is newer than the binary. Sources, not build outputs:
/// building this crate rebuilds the lb library (with other features) after `lb`,
/// so comparing with the library would warn right after a fresh build.
fn warn_if_stale(lb: &Path) {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(lb) else { return };
    let Some(root) = Path::new(env!("CARGO_MANIFEST_DIR")).parent() else {
        return;
    };
    let mut pending = vec![root.join("Cargo.toml")];
    for krate in LB_CRATES {
        for part in ["Cargo.toml", "build.rs", "src"] {
            pending.push(root.join(krate).join(part));
        }
    }
    while let Some(path) = pending.pop() {
        if let Ok(entries) = std::fs::read_dir(&path) {
            pending.extend(entries.filter_map(Result::ok).map(|e| e.path()));
        } else if modified(&path).is_some_and(|t| t > built) {
            eprintln!(
                "warning: {} changed after {} was built: the binary is stale; rebuild it with \
                 `cargo build -p lb --bin lb`",
                path.display(),
                lb.display()
            );
            return;
        }
    }
}

/// Makes the child of `cmd` get SIGTERM when the thread that starts it exits
/// (`PR_SET_PDEATHSIG`): the backstop for a test process that dies without unwinding.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and only calls
    // prctl(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let signal = libc::c_ulong::try_from(libc::SIGTERM).unwrap_or(15);
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A directory under the system's temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<tmp>/<prefix><pid>-<n>` (mode 0700), never reusing an existing path.
    ///
    /// # Errors
    /// When the directory cannot be created.
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "{prefix}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // create_dir, not create_dir_all: fails if the path exists (never reuse one).
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
        Ok(Self { path })
    }
}

impl TempDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A running `lb run` in a bed's LB namespace; stopped on drop (see the module
/// documentation).
#[derive(Debug)]
pub struct Daemon<'bed> {
    // Field order is drop order, but Drop stops the child explicitly before the
    // directory goes.
    child: Option<Child>,
    lb: PathBuf,
    dir: TempDir,
    started: Duration,
    ns: String,
    /// The namespace of a daemon started with [`Daemon::start_in`], kept alive with it.
    _keep: Option<Arc<NetNs>>,
    _bed: PhantomData<&'bed TestBed>,
}

/// How [`Daemon::restart`] stops the running process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, and wait for it to exit.
    Term,
    /// SIGKILL (a crash).
    Kill,
}

impl<'bed> Daemon<'bed> {
    /// Writes `config` and starts `lb run` in `bed`'s LB namespace, then waits (at most
    /// [`START_TIMEOUT`]) until `lb status` answers.
    ///
    /// # Errors
    /// When the binary cannot start, the daemon exits, or it does not answer in time;
    /// the message has the daemon's log. Nothing is left running.
    ///
    /// # Panics
    /// When the `lb` binary is missing ([`lb_binary`]).
    pub fn start(bed: &'bed TestBed, config: &DaemonConfig) -> anyhow::Result<Self> {
        Self::create(bed.lb_ns().name(), None, config)
    }

    /// As [`Self::start`], in the namespace `ns` (an instance of a multi-instance bed),
    /// which the daemon keeps alive until it has stopped.
    ///
    /// # Errors
    /// As [`Self::start`].
    ///
    /// # Panics
    /// When the `lb` binary is missing ([`lb_binary`]).
    pub fn start_in(ns: Arc<NetNs>, config: &DaemonConfig) -> anyhow::Result<Daemon<'static>> {
        let name = ns.name().to_owned();
        Daemon::create(&name, Some(ns), config)
    }

    fn create(ns: &str, keep: Option<Arc<NetNs>>, config: &DaemonConfig) -> anyhow::Result<Self> {
        let begun = Instant::now();
        let lb = lb_binary();
        let dir = TempDir::new("lb-run-")?;
        let mut daemon = Self {
            child: None,
            lb,
            dir,
            started: Duration::ZERO,
            ns: ns.to_owned(),
            _keep: keep,
            _bed: PhantomData,
        };
        daemon.write_config(config)?;
        daemon.spawn(&[])?;
        daemon.started = begun.elapsed();
        Ok(daemon)
    }

    /// Stops the daemon as `stop` says and starts `lb run ARGS...` again on the same
    /// directory; waits until it answers. Returns the time from the new process's start
    /// until `lb status` answered.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn restart(&mut self, stop: Stop, args: &[&str]) -> anyhow::Result<Duration> {
        self.halt(stop);
        self.resume(args)
    }

    /// Stops the daemon as `stop` says (the datapath stays pinned).
    pub fn halt(&mut self, stop: Stop) {
        match stop {
            Stop::Term => {
                let _ = self.terminate();
            }
            Stop::Kill => {
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }

    /// Starts `lb run ARGS...` again on the same directory after [`Self::halt`]; the
    /// time until `lb status` answered.
    ///
    /// # Errors
    /// As [`Self::start`] (the message has the log).
    pub fn resume(&mut self, args: &[&str]) -> anyhow::Result<Duration> {
        let begun = Instant::now();
        self.spawn(args)?;
        Ok(begun.elapsed())
    }

    /// The daemon's directory (configuration, socket, state, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts `lb run --config <dir>/lb.toml ARGS...` in its namespace (its
    /// log appended to `lb.log`) and waits until it answers.
    fn spawn(&mut self, args: &[&str]) -> anyhow::Result<()> {
        let daemon = self;
        let log = File::options()
            .create(true)
            .append(true)
            .open(daemon.log_path())
            .context("creating the daemon log")?;
        let out = File::options()
            .create(true)
            .append(true)
            .open(daemon.dir.path.join("lb.out"))
            .context("creating lb.out")?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &daemon.ns])
            .arg(&daemon.lb)
            .arg("run")
            .arg("--config")
            .arg(daemon.config_path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .process_group(0);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting `ip netns exec ... {} run`", daemon.lb.display()))?;
        daemon.child = Some(child);
        daemon.wait_ready()
    }

    /// Polls `lb status` until it answers.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.exited()? {
                bail!(
                    "lb run exited during start-up ({status}); its log:\n{}",
                    self.log()
                );
            }
            if self.socket_path().exists() && self.cli(&["status"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "lb run did not answer `lb status` within {START_TIMEOUT:?}; its log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// The exit status, if the daemon has exited.
    fn exited(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => child.try_wait().context("waiting for lb run"),
            None => Ok(None),
        }
    }

    /// How long [`Self::start`] took (until `lb status` answered).
    pub fn startup_time(&self) -> Duration {
        self.started
    }

    /// The daemon's pid.
    ///
    /// # Panics
    /// After [`Self::stop`].
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon runs").id()
    }

    /// The control socket.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.path.join("lb.sock")
    }

    /// The configuration file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path.join("lb.toml")
    }

    /// The daemon's stderr (its log).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path.join("lb.log")
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_else(|e| format!("(cannot read {}: {e})", self.log_path().display()))
    }

    /// Replaces the configuration file with `config` atomically (written next to it,
    /// then renamed over it). The daemon notices the change and reloads after its
    /// debounce time; see [`Self::reload`] for the signal.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_config(&self, config: &DaemonConfig) -> anyhow::Result<()> {
        let tmp = self.dir.path.join(".lb.toml.new");
        std::fs::write(&tmp, config.to_toml(&self.socket_path()))
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, self.config_path()).context("replacing lb.toml")
    }

    /// Sends SIGHUP: the daemon reloads its configuration file.
    ///
    /// # Errors
    /// When the signal cannot be sent (the daemon is gone).
    pub fn reload(&self) -> anyhow::Result<()> {
        self.signal(libc::SIGHUP)
    }

    fn signal(&self, signal: libc::c_int) -> anyhow::Result<()> {
        let pid = libc::pid_t::try_from(self.pid()).context("pid")?;
        // SAFETY: kill(2) with the pid of our own, not yet reaped, child.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(std::io::Error::last_os_error()).context("kill");
        }
        Ok(())
    }

    /// Runs `lb ARGS... --socket <socket>` from the test's namespace and returns its
    /// standard output.
    ///
    /// # Errors
    /// When `lb` cannot start or exits non-zero (the message has its stderr and the
    /// daemon's log).
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.lb)
            .args(args)
            .arg("--socket")
            .arg(self.socket_path())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("starting {}", self.lb.display()))?;
        if !out.status.success() {
            bail!(
                "`lb {}` failed ({}): {}\ndaemon log:\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                self.log()
            );
        }
        String::from_utf8(out.stdout).context("lb printed non-UTF-8")
    }

    /// `lb status --json`, parsed.
    ///
    /// # Errors
    /// As [`Self::cli`], or an unreadable answer.
    pub fn status(&self) -> anyhow::Result<Status> {
        let text = self.cli(&["status", "--json"])?;
        serde_json::from_str(&text).with_context(|| format!("parsing `lb status --json`: {text}"))
    }

    /// `lb stats --json`, parsed.
    ///
    /// # Errors
    /// As [`Self::cli`], or an unreadable answer.
    pub fn stats(&self) -> anyhow::Result<Stats> {
        let text = self.cli(&["stats", "--json"])?;
        serde_json::from_str(&text).with_context(|| format!("parsing `lb stats --json`: {text}"))
    }

    /// The global verdict counter `name` of `lb stats` (0 when it is not listed).
    ///
    /// # Errors
    /// As [`Self::stats`].
    pub fn reason(&self, name: &str) -> anyhow::Result<u64> {
        Ok(self
            .stats()?
            .reasons
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.value))
    }

    /// `lb backend ACTION --vip VIP --backend <backend k of the VIP's family>
    /// [--weight W]`; returns what it printed (the changes applied).
    ///
    /// # Errors
    /// As [`Self::cli`] (the daemon refused the change).
    pub fn backend(
        &self,
        action: &str,
        vip: &str,
        k: u8,
        weight: Option<u32>,
    ) -> anyhow::Result<String> {
        let v6 = vip.starts_with('[');
        let backend = backend_addr(k, v6).to_string();
        let weight = weight.map(|w| w.to_string());
        let mut args = vec!["backend", action, "--vip", vip, "--backend", &backend];
        if let Some(w) = &weight {
            args.extend(["--weight", w.as_str()]);
        }
        self.cli(&args)
    }

    /// Where a flow from `client` to `vip` goes (`lb flow --json`): the table's choice
    /// and the conntrack pin. Asked over the control socket directly (the CLI's own
    /// client, [`lb::control::Client`]), without a process per question, so that
    /// thousands of flows can be asked about quickly.
    ///
    /// # Errors
    /// An unreadable `vip`, or the daemon is unreachable or refuses.
    pub fn flow(&self, vip: &str, client: SocketAddr) -> anyhow::Result<FlowReport> {
        let parsed = vip.parse().map_err(|e| anyhow::anyhow!("VIP {vip}: {e}"))?;
        Client::new(self.socket_path())
            .flow(parsed, client)
            .with_context(|| format!("flow {client} -> {vip}"))
    }

    /// Polls `lb status` until `done` holds (then returns that status) or `timeout`
    /// passes.
    ///
    /// # Errors
    /// On timeout (naming `what`, with the last status and the daemon's log), or when
    /// `lb status` fails.
    pub fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Status) -> bool,
    ) -> anyhow::Result<Status> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.status()?;
            if done(&status) {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "waited {timeout:?} for {what}; last status: {status:#?}\ndaemon log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Stops the daemon with SIGTERM and waits (at most [`STOP_TIMEOUT`]) for it to
    /// exit; returns its log.
    ///
    /// # Errors
    /// When it had already exited, does not exit in time (it is then killed), or exits
    /// unsuccessfully; the message has its log.
    pub fn stop(mut self) -> anyhow::Result<String> {
        if let Some(status) = self.exited()? {
            bail!(
                "lb run had already exited ({status}); its log:\n{}",
                self.log()
            );
        }
        match self.terminate() {
            Some(Ok(status)) if status.success() => Ok(self.log()),
            Some(Ok(status)) => bail!("lb run exited with {status}; its log:\n{}", self.log()),
            Some(Err(())) => bail!(
                "lb run did not exit within {STOP_TIMEOUT:?} of SIGTERM (killed); its log:\n{}",
                self.log()
            ),
            None => bail!("lb run was not running"),
        }
    }

    /// SIGTERM, wait up to [`STOP_TIMEOUT`], else SIGKILL. `Ok(status)` when it exited
    /// by itself, `Err(())` when it had to be killed, `None` when there was no child.
    fn terminate(&mut self) -> Option<Result<ExitStatus, ()>> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(Ok(status));
        }
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) with the pid of our own, not yet reaped, child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => return Some(Ok(status)),
                Ok(None) => std::thread::sleep(POLL),
                Err(_) => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Some(Err(()))
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        if self.child.is_none() {
            return;
        }
        if std::thread::panicking() {
            eprintln!(
                "--- log of lb run ({}) ---\n{}--- end of log ---",
                self.log_path().display(),
                self.log()
            );
        }
        if let Some(Err(())) = self.terminate() {
            eprintln!("lb run did not exit within {STOP_TIMEOUT:?} of SIGTERM: killed");
        }
    }
}

/// The configuration the control-plane benchmarks start `lb run` with: `lb0` in skb
/// mode, gateway next hop, small conntrack maps, and `vips` TCP VIPs on port 80
/// (203.0.113.1 onwards, 250 per /24) of `table_size` slots with `backends` backends
/// each, backend `b` of VIP `v` at `10.` followed by the three octets `backend(v, b)`.
pub fn scale_config(
    dir: &Path,
    vips: usize,
    backends: usize,
    table_size: u32,
    backend: impl Fn(usize, usize) -> [usize; 3],
) -> String {
    let mut s = format!(
        "interface = \"lb0\"\nxdp_mode = \"skb\"\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n\
         max_table_memory_mib = 4096\n\
         [encap]\nsource_v4 = \"192.0.2.1\"\n[nexthop]\nmode = \"gateway\"\ngateway_mac = \"02:00:00:00:00:fe\"\n\
         [conntrack]\ncapacity = 65536\nsyn_capacity = 4096\n",
        dir.join("lb.sock").display(),
        dir.join("state").display()
    );
    for v in 0..vips {
        let _ = write!(
            s,
            "[[vip]]\naddress = \"203.0.{}.{}\"\nport = 80\nprotocol = \"tcp\"\ntable_size = {table_size}\n",
            113 + v / 250,
            1 + v % 250
        );
        for b in 0..backends {
            let [x, y, z] = backend(v, b);
            let _ = write!(s, "[[vip.backend]]\naddress = \"10.{x}.{y}.{z}\"\n");
        }
    }
    s
}

/// Starts a benchmark's `lb run` with `dir/lb.toml` in `ns` and returns it once it sent
/// `READY=1` on `notify` (bound at `dir/notify.sock`): the child, that message, and the
/// time from the start.
///
/// # Errors
/// The process cannot start, or `notify` times out.
pub fn start_until_ready(
    ns: &NetNs,
    dir: &Path,
    notify: &std::os::unix::net::UnixDatagram,
) -> anyhow::Result<(Child, String, Duration)> {
    start_logged_until_ready(&lb_binary(), ns, dir, notify, None)
}

/// [`start_until_ready`] of the `lb` binary `lb`; with `log`, its warnings and its
/// start's phases (target `lb::start`, at info level) go to that file (appended),
/// otherwise only its warnings, to this process's standard error.
///
/// # Errors
/// As [`start_until_ready`], or the log file cannot be opened.
pub fn start_logged_until_ready(
    lb: &Path,
    ns: &NetNs,
    dir: &Path,
    notify: &std::os::unix::net::UnixDatagram,
    log: Option<&Path>,
) -> anyhow::Result<(Child, String, Duration)> {
    let (level, stderr) = match log {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            ("warn,lb::start=info", Stdio::from(file))
        }
        None => ("warn", Stdio::inherit()),
    };
    let begun = Instant::now();
    let child = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(lb)
        .args(["run", "--config"])
        .arg(dir.join("lb.toml"))
        .env("NOTIFY_SOCKET", dir.join("notify.sock"))
        .env("RUST_LOG", level)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("lb run")?;
    let mut buf = [0u8; 4096];
    loop {
        let n = notify.recv(&mut buf).context("waiting for READY=1")?;
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        if message.lines().any(|l| l == "READY=1") {
            return Ok((child, message, begun.elapsed()));
        }
    }
}

/// Stops a benchmark's `lb run` with SIGTERM and waits for it.
///
/// # Errors
/// It exited unsuccessfully.
pub fn stop_gracefully(mut child: Child) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(child.id())?;
    // SAFETY: kill(2) with the pid of our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    if !child.wait()?.success() {
        bail!("lb run exited unsuccessfully");
    }
    Ok(())
}
