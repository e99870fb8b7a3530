//! The datapath outlives the daemon: restarts, crashes and upgrades of `lb run` under
//! real TCP traffic through a test bed, and the refusal of a pinned datapath the new
//! configuration cannot adopt.
//!
//! Scenarios (the failure cases of agents that reload their data plane on restart,
//! described in docs/src/operations/failure-scenarios.md under BR-11):
//! - plain restart, crash (`kill -9`, then a second with no daemon at all), and an
//!   upgrade to a build whose program differs: long-lived connections keep their
//!   backend, new connections are answered throughout, no VIP packet reaches the LB's
//!   own IP stack (the program never leaves the interface), conntrack hits keep rising;
//!   the restarts of the same build keep its running program, the upgrade and the
//!   start after it replace it;
//! - a backend added to the file while the daemon is down: at start it takes new flows,
//!   while established flows whose slots it took stay where they were;
//! - the table size changes across a restart: the new size is installed whole, no
//!   packet meets an empty table, established flows stay;
//! - the conntrack capacity changes across a restart: the start is refused naming the
//!   setting, the pinned datapath keeps forwarding untouched, and `--reset` starts
//!   fresh, saying how many conntrack entries it discarded.

use std::{net::SocketAddr, time::Duration};

use lb_tests::{
    daemon::{Daemon, DaemonConfig, Stop, vip_text},
    steady::{HostStackCounter, Steady, SteadyOptions},
    testbed::{TcpConn, TestBed, TestBedOptions, vip_tcp},
};

/// The XDP program on the bed's LB interface: (id, tag).
fn xdp_program(bed: &TestBed) -> Option<(u64, String)> {
    let out = bed
        .lb_ns()
        .exec("ip", &["-j", "-d", "link", "show", "dev", bed.lb_iface()])
        .expect("ip link");
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j");
    let prog = &links[0]["xdp"]["prog"];
    Some((
        prog["id"].as_u64()?,
        prog["tag"].as_str().unwrap_or("").to_owned(),
    ))
}

/// The VIP's `ct_hits` counter (`lb stats`).
fn ct_hits(lb: &Daemon<'_>) -> u64 {
    let stats = lb.stats().expect("lb stats");
    let vip = vip_text(false, true);
    stats
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .and_then(|v| v.counters.iter().find(|c| c.name == "ct_hits"))
        .map_or(0, |c| c.value)
}

/// A global verdict counter (`lb stats`).
fn reason(lb: &Daemon<'_>, name: &str) -> u64 {
    lb.reason(name).expect("lb stats")
}

#[test]
fn restarts_crashes_and_upgrades_keep_every_connection_and_the_program_attached() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 4,
        clients: 16,
        ..TestBedOptions::default()
    })
    .expect("bed");
    let mut lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    // A first start finds nothing pinned (the empty directories it creates for its pins
    // are not leftovers of an earlier one).
    let log = lb.log();
    assert!(
        log.contains("created the datapath") && !log.contains("earlier start"),
        "first start:\n{log}"
    );
    let host = HostStackCounter::install(bed.lb_ns()).expect("nft counter");
    let variant = lb.dir().join("lb-ebpf-variant.o");
    std::fs::write(&variant, lb_dataplane::UPGRADE_VARIANT_OBJECT).expect("variant object");
    let variant = variant.to_str().expect("path").to_owned();
    let (first_id, first_tag) = xdp_program(&bed).expect("attached");
    // 400 more established flows, quiet during the restarts, checked once at the end:
    // with the 100 busy ones, 500 flows whose conntrack entries must survive.
    let quiet: Vec<(TcpConn, String)> = (0..400)
        .map(|j| {
            let src = SocketAddr::new(bed.client_addr(j % bed.client_count(), false), 0);
            let mut c = bed
                .tcp_connect(src, vip_tcp(false))
                .expect("quiet connection");
            let name = c.exchange("hello").expect("greeted");
            (c, name)
        })
        .collect();
    let steady = Steady::new("before");
    let options = SteadyOptions {
        long_lived: 100,
        period: Duration::from_millis(10),
        new_per_sec: 50,
    };
    let settle = Duration::from_millis(1500);
    let mut programs = vec![(first_id, first_tag.clone())];
    let mut hits = Vec::new();
    let tallies = std::thread::scope(|scope| {
        steady.run(scope, &bed, &options).expect("traffic");
        std::thread::sleep(settle);
        hits.push(ct_hits(&lb));

        steady.phase("SIGTERM, then start");
        lb.restart(Stop::Term, &[]).expect("restart");
        std::thread::sleep(settle);
        programs.push(xdp_program(&bed).expect("attached after the restart"));
        hits.push(ct_hits(&lb));

        steady.phase("kill -9, a second without any daemon, then start");
        lb.halt(Stop::Kill);
        std::thread::sleep(Duration::from_secs(1));
        assert!(xdp_program(&bed).is_some(), "attached while no daemon runs");
        lb.resume(&[]).expect("start after kill -9");
        std::thread::sleep(settle);
        programs.push(xdp_program(&bed).expect("attached after the crash"));
        hits.push(ct_hits(&lb));

        steady.phase("upgrade: a build whose program differs, same maps");
        lb.restart(Stop::Term, &["--object", &variant])
            .expect("upgrade");
        std::thread::sleep(settle);
        programs.push(xdp_program(&bed).expect("attached after the upgrade"));
        hits.push(ct_hits(&lb));

        steady.phase("backend b4 added to the file while the daemon is down");
        lb.halt(Stop::Term);
        lb.write_config(&DaemonConfig::equal(1..=4))
            .expect("config");
        lb.resume(&[]).expect("start with b4");
        std::thread::sleep(settle);
        std::thread::sleep(settle);
        programs.push(xdp_program(&bed).expect("attached with b4"));
        hits.push(ct_hits(&lb));
        steady.stop()
    });
    let log = lb.log();
    for t in &tallies {
        assert!(
            t.broken == 0
                && t.wrong_backend == 0
                && t.new_failed == 0
                && t.new_ok > 0
                && t.lines > 0,
            "phase {:?}: {t:?}\nall phases: {tallies:#?}\nlog:\n{log}",
            t.name
        );
    }
    assert_eq!(
        host.packets().expect("nft"),
        0,
        "VIP packets reached the host stack"
    );
    let ids: Vec<u64> = programs.iter().map(|(id, _)| *id).collect();
    assert!(
        ids[1] == ids[0] && ids[2] == ids[0],
        "the restart and the start after kill -9 keep the running program of their own build: {programs:?}"
    );
    assert!(
        ids[3] != ids[2] && ids[4] != ids[3],
        "the upgrade and the next start replace it: {programs:?}"
    );
    assert_ne!(programs[3].1, first_tag, "the upgrade runs the other build");
    assert_eq!(
        programs[4].1, first_tag,
        "and the next start the normal one again"
    );
    assert!(
        hits.windows(2).all(|w| w[1] > w[0]),
        "ct_hits keeps rising: {hits:?}"
    );
    let last = tallies.last().expect("phases");
    assert!(
        last.new_backends
            .iter()
            .any(|(name, n)| name == "b4" && *n > 0),
        "b4 takes new flows: {last:?}"
    );
    for (mut c, name) in quiet {
        assert_eq!(c.exchange("again").expect("quiet flow answered"), name);
    }
    assert!(log.contains("adopting the datapath pinned at"), "{log}");
    assert!(
        log.contains("replaced the program of the pinned XDP link")
            && log.contains("kept the programs of the pinned XDP link on")
            && log.contains("the same build (program"),
        "{log}"
    );
    eprintln!("phases: {tallies:#?}");
}

