//! `lb run` as operators run it: the daemon on a veth in a throw-away namespace, changed
//! through the CLI and through reloads of its file; after every change the kernel maps
//! (read with `lb_dataplane::Inspector`) must agree with `lb status`.

use std::{
    collections::HashMap,
    io::{Read as _, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use lb::{
    config::Vip,
    control::{IDLE_TIMEOUT, MAX_REQUEST_BYTES, Status},
};
use lb_common::types::{BACKEND_ACTIVE, BACKEND_DOWN, BACKEND_DRAINING};
use lb_dataplane::Inspector;
use lb_tests::{
    daemon::{TempDir, lb_binary},
    netns::NetNs,
};

/// A running `lb run` inside a namespace, stopped (SIGTERM, then SIGKILL) on drop.
struct Daemon<'dir> {
    child: Option<Child>,
    dir: &'dir Path,
}

impl Daemon<'_> {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("lb.log")).unwrap_or_default()
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("lb.sock")
    }

    fn config(&self) -> PathBuf {
        self.dir.join("lb.toml")
    }

    /// Sends SIGTERM and returns the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill with a pid we own; at worst the process has already exited.
        unsafe { libc::kill(i32::try_from(child.id()).expect("pid"), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().expect("wait");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
    }
}

/// The `pin_dir` line of a test whose daemon cannot reach the host's bpffs (it runs
/// with fewer capabilities than the test: see `PrivateBpffs`), empty otherwise.
fn pin_line(dir: &Path) -> String {
    let private = dir.join("bpffs");
    if private.exists() {
        format!("pin_dir = \"{}\"\n", private.join("lb").display())
    } else {
        String::new()
    }
}

/// A bpffs mounted at `<dir>/bpffs` for one test (unmounted on drop, which frees what
/// is pinned in it): the daemon of the capability test holds only the unit's three
/// capabilities, which do not let it look into another mount namespace, so the host's
/// `/sys/fs/bpf` (hidden by `ip netns exec`) is out of its reach.
struct PrivateBpffs(PathBuf);

impl PrivateBpffs {
    fn mount(dir: &Path) -> Self {
        let at = dir.join("bpffs");
        std::fs::create_dir(&at).expect("mkdir bpffs");
        let ok = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&at)
            .status()
            .expect("mount")
            .success();
        assert!(ok, "mount -t bpf");
        Self(at)
    }
}

impl Drop for PrivateBpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn config_text(dir: &Path, backends_80: &[(&str, u32)], size_80: u32) -> String {
    let mut s = format!(
        "interface = \"lb0\"\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n{}[encap]\nsource_v4 = \"192.0.2.1\"\nsource_v6 = \"2001:db8:c::1\"\n[conntrack]\ncapacity = 65536\nsyn_capacity = 4096\n",
        dir.join("lb.sock").display(),
        dir.join("state").display(),
        pin_line(dir),
    );
    s.push_str(&format!(
        "[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\ntable_size = {size_80}\n"
    ));
    for (addr, weight) in backends_80 {
        s.push_str(&format!(
            "[[vip.backend]]\naddress = \"{addr}\"\nweight = {weight}\n"
        ));
    }
    s.push_str(
        "[[vip]]\naddress = \"2001:db8:f::10\"\nport = 53\nprotocol = \"udp\"\ntable_size = 1009\n\
         [[vip.backend]]\naddress = \"2001:db8:b::11\"\n[[vip.backend]]\naddress = \"2001:db8:b::12\"\n",
    );
    s
}

/// A new namespace with the veth pair lb0/lb1 up and 198.51.100.1/24 on lb0, so the
/// backends 198.51.100.x are on-link (the daemon has the kernel manage their neighbour
/// entries).
fn veth_namespace(prefix: &str) -> NetNs {
    let ns = veth_namespace_with_vlan_offload(prefix);
    ns.enter(|| lb_tests::testbed::offload::disable_rx_vlan("lb0"))
        .expect("enter")
        .expect("VLAN offload off: `lb run` refuses native XDP with it");
    ns
}

/// [`veth_namespace`] with the veth's receive VLAN offload left on, as created.
fn veth_namespace_with_vlan_offload(prefix: &str) -> NetNs {
    let ns = NetNs::create(prefix).expect("netns");
    ns.ip(&["link", "add", "lb0", "type", "veth", "peer", "name", "lb1"])
        .expect("veth");
    ns.ip(&["link", "set", "lb0", "up"]).expect("up");
    ns.ip(&["link", "set", "lb1", "up"]).expect("up");
    ns.ip(&["addr", "add", "198.51.100.1/24", "dev", "lb0"])
        .expect("addr");
    ns
}

