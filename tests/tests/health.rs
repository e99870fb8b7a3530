//! Health probes across network namespaces (privileged): a prober namespace ("lb") and
//! a backend namespace joined by a veth pair, with nftables rules inside them.
//!
//! - A drop rule in the backend's namespace makes its packets vanish: the TCP probe
//!   times out while connecting, the scheduler marks the backend unhealthy within
//!   `fall` x interval + timeout, and it recovers when the rule goes.
//! - Tunnel mode: probes go to the VIP address with the backend's mark. An output rule
//!   in the prober's namespace lets through only packets to the VIP that carry backend
//!   7's mark (standing in for the TC program that will encapsulate them), so a probe
//!   with the right mark succeeds, one with another backend's mark fails, and the rule's
//!   counter proves the mark was on the packets.
//!
//! Addresses: prober 198.51.100.1, backend 198.51.100.11, VIP 203.0.113.10 on the
//! backend's loopback; all inside the two namespaces, which are deleted on drop.

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use lb_health::{
    file::HealthFile,
    outcome::{Failure, Stage},
    probe::Prober,
    scheduler::{ProbeSpec, Scheduler, SchedulerConfig, Start},
    settings::{Mode, ProbeSettings},
    target::ProbeTarget,
    validate::VipHealth,
};
use lb_maglev::BackendKey;
use lb_tests::netns::NetNs;

const PROBER: &str = "198.51.100.1";
const BACKEND: &str = "198.51.100.11";
const VIP: &str = "203.0.113.10";
const PORT: u16 = 8080;

/// The two namespaces, wired.
struct Bed {
    lb: NetNs,
    backend: NetNs,
}

impl Bed {
    fn new() -> Self {
        assert!(lb_tests::is_root(), "privileged test: run as root");
        let lb = NetNs::create("lbh-p").expect("prober namespace");
        let backend = NetNs::create("lbh-b").expect("backend namespace");
        lb.ip(&[
            "link",
            "add",
            "h0",
            "type",
            "veth",
            "peer",
            "name",
            "h1",
            "netns",
            backend.name(),
        ])
        .expect("veth");
        lb.ip(&["addr", "add", &format!("{PROBER}/24"), "dev", "h0"])
            .expect("prober address");
        lb.ip(&["link", "set", "h0", "up"]).expect("h0 up");
        lb.ip(&["route", "add", &format!("{VIP}/32"), "via", BACKEND])
            .expect("VIP route");
        backend
            .ip(&["addr", "add", &format!("{BACKEND}/24"), "dev", "h1"])
            .expect("backend address");
        backend.ip(&["link", "set", "h1", "up"]).expect("h1 up");
        backend
            .ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"])
            .expect("VIP on the backend's loopback");
        Self { lb, backend }
    }

    /// A TCP listener in the backend's namespace on `addr`:`PORT`.
    fn listen(&self, addr: &str) -> std::net::TcpListener {
        let addr: SocketAddr = format!("{addr}:{PORT}").parse().unwrap();
        let listener = self
            .backend
            .enter(|| std::net::TcpListener::bind(addr))
            .expect("enter")
            .expect("bind");
        listener.set_nonblocking(true).unwrap();
        listener
    }

    /// Runs `f` on a current-thread runtime whose thread is in the prober's namespace
    /// (probe sockets are created there).
    fn run<T: Send>(&self, f: impl Future<Output = T> + Send) -> T {
        self.lb
            .enter(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(f)
            })
            .expect("enter the prober namespace")
    }
}