#[test]
fn a_new_table_size_across_a_restart_is_installed_whole_and_flows_stay() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        clients: 16,
        ..TestBedOptions::default()
    })
    .expect("bed");
    let mut lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    let mut flows: Vec<(TcpConn, String)> = (0..500)
        .map(|j| {
            let src = SocketAddr::new(bed.client_addr(j % bed.client_count(), false), 0);
            let mut c = bed.tcp_connect(src, vip_tcp(false)).expect("connect");
            let name = c.exchange("hello").expect("greeted");
            (c, name)
        })
        .collect();
    let before = reason(&lb, "drop_no_backend");
    lb.halt(Stop::Term);
    let mut bigger = DaemonConfig::equal(1..=3);
    bigger.table_size = 131_071;
    lb.write_config(&bigger).expect("config");
    lb.resume(&[]).expect("start with M = 131071");
    let status = lb.status().expect("status");
    let vip = vip_text(false, true);
    let v = status.vips.iter().find(|v| v.vip == vip).expect("VIP");
    assert_eq!((v.table_size, v.generation), (131_071, 2));
    assert_eq!(v.backends.iter().map(|b| b.slots).sum::<u32>(), 131_071);
    for (c, name) in &mut flows {
        assert_eq!(&c.exchange("again").expect("answered"), name, "flow kept");
    }
    assert_eq!(
        reason(&lb, "drop_no_backend"),
        before,
        "no packet met an empty table"
    );
}

#[test]
fn an_incompatible_layout_is_refused_untouched_and_reset_starts_fresh() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions::default()).expect("bed");
    let mut lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    let mut flows: Vec<(TcpConn, String)> = (0..20)
        .map(|j| {
            let src = SocketAddr::new(bed.client_addr(j % bed.client_count(), false), 0);
            let mut c = bed.tcp_connect(src, vip_tcp(false)).expect("connect");
            let name = c.exchange("hello").expect("greeted");
            (c, name)
        })
        .collect();
    let program = xdp_program(&bed).expect("attached");
    lb.halt(Stop::Term);
    let mut bigger = DaemonConfig::equal(1..=3);
    bigger.ct_capacity = 131_072;
    lb.write_config(&bigger).expect("config");
    let refused = lb
        .resume(&[])
        .expect_err("an incompatible start is refused");
    let text = format!("{refused:#}");
    assert!(
        text.contains(&format!(
            "conntrack.capacity: the pinned map CONNTRACK_V4 has {} entries, the configuration asks for 131072",
            lb_tests::daemon::CT_CAPACITY
        )) && text.contains("lb run --reset"),
        "{text}"
    );
    assert_eq!(xdp_program(&bed), Some(program.clone()), "left untouched");
    for (c, name) in &mut flows {
        assert_eq!(&c.exchange("still").expect("forwarding"), name);
    }
    lb.resume(&["--reset"]).expect("--reset starts fresh");
    let log = lb.log();
    let line = log
        .lines()
        .find(|l| l.contains("--reset: discarded the datapath pinned at"))
        .unwrap_or_else(|| panic!("no --reset report:\n{log}"));
    let discarded: u64 = line
        .split(" (")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(discarded >= 20, "the flows' entries are counted: {line}");
    assert_ne!(xdp_program(&bed).map(|p| p.0), Some(program.0));
}