/// Runs `lb run` in `ns` with `dir`'s configuration to its end (a failed start).
fn run_to_exit(ns: &NetNs, dir: &Path) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(lb_binary())
        .args(["run", "--config"])
        .arg(dir.join("lb.toml"))
        .output()
        .expect("lb run")
}

fn start<'dir>(ns: &NetNs, dir: &'dir Path) -> Daemon<'dir> {
    start_via(ns, dir, &[])
}

/// [`start`], with `lb` run through `wrapper` (a command and its arguments, e.g. setpriv).
fn start_via<'dir>(ns: &NetNs, dir: &'dir Path, wrapper: &[&str]) -> Daemon<'dir> {
    start_with(ns, dir, wrapper, &[])
}

/// [`start_via`] with extra environment variables; the log is appended to.
fn start_with<'dir>(
    ns: &NetNs,
    dir: &'dir Path,
    wrapper: &[&str],
    env: &[(&str, &Path)],
) -> Daemon<'dir> {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(dir.join("lb.log"))
        .expect("log file");
    let child = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .args(wrapper)
        .arg(lb_binary())
        .args(["run", "--config"])
        .arg(dir.join("lb.toml"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start lb run");
    let daemon = Daemon {
        child: Some(child),
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while lb(&daemon, &["status", "--json"]).status.code() != Some(0) {
        assert!(
            Instant::now() < deadline,
            "lb run did not come up:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon
}

fn lb(daemon: &Daemon<'_>, args: &[&str]) -> Output {
    Command::new(lb_binary())
        .args(args)
        .arg("--socket")
        .arg(daemon.socket())
        .output()
        .expect("run lb")
}

fn status(daemon: &Daemon<'_>) -> Status {
    let out = lb(daemon, &["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Id of the XDP program attached to `iface` in `ns`, if any.
fn attached_program(ns: &NetNs, iface: &str) -> Option<u32> {
    let out = ns
        .exec("ip", &["-j", "link", "show", "dev", iface])
        .expect("ip link");
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j");
    links[0]["xdp"]["prog"]["id"]
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
}

/// Asserts the kernel maps hold exactly what `lb status` reports.
fn assert_maps_agree(ns: &NetNs, status: &Status) {
    let program = attached_program(ns, "lb0").expect("program attached");
    let maps = Inspector::for_program(program).expect("inspect the daemon's maps");
    let vips = maps.vips().expect("VIPS");
    assert_eq!(vips.len(), status.vips.len(), "one VIPS entry per VIP");
    for v in &status.vips {
        let vip: Vip = v.vip.parse().expect("vip");
        let (_, entry) = vips
            .iter()
            .find(|(k, _)| *k == vip.key())
            .unwrap_or_else(|| panic!("{} missing from VIPS", v.vip));
        assert_eq!(entry.vip_id, v.id);
        let table = maps.table(entry).expect("read table").expect("live table");
        assert_eq!(table.generation, v.generation, "{}", v.vip);
        assert_eq!(table.slots.len(), v.table_size as usize, "{}", v.vip);
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for id in &table.slots {
            *counts.entry(*id).or_default() += 1;
        }
        for b in &v.backends {
            assert_eq!(
                counts.get(&b.id).copied().unwrap_or(0),
                b.slots,
                "{} backend {} slots",
                v.vip,
                b.address
            );
            let entry = maps.backend(b.id).expect("backend entry");
            let expected = match b.state.as_str() {
                "active" => BACKEND_ACTIVE,
                "drain" => BACKEND_DRAINING,
                _ => BACKEND_DOWN,
            };
            assert_eq!(
                entry.state, expected,
                "{} backend {} state",
                v.vip, b.address
            );
        }
        let listed: u32 = v.backends.iter().map(|b| b.slots).sum();
        assert_eq!(
            listed, v.table_size,
            "every slot belongs to a listed backend"
        );
    }
}

/// Writes `bytes` on a new control connection (from another thread, as the daemon may
/// stop reading) and returns everything the daemon answers until it closes.
fn raw_exchange(socket: &Path, bytes: Vec<u8>) -> String {
    let stream = UnixStream::connect(socket).expect("connect to the control socket");
    stream
        .set_read_timeout(Some(IDLE_TIMEOUT + Duration::from_secs(10)))
        .expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&bytes);
    });
    let mut answer = String::new();
    let _ = (&stream).read_to_string(&mut answer);
    sender.join().expect("sender");
    answer
}

fn wait_for(daemon: &Daemon<'_>, what: &str, f: impl Fn(&Status) -> bool) -> Status {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = status(daemon);
        if f(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cli_changes_and_reloads_keep_maps_and_status_in_agreement() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace("lbt-daemon");
    let tmp = TempDir::new("lbt-daemon-").expect("temp dir");
    let dir = tmp.path();
    let config = |b: &[(&str, u32)], size| config_text(dir, b, size);
    std::fs::write(
        dir.join("lb.toml"),
        config(&[("198.51.100.11", 1), ("198.51.100.12", 1)], 65_537),
    )
    .expect("config");
    let mut daemon = start(&ns, dir);
    // A client that connects and never writes: the daemon serves everyone else meanwhile
    // and closes this connection after its idle timeout (checked below).
    let idle = UnixStream::connect(daemon.socket()).expect("idle connection");
    let idle_since = Instant::now();

    let s = status(&daemon);
    assert_eq!((s.interface.as_str(), s.mode.as_str()), ("lb0", "native"));
    let neigh = ns
        .exec("ip", &["neigh", "show", "198.51.100.12"])
        .expect("ip neigh");
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains("managed"),
        "FIB mode: the backend's neighbour is managed: {}",
        String::from_utf8_lossy(&neigh.stdout)
    );
    assert!(!s.differs_from_file);
    assert_maps_agree(&ns, &s);

    // Through the CLI: add, drain, remove.
    let vip = "203.0.113.10:80/tcp";
    let out = lb(
        &daemon,
        &[
            "backend",
            "add",
            "--vip",
            vip,
            "--backend",
            "198.51.100.13",
            "--weight",
            "2",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("slots changed owner"));
    let s = status(&daemon);
    assert!(s.differs_from_file);
    assert_eq!(s.vips[0].backends.len(), 3);
    assert_maps_agree(&ns, &s);
    assert!(
        lb(
            &daemon,
            &[
                "backend",
                "drain",
                "--vip",
                vip,
                "--backend",
                "198.51.100.11"
            ]
        )
        .status
        .success()
    );
    let s = status(&daemon);
    assert_eq!(s.vips[0].backends[0].state, "drain");
    assert_maps_agree(&ns, &s);
    let removed_id = s.vips[0].backends[1].id;
    assert!(
        lb(
            &daemon,
            &[
                "backend",
                "remove",
                "--vip",
                vip,
                "--backend",
                "198.51.100.12"
            ]
        )
        .status
        .success()
    );
    let s = status(&daemon);
    assert_maps_agree(&ns, &s);
    let program = attached_program(&ns, "lb0").expect("attached");
    assert_eq!(
        Inspector::for_program(program)
            .expect("inspect")
            .backend(removed_id)
            .expect("entry")
            .state,
        BACKEND_DOWN,
        "a removed backend is marked down"
    );

    // Errors reach the CLI with a non-zero exit.
    let out = lb(
        &daemon,
        &[
            "backend",
            "add",
            "--vip",
            "203.0.113.10:81/tcp",
            "--backend",
            "198.51.100.13",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "lb: VIP 203.0.113.10:81/tcp is not configured"
    );

    // A request larger than the limit is refused after the limit, not buffered whole
    // (the client would send 8 MiB); the daemon keeps serving.
    let answer = raw_exchange(&daemon.socket(), vec![b'x'; 8 << 20]);
    assert_eq!(
        answer,
        format!("{{\"ok\":false,\"error\":\"request larger than {MAX_REQUEST_BYTES} bytes\"}}\n")
    );
    assert!(lb(&daemon, &["status"]).status.success());
    // The idle connection was answered with the reason and closed within its timeout.
    idle.set_read_timeout(Some(IDLE_TIMEOUT + Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = String::new();
    (&idle)
        .read_to_string(&mut answer)
        .expect("the daemon closes the idle connection");
    assert!(
        answer.contains(&format!("no complete request within {IDLE_TIMEOUT:?}")),
        "{answer}"
    );
    assert!(idle_since.elapsed() < IDLE_TIMEOUT + Duration::from_secs(10));

    // A reload merges the file with the runtime changes: 11 drained at runtime stays
    // drained (the file still says what it said), 13 added at runtime stays, 12 removed
    // at runtime comes back with the file's new weight (the file changed it: the file
    // wins), 14 is new in the file.
    std::fs::write(
        daemon.config(),
        config(
            &[
                ("198.51.100.11", 1),
                ("198.51.100.12", 3),
                ("198.51.100.14", 1),
            ],
            65_521,
        ),
    )
    .expect("config");
    let s = wait_for(&daemon, "the reload", |s| s.vips[0].table_size == 65_521);
    assert!(s.differs_from_file);
    let backends: Vec<(&str, &str, u32)> = s.vips[0]
        .backends
        .iter()
        .map(|b| (b.address.as_str(), b.state.as_str(), b.weight))
        .collect();
    assert_eq!(
        backends,
        [
            ("198.51.100.11", "drain", 1),
            ("198.51.100.12", "active", 3),
            ("198.51.100.13", "active", 2),
            ("198.51.100.14", "active", 1)
        ]
    );
    assert_eq!(s.vips[0].backends[0].runtime.as_deref(), Some("drain"));
    assert!(
        daemon
            .log()
            .contains("the file changed backend 198.51.100.12 of VIP 203.0.113.10:80/tcp"),
        "the dropped runtime change is logged:\n{}",
        daemon.log()
    );
    assert_maps_agree(&ns, &s);

    // An invalid file changes nothing; SIGHUP reloads too.
    std::fs::write(daemon.config(), "interface = \"lb0\"\nbogus = 1\n").expect("config");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon
        .log()
        .contains("reload: invalid configuration, nothing applied: bogus: unknown field `bogus`")
    {
        assert!(
            Instant::now() < deadline,
            "no error logged:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let unchanged = status(&daemon);
    assert_eq!(unchanged.vips[0].generation, s.vips[0].generation);
    assert_maps_agree(&ns, &unchanged);

    // SIGTERM: exit 0, the datapath stays attached, socket removed; `lb detach`
    // (run in the namespace, no daemon) removes it.
    let program = attached_program(&ns, "lb0");
    let code = daemon.stop();
    assert!(code.success(), "{code:?}\n{}", daemon.log());
    assert!(program.is_some());
    assert_eq!(attached_program(&ns, "lb0"), program, "still attached");
    assert!(!daemon.socket().exists());
    let out = ns
        .exec(
            lb_binary().to_str().expect("path"),
            &["detach", "--interface", "lb0"],
        )
        .expect("lb detach");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(attached_program(&ns, "lb0"), None);
    let dir = ns.pin_dir().expect("cookie").join("lb0");
    assert!(!dir.exists(), "{} removed", dir.display());
}

#[test]
fn an_invalid_file_at_start_attaches_nothing() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = NetNs::create("lbt-badcfg").expect("netns");
    ns.ip(&["link", "add", "lb0", "type", "veth", "peer", "name", "lb1"])
        .expect("veth");
    let tmp = TempDir::new("lbt-badcfg-").expect("temp dir");
    let dir = tmp.path();
    let text = config_text(dir, &[("198.51.100.11", 1)], 65_536);
    std::fs::write(dir.join("lb.toml"), text).expect("config");
    let out = run_to_exit(&ns, dir);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "vip[0].table_size: table_size 65536 is not prime (nearest primes: 65521 and 65537)"
        ),
        "{stderr}"
    );
    assert_eq!(attached_program(&ns, "lb0"), None);
}

/// Receive VLAN offload (on by default on a veth) hides 802.1Q tags from native XDP,
/// which would send tagged frames back untagged (failure scenario BR-23): `native`
/// refuses the interface, naming the fix; `auto` takes skb mode, where the kernel keeps
/// the tag.
#[test]
fn native_xdp_is_refused_where_the_nic_strips_vlan_tags() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace_with_vlan_offload("lbt-rxvlan");
    let tmp = TempDir::new("lbt-rxvlan-").expect("temp dir");
    let dir = tmp.path();
    let text = config_text(dir, &[("198.51.100.11", 1)], 65_537);
    std::fs::write(
        dir.join("lb.toml"),
        text.replace(
            "interface = \"lb0\"\n",
            "interface = \"lb0\"\nxdp_mode = \"native\"\n",
        ),
    )
    .expect("config");
    let out = run_to_exit(&ns, dir);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("native XDP refused: interface lb0 has receive VLAN offload on")
            && stderr.contains("ethtool -K lb0 rxvlan off"),
        "{stderr}"
    );
    assert_eq!(attached_program(&ns, "lb0"), None);
    // Refused before the datapath was touched: nothing was created, nothing is left.
    assert!(!stderr.contains("created the datapath"), "{stderr}");
    let pins = ns.pin_dir().expect("cookie");
    assert!(
        !pins.exists(),
        "a refused start leaves no pin directory: {:?}",
        std::fs::read_dir(&pins).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
    );
    // `auto`: skb mode, with the reason in the log.
    std::fs::write(dir.join("lb.toml"), &text).expect("config");
    let daemon = start(&ns, dir);
    assert_eq!(status(&daemon).mode, "skb");
    assert!(
        daemon.log().contains("attaching in skb (generic) mode"),
        "{}",
        daemon.log()
    );
}

/// A start that fails after it created the datapath (here: its control socket cannot be
/// bound) removes what it created: no pin directory is left, and the log never said
/// the datapath was created.
#[test]
fn a_start_refused_after_creating_the_datapath_leaves_no_pins() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace_with_vlan_offload("lbt-refused");
    let tmp = TempDir::new("lbt-refused-").expect("temp dir");
    let dir = tmp.path();
    let text = config_text(dir, &[("198.51.100.11", 1)], 65_537);
    let socket = format!("control_socket = \"{}\"", dir.join("lb.sock").display());
    // A regular file where the socket's directory should be: the bind fails.
    std::fs::write(dir.join("file"), "").expect("file");
    let blocked = format!(
        "control_socket = \"{}\"",
        dir.join("file").join("lb.sock").display()
    );
    std::fs::write(dir.join("lb.toml"), text.replace(&socket, &blocked)).expect("config");
    let out = run_to_exit(&ns, dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("binding"), "{stderr}");
    assert!(!stderr.contains("created the datapath"), "{stderr}");
    assert_eq!(attached_program(&ns, "lb0"), None);
    let pins = ns.pin_dir().expect("cookie");
    assert!(!pins.exists(), "{} is left", pins.display());
}

#[test]
fn without_privileges_it_refuses_with_a_hint() {
    assert!(
        lb_tests::is_root(),
        "privileged test: run as root (to drop privileges)"
    );
    let tmp = TempDir::new("lbt-unpriv-").expect("temp dir");
    let dir = tmp.path();
    std::fs::write(
        dir.join("lb.toml"),
        config_text(dir, &[("198.51.100.11", 1)], 65_537),
    )
    .expect("config");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(lb_binary())
        .args(["run", "--config"])
        .arg(dir.join("lb.toml"))
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(
            "lb: lb run needs root (or CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN): try `sudo lb run --config"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// The capabilities of `CapabilityBoundingSet=` in dist/systemd/lb.service, as setpriv
/// names them (`bpf`, `net_admin`, ...).
fn unit_capabilities() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dist/systemd/lb.service");
    let unit = std::fs::read_to_string(path).expect("dist/systemd/lb.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit has a CapabilityBoundingSet= line");
    line.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

/// `--bounding-set=` of setpriv keeping only `caps` (the daemon stays uid 0, so after
/// exec it holds exactly these, as under systemd's CapabilityBoundingSet=).
fn bounding_set(caps: &[String]) -> String {
    let mut arg = String::from("--bounding-set=-all");
    for cap in caps {
        arg.push_str(",+");
        arg.push_str(cap);
    }
    arg
}

#[test]
fn the_units_capabilities_are_enough_and_each_one_is_needed() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let caps = unit_capabilities();
    assert!(!caps.is_empty());
    let ns = veth_namespace("lbt-caps");
    let tmp = TempDir::new("lbt-caps-").expect("temp dir");
    let dir = tmp.path();
    let _bpffs = PrivateBpffs::mount(dir);
    std::fs::write(
        dir.join("lb.toml"),
        config_text(dir, &[("198.51.100.11", 1)], 65_537),
    )
    .expect("config");

    // Exactly the unit's set: the daemon loads, attaches, has the kernel manage the
    // backend's neighbour (`ip neigh`, a child process), and stops cleanly.
    let all = bounding_set(&caps);
    let mut daemon = start_via(&ns, dir, &["setpriv", &all, "--inh-caps=-all"]);
    assert!(attached_program(&ns, "lb0").is_some());
    let neigh = ns
        .exec("ip", &["neigh", "show", "198.51.100.11"])
        .expect("ip neigh");
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains("managed"),
        "{}",
        daemon.log()
    );
    let code = daemon.stop();
    assert!(code.success(), "{code:?}\n{}", daemon.log());
    let pins = dir.join("bpffs").join("lb");
    let out = ns
        .exec(
            lb_binary().to_str().expect("path"),
            &[
                "detach",
                "--interface",
                "lb0",
                "--pin-dir",
                pins.to_str().expect("path"),
            ],
        )
        .expect("lb detach");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Without any one of them, the start fails and attaches nothing.
    for missing in &caps {
        let rest: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "setpriv"])
            .arg(bounding_set(&rest))
            .arg("--inh-caps=-all")
            .arg(lb_binary())
            .args(["run", "--config"])
            .arg(dir.join("lb.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("setpriv lb run");
        // Read stderr while the daemon runs: an error longer than the pipe's buffer
        // would otherwise block the daemon's write, and the daemon would never exit.
        let mut pipe = child.stderr.take().expect("stderr piped");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
            text
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("lb run without CAP_{} kept running", missing.to_uppercase());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = reader.join().expect("stderr reader");
        let name = format!("CAP_{}", missing.to_uppercase());
        assert_eq!(status.code(), Some(1), "without {name}: {stderr}");
        assert!(
            stderr.contains(&format!("this process lacks {name}")),
            "the error names the missing {name}: {stderr}"
        );
        assert_eq!(attached_program(&ns, "lb0"), None, "without CAP_{missing}");
    }
}

/// `lb detach --interface lb0` inside `ns`.
fn detach(ns: &NetNs) -> Output {
    ns.exec(
        lb_binary().to_str().expect("path"),
        &["detach", "--interface", "lb0"],
    )
    .expect("lb detach")
}

/// Lines of the daemon's log that mention a reload.
fn reload_lines(daemon: &Daemon<'_>) -> usize {
    daemon
        .log()
        .lines()
        .filter(|l| l.to_lowercase().contains("reload"))
        .count()
}

fn drain_11(daemon: &Daemon<'_>) {
    let out = lb(
        daemon,
        &[
            "backend",
            "drain",
            "--vip",
            "203.0.113.10:80/tcp",
            "--backend",
            "198.51.100.11",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn state_of_11(daemon: &Daemon<'_>) -> String {
    status(daemon).vips[0].backends[0].state.clone()
}

/// After a runtime drain: reading the file 100 times, opening it for writing without
/// writing, and touching it change nothing and log no reload; a real edit (by rename,
/// as editors save) reloads exactly once and keeps the drain; a restart restores it.
#[test]
fn only_a_real_edit_reloads_and_runtime_changes_survive_restarts() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace("lbt-reload");
    let tmp = TempDir::new("lbt-reload-").expect("temp dir");
    let dir = tmp.path();
    let text = config_text(dir, &[("198.51.100.11", 1), ("198.51.100.12", 1)], 65_537);
    std::fs::write(dir.join("lb.toml"), &text).expect("config");
    let mut daemon = start(&ns, dir);
    drain_11(&daemon);
    let before = reload_lines(&daemon);
    for _ in 0..100 {
        std::fs::read(daemon.config()).expect("read");
    }
    drop(
        std::fs::OpenOptions::new()
            .write(true)
            .open(daemon.config())
            .expect("open for writing"),
    );
    assert!(
        Command::new("touch")
            .arg(daemon.config())
            .status()
            .expect("touch")
            .success()
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(state_of_11(&daemon), "drain", "{}", daemon.log());
    assert_eq!(
        reload_lines(&daemon),
        before,
        "no reload logged:\n{}",
        daemon.log()
    );

    // The same bytes written again: no reload either.
    std::fs::write(daemon.config(), &text).expect("same bytes");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(reload_lines(&daemon), before, "{}", daemon.log());

    // A real edit, saved by rename: one reload; the drain holds (the file did not
    // change backend 11).
    let edited = config_text(dir, &[("198.51.100.11", 1), ("198.51.100.12", 2)], 65_537);
    std::fs::write(dir.join(".lb.toml.swp"), edited).expect("tmp");
    std::fs::rename(dir.join(".lb.toml.swp"), daemon.config()).expect("rename");
    let s = wait_for(&daemon, "the reload", |s| s.vips[0].backends[1].weight == 2);
    std::thread::sleep(Duration::from_millis(1000));
    let reloads = daemon
        .log()
        .lines()
        .filter(|l| l.contains("reloading"))
        .count();
    assert_eq!(reloads, 1, "{}", daemon.log());
    assert_eq!(s.vips[0].backends[0].state, "drain");

    // A restart (SIGTERM, then start) restores the drain from the state file.
    assert!(daemon.stop().success());
    let daemon = start(&ns, dir);
    let s = status(&daemon);
    assert_eq!(s.vips[0].backends[0].state, "drain");
    assert_eq!(s.vips[0].backends[0].runtime.as_deref(), Some("drain"));
    assert_eq!(s.overrides.len(), 1);
    let out = lb(&daemon, &["overrides"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("198.51.100.11"));
    drop(daemon);
    assert!(detach(&ns).status.success());
}

/// A corrupt state file stops the start with the file and the problem named, before
/// anything is attached.
#[test]
fn a_corrupt_state_file_stops_the_start() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace("lbt-corrupt");
    let tmp = TempDir::new("lbt-corrupt-").expect("temp dir");
    let dir = tmp.path();
    std::fs::write(
        dir.join("lb.toml"),
        config_text(dir, &[("198.51.100.11", 1)], 65_537),
    )
    .expect("config");
    std::fs::create_dir(dir.join("state")).expect("state dir");
    let state = dir.join("state").join("lb0.state.json");
    std::fs::write(&state, "{\"version\": 1, \"overrides\": [{").expect("state");
    let out = ns
        .exec(
            lb_binary().to_str().expect("path"),
            &[
                "run",
                "--config",
                dir.join("lb.toml").to_str().expect("path"),
            ],
        )
        .expect("lb run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("state file {}: is corrupt:", state.display())),
        "{stderr}"
    );
    assert_eq!(attached_program(&ns, "lb0"), None);
}

/// READY=1 arrives on $NOTIFY_SOCKET once the program is attached and the control
/// socket answers; STOPPING=1 at SIGTERM.
#[test]
fn it_tells_the_service_manager_when_it_is_ready() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace("lbt-notify");
    let tmp = TempDir::new("lbt-notify-").expect("temp dir");
    let dir = tmp.path();
    std::fs::write(
        dir.join("lb.toml"),
        config_text(dir, &[("198.51.100.11", 1)], 65_537),
    )
    .expect("config");
    let notify_path = dir.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("notify socket");
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut daemon = start_with(&ns, dir, &[], &[("NOTIFY_SOCKET", &notify_path)]);
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.lines().any(|l| l == "READY=1"), "{message}");
    assert!(attached_program(&ns, "lb0").is_some());
    assert!(lb(&daemon, &["status"]).status.success());
    assert!(daemon.stop().success());
    let n = sock.recv(&mut buf).expect("the stop notification");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    assert!(detach(&ns).status.success());
}

/// A second `lb run` for an interface another daemon controls names it (pid, socket);
/// a new daemon started right after SIGTERM to the old one comes up (it waits for the
/// exiting one instead of refusing).
#[test]
fn a_second_daemon_is_refused_by_name_and_a_restart_need_not_wait() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace("lbt-second");
    let tmp = TempDir::new("lbt-second-").expect("temp dir");
    let dir = tmp.path();
    let text = config_text(dir, &[("198.51.100.11", 1)], 65_537);
    std::fs::write(dir.join("lb.toml"), &text).expect("config");
    let mut first = start(&ns, dir);
    let pid = first.child.as_ref().expect("running").id();
    let other = TempDir::new("lbt-second-b-").expect("temp dir");
    std::fs::write(
        other.path().join("lb.toml"),
        config_text(other.path(), &[("198.51.100.11", 1)], 65_537),
    )
    .expect("config");
    let out = ns
        .exec(
            lb_binary().to_str().expect("path"),
            &[
                "run",
                "--config",
                other.path().join("lb.toml").to_str().expect("path"),
            ],
        )
        .expect("second lb run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "interface lb0 is controlled by another lb run (pid {pid}, control socket {})",
            first.socket().display()
        )),
        "{stderr}"
    );
    // SIGTERM, then a start as soon as the old daemon has taken the signal, before it
    // exits. (Started before the signal is handled, the new one rightly finds the old
    // one running: that race is the machine's, not the daemon's.)
    let mut child = first.child.take().expect("running");
    // SAFETY: kill with the pid of our own child.
    unsafe { libc::kill(i32::try_from(child.id()).expect("pid"), libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !first.log().contains("SIGTERM: shutting down") {
        assert!(
            Instant::now() < deadline,
            "no SIGTERM line:\n{}",
            first.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = start(&ns, dir);
    assert!(child.wait().expect("wait").success());
    assert!(status(&second).vips.len() == 2, "{}", second.log());
    assert!(
        second.socket().exists(),
        "the old daemon did not remove the new socket"
    );
    drop(second);
    drop(first);
    assert!(detach(&ns).status.success());
}

/// Stops `daemon` (SIGTERM), starts it again, and gives the program id on `lb0`.
fn restart<'dir>(daemon: &mut Daemon<'dir>, ns: &NetNs, dir: &'dir Path) -> u32 {
    assert!(daemon.stop().success(), "{}", daemon.log());
    *daemon = start(ns, dir);
    attached_program(ns, "lb0").expect("attached")
}

/// A restart of the same build keeps the programs that run (no verification, the same
/// program id on the interface); a start replaces them when no `programs` pin claims
/// them (none, or one of zeros), and when any one of the four ids the pin names is not
/// the program that runs there.
#[test]
fn a_restart_keeps_the_running_programs_of_its_own_build_only() {
    use lb_dataplane::pinned::meta::{read_programs, write_programs};
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let ns = veth_namespace("lbt-keep");
    let tmp = TempDir::new("lbt-keep-").expect("temp dir");
    let dir = tmp.path();
    std::fs::write(
        dir.join("lb.toml"),
        config_text(dir, &[("198.51.100.11", 1)], 65_537),
    )
    .expect("config");
    let pin = ns.pin_dir().expect("cookie").join("lb0").join("programs");
    let mut daemon = start(&ns, dir);
    let first = attached_program(&ns, "lb0").expect("attached");
    let claimed = read_programs(&pin).expect("read").expect("programs pinned");
    assert_eq!(claimed.ids.link, first);
    assert_eq!(restart(&mut daemon, &ns, dir), first, "{}", daemon.log());
    assert!(
        daemon.log().contains(&format!(
            "kept the programs of the pinned XDP link on lb0: the same build (program {first})"
        )),
        "{}",
        daemon.log()
    );
    // An element of zeros (a start that died between creating and writing it).
    assert!(daemon.stop().success());
    write_programs(&pin, &Default::default()).expect("write");
    daemon = start(&ns, dir);
    let mut last = attached_program(&ns, "lb0").expect("attached");
    assert_ne!(last, first, "{}", daemon.log());
    assert!(
        daemon.log().contains("the programs pin claims nothing"),
        "{}",
        daemon.log()
    );
    // No pin at all (a start that died after it removed the pin, before its claim).
    assert!(daemon.stop().success());
    std::fs::remove_file(&pin).expect("remove the pin");
    daemon = start(&ns, dir);
    let now = attached_program(&ns, "lb0").expect("attached");
    assert_ne!(now, last, "{}", daemon.log());
    assert!(daemon.log().contains("no programs pin claims them"));
    last = now;
    // This build's object, and one id that does not run.
    for changed in 0..4 {
        assert!(daemon.stop().success());
        let mut claim = read_programs(&pin).expect("read").expect("programs pinned");
        assert_eq!(claim.ids.link, last);
        let id = match changed {
            0 => &mut claim.ids.link,
            1 => &mut claim.ids.rare,
            2 => &mut claim.ids.full,
            _ => &mut claim.ids.trace,
        };
        *id = id.wrapping_add(1_000_000);
        write_programs(&pin, &claim).expect("write");
        daemon = start(&ns, dir);
        let now = attached_program(&ns, "lb0").expect("attached");
        assert_ne!(now, last, "id {changed} changed:\n{}", daemon.log());
        last = now;
    }
    assert_eq!(restart(&mut daemon, &ns, dir), last, "kept again");
    drop(daemon);
    assert!(detach(&ns).status.success());
}

/// The unit is Type=notify with a state directory and still passes
/// `systemd-analyze verify` (on a copy naming the built binary: verify checks that
/// `ExecStart`'s binary exists).
#[test]
fn the_unit_is_type_notify_and_verifies() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dist/systemd/lb.service");
    let unit = std::fs::read_to_string(path).expect("unit");
    for line in [
        "Type=notify",
        "NotifyAccess=main",
        "StateDirectory=lb",
        "Restart=on-failure",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line}");
    }
    let tmp = TempDir::new("lbt-unit-").expect("temp dir");
    let copy = tmp.path().join("lb.service");
    let unit = unit
        .replace("/usr/bin/lb", lb_binary().to_str().expect("path"))
        .replace("Documentation=man:lb(8) man:lb-run(8)\n", "");
    std::fs::write(&copy, unit).expect("copy");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("systemd-analyze (Debian's systemd package, installed by cargo xtask setup)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
