//! Upgrades across map layouts: a datapath pinned by the last build of layout 1 (its
//! eBPF object kept as `tests/data/lb-ebpf-layout1.o`, see the README there) is adopted
//! by this build, which migrates its maps (`lb_dataplane::pinned::migrate`) before it
//! replaces the program through the link; and a datapath of a newer layout than this
//! build knows (a downgrade) is refused untouched, naming both versions and
//! `lb run --reset`.
//!
//! The layout-1 datapath is made as that build's `lb run` left it: this build's daemon
//! creates the datapath and stops (so the controller's record names the same ids), its
//! maps are rewritten into layout 1 (`rewind_to_layout1`: `u32` table cells, the
//! shorter `VIP_STATS`, no `FAST_FILTER`, `meta` of layout 1), and the old object's
//! program is put on the pinned link (`run_layout1_program`). Every packet of the test
//! before the upgrade is forwarded by the layout-1 program, so the conntrack entries
//! and SYN cache slots the migration must keep are the old program's.

use std::{net::SocketAddr, path::Path, time::Duration};

use lb_dataplane::{
    LoadOptions,
    kernel::layout1::run_layout1_program,
    pinned::{MetaMap, PinDir, migrate::rewind_to_layout1},
};
use lb_tests::{
    daemon::{CT_CAPACITY, CT_SYN_CAPACITY, Daemon, DaemonConfig, Stop},
    netns::PIN_ROOT,
    steady::{Steady, SteadyOptions},
    testbed::{LB_IFACE, TcpConn, TestBed, TestBedOptions, vip_tcp},
};

/// The layout-1 build's eBPF object.
fn layout1_object() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/lb-ebpf-layout1.o");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The XDP program id on the bed's LB interface.
fn xdp_program(bed: &TestBed) -> Option<u64> {
    let out = bed
        .lb_ns()
        .exec("ip", &["-j", "-d", "link", "show", "dev", bed.lb_iface()])
        .expect("ip link");
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j");
    links[0]["xdp"]["prog"]["id"].as_u64()
}

/// Runs `f` on the pin directory of the bed's LB interface, in its namespace.
fn in_pin_dir<T: Send>(bed: &TestBed, f: impl FnOnce(&PinDir) -> anyhow::Result<T> + Send) -> T {
    bed.lb_ns()
        .enter(|| {
            let dir = PinDir::locate(Path::new(PIN_ROOT), LB_IFACE, false)?;
            f(&dir)
        })
        .expect("enter the LB namespace")
        .expect("pin directory work")
}

/// `n` connections to the TCP VIP, each greeted once: (connection, backend name).
fn connect(bed: &TestBed, n: usize) -> Vec<(TcpConn, String)> {
    (0..n)
        .map(|j| {
            let src = SocketAddr::new(bed.client_addr(j % bed.client_count(), false), 0);
            let mut c = bed.tcp_connect(src, vip_tcp(false)).expect("connect");
            let name = c.exchange("hello").expect("greeted");
            (c, name)
        })
        .collect()
}