/// `nft` inside `ns`, one command.
fn nft(ns: &NetNs, command: &str) {
    let args: Vec<&str> = command.split_whitespace().collect();
    let out = ns.exec("nft", &args).expect("nft (install nftables)");
    assert!(
        out.status.success(),
        "nft {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Accepts and closes connections until the runtime ends.
fn serve(listener: std::net::TcpListener) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
}

fn tcp_settings(text: &str) -> ProbeSettings {
    let file: HealthFile = toml::from_str(&format!("kind = \"tcp\"\n{text}")).unwrap();
    VipHealth::from_file("vip[0].health", Some(&file), PORT)
        .unwrap()
        .probe
        .unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_drop_rule_in_the_backend_namespace_gives_connect_timeouts() {
    let bed = Bed::new();
    let listener = bed.listen(BACKEND);
    let settings = tcp_settings("interval_ms = 200\ntimeout_ms = 100");
    let target = ProbeTarget::direct(ip(BACKEND), PORT, None).unwrap();
    bed.run(async {
        serve(listener);
        let prober = Prober::new(&settings.check, target).unwrap();
        prober
            .run(settings.timeout)
            .await
            .expect("reachable before the rule");

        let (s, _batches) = Scheduler::<u32>::start(SchedulerConfig::default());
        let b = BackendKey::new(ip(BACKEND), None);
        let spec = ProbeSpec {
            settings: settings.clone(),
            target,
        };
        s.set(1, b, spec, Start::AssumeHealthy).unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(s.is_healthy(&1, &b));

        nft(&bed.backend, "add table inet blackhole");
        nft(
            &bed.backend,
            "add chain inet blackhole input { type filter hook input priority 0 ; }",
        );
        nft(
            &bed.backend,
            &format!("add rule inet blackhole input tcp dport {PORT} drop"),
        );
        assert_eq!(
            prober.run(settings.timeout).await,
            Err(Failure::Timeout {
                stage: Stage::Connect,
                after: settings.timeout
            })
        );
        // fall x interval + timeout, plus one interval of phase and a second of margin.
        let bound = settings.interval * settings.thresholds.fall
            + settings.timeout
            + settings.interval
            + Duration::from_secs(1);
        let dropped = Instant::now();
        while s.is_healthy(&1, &b) {
            assert!(dropped.elapsed() < bound, "not detected within {bound:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!("drop rule: unhealthy after {:?}", dropped.elapsed());
        assert!(matches!(
            s.status(&1, &b).unwrap().last_error,
            Some(Failure::Timeout {
                stage: Stage::Connect,
                ..
            })
        ));

        nft(&bed.backend, "delete table inet blackhole");
        let bound = settings.interval * settings.thresholds.rise
            + settings.timeout
            + settings.interval
            + Duration::from_secs(1);
        let lifted = Instant::now();
        while !s.is_healthy(&1, &b) {
            assert!(lifted.elapsed() < bound, "not recovered within {bound:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// Packets of the rule `meta mark <mark> counter accept` counted so far.
fn marked_packets(ns: &NetNs) -> u64 {
    let out = ns
        .exec("nft", &["list", "chain", "inet", "probe", "out"])
        .expect("nft list");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("meta mark"))
        .unwrap_or_else(|| panic!("no mark rule in {text}"));
    let mut words = line.split_whitespace();
    words.find(|w| *w == "packets");
    words
        .next()
        .and_then(|n| n.parse().ok())
        .expect("packet count")
}

#[test]
fn tunnel_probes_go_to_the_vip_marked_with_the_backends_id() {
    let bed = Bed::new();
    let listener = bed.listen(VIP);
    let settings = tcp_settings("mode = \"tunnel\"\ntimeout_ms = 300");
    assert_eq!(settings.mode, Mode::Tunnel);
    let mark = lb_common::probe::probe_mark(7).unwrap();
    nft(&bed.lb, "add table inet probe");
    nft(
        &bed.lb,
        "add chain inet probe out { type filter hook output priority 0 ; }",
    );
    nft(
        &bed.lb,
        &format!("add rule inet probe out ip daddr {VIP} meta mark {mark:#x} counter accept"),
    );
    nft(
        &bed.lb,
        &format!("add rule inet probe out ip daddr {VIP} drop"),
    );
    let select = |id| {
        ProbeTarget::select(
            settings.mode,
            ip(VIP),
            ip(BACKEND),
            id,
            settings.port,
            Some(ip(PROBER)),
        )
        .unwrap()
    };
    let right = select(7);
    assert_eq!(right.dest, SocketAddr::new(ip(VIP), PORT));
    assert_eq!(right.mark, Some(0x4c42_0007));
    let wrong = select(8);
    bed.run(async {
        serve(listener);
        Prober::new(&settings.check, right)
            .unwrap()
            .run(settings.timeout)
            .await
            .expect("backend 7's probe reaches the VIP");
        assert!(marked_packets(&bed.lb) >= 2, "SYN and ACK carried the mark");
        let before = marked_packets(&bed.lb);
        let result = Prober::new(&settings.check, wrong)
            .unwrap()
            .run(settings.timeout)
            .await;
        // An output drop refuses the SYN at once (EPERM) instead of losing it.
        assert!(result.is_err(), "backend 8's mark passed: {result:?}");
        assert_eq!(marked_packets(&bed.lb), before);
    });
}