/// The entries a migration log line gives for `map` (`MAP kept (N entries`).
fn entries(line: &str, map: &str, action: &str) -> u64 {
    let key = format!("{map} {action} (");
    line.split(&key)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

#[test]
fn an_upgrade_from_layout_1_migrates_the_datapath_and_keeps_every_connection() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 4,
        clients: 16,
        ..TestBedOptions::default()
    })
    .expect("bed");
    let mut lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    lb.halt(Stop::Term);
    let created = xdp_program(&bed).expect("attached");
    let object = layout1_object();
    let old = in_pin_dir(&bed, |dir| {
        rewind_to_layout1(dir, &object)?;
        let options = LoadOptions {
            ct_capacity: CT_CAPACITY,
            ct_syn_capacity: CT_SYN_CAPACITY,
            ..LoadOptions::default()
        };
        Ok(run_layout1_program(dir, &object, options)?)
    });
    assert_eq!(
        xdp_program(&bed),
        Some(u64::from(old)),
        "the layout-1 program runs"
    );
    assert_ne!(u64::from(old), created);
    // 100 connections opened through the layout-1 program, checked after the upgrade,
    // and 100 more long-lived ones busy across it, with new connections throughout.
    let mut flows = connect(&bed, 100);
    let steady = Steady::new("layout 1, no daemon");
    let options = SteadyOptions {
        long_lived: 100,
        period: Duration::from_millis(10),
        new_per_sec: 50,
    };
    let settle = Duration::from_millis(1500);
    let tallies = std::thread::scope(|scope| {
        steady.run(scope, &bed, &options).expect("traffic");
        std::thread::sleep(settle);
        steady.phase("upgrade: lb run migrates layout 1 to 2");
        lb.resume(&[])
            .expect("this build adopts the layout-1 datapath");
        std::thread::sleep(settle);
        steady.stop()
    });
    let log = lb.log();
    for t in &tallies {
        assert!(
            t.broken == 0 && t.wrong_backend == 0 && t.new_failed == 0 && t.new_ok > 0,
            "phase {:?}: {t:?}\nall phases: {tallies:#?}\nlog:\n{log}",
            t.name
        );
    }
    let mut broken = Vec::new();
    for (i, (c, name)) in flows.iter_mut().enumerate() {
        if c.exchange("after").ok().as_ref() != Some(name) {
            broken.push(i);
        }
    }
    assert!(broken.is_empty(), "0 of 100 broken, not {broken:?}\n{log}");
    assert_eq!(connect(&bed, 20).len(), 20, "new connections go through");
    let now = xdp_program(&bed).expect("attached after the upgrade");
    assert_ne!(
        now,
        u64::from(old),
        "this build's program replaced the old one"
    );
    let line = log
        .lines()
        .find(|l| l.contains("migrated the datapath pinned at"))
        .unwrap_or_else(|| panic!("no migration line:\n{log}"));
    assert!(line.contains("layout 1 to 2 in "), "{line}");
    assert!(entries(line, "CONNTRACK_V4", "kept") >= 200, "{line}");
    // Three VIPs of the file's family pairs at most: each live buffer converted.
    assert!(entries(line, "TABLES", "converted") >= 1, "{line}");
    assert!(entries(line, "VIP_STATS", "converted") >= 1, "{line}");
    assert!(line.contains("FAST_FILTER created"), "{line}");
    let status = lb.cli(&["status"]).expect("lb status");
    assert!(
        status.contains("datapath migrated from layout 1 to 2"),
        "{status}"
    );
    eprintln!("{line}\nphases: {tallies:#?}");
}

#[test]
fn a_newer_layout_is_refused_untouched_naming_both_versions_and_reset() {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions::default()).expect("bed");
    let mut lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    let mut flows = connect(&bed, 20);
    lb.halt(Stop::Term);
    let program = xdp_program(&bed).expect("attached");
    let ours = lb_common::maps::LAYOUT_VERSION;
    in_pin_dir(&bed, |dir| {
        let mut meta = MetaMap::open(&dir.meta())?.expect("meta");
        meta.update(|m| m.layout_version = ours + 1)?;
        Ok(())
    });
    let refused = lb.resume(&[]).expect_err("a newer layout is refused");
    let text = format!("{refused:#}");
    assert!(
        text.contains(&format!(
            "has map layout version {}, newer than this build's {ours} (a downgrade)",
            ours + 1
        )) && text.contains("lb run --reset"),
        "{text}"
    );
    assert_eq!(xdp_program(&bed), Some(program), "left untouched");
    for (c, name) in &mut flows {
        assert_eq!(&c.exchange("still").expect("forwarding"), name);
    }
    lb.resume(&["--reset"]).expect("--reset starts fresh");
    assert_ne!(xdp_program(&bed), Some(program));
}
