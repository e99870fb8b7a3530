//! Upgrades across map layouts: a datapath pinned by the last build of layout 1, 2, 3,
//! 4 or 5 (their eBPF objects kept as `tests/data/lb-ebpf-layout1.o` to
//! `lb-ebpf-layout5.o`, see the README there) is adopted by this build, which migrates its maps
//! (`lb_dataplane::pinned::migrate`, through every step from the old layout) before it
//! replaces the program through the link; and a datapath of a newer layout than this
//! build knows (a downgrade) is refused untouched, naming both versions and
//! `lb run --reset`.
//!
//! The old datapath is made as that build's `lb run` left it: this build's daemon
//! creates the datapath and stops (so the controller's record names the same ids), its
//! maps are rewritten into the old layout (`rewind_to_layout1`: `u32` table cells, the
//! shorter `VIP_STATS`, no `FAST_FILTER`, `meta` of layout 1; `rewind_to_layout2`: the
//! layout-2 `VIP_STATS`, `meta` of layout 2; `rewind_to_layout3`: no `EXCEPTIONS`,
//! `meta` of layout 3; `rewind_to_layout4`: `BACKEND_STATS` and `NEXTHOP_CACHE` per-CPU
//! arrays, `meta` of layout 4; `rewind_to_layout5`: no `TABLES_STD`, every buffer in
//! `TABLES`, `meta` of layout 5; every rewind undoes the later steps' maps too), and the
//! old object's program is put on
//! the pinned link (`run_old_program`). Every packet of the test before the upgrade is
//! forwarded by the old program (`lb_tests::old_layout`), so the conntrack entries and SYN cache slots the
//! migration must keep are the old program's.

use std::{net::SocketAddr, time::Duration};

use lb_dataplane::pinned::{
    MetaMap,
    migrate::{
        rewind_to_layout1, rewind_to_layout2, rewind_to_layout3, rewind_to_layout4,
        rewind_to_layout5,
    },
};
use lb_tests::{
    daemon::{Daemon, DaemonConfig, Stop},
    old_layout::{Rewind, in_pin_dir, run_old_layout, xdp_program},
    steady::{Steady, SteadyOptions},
    testbed::{TcpConn, TestBed, TestBedOptions, vip_tcp},
};

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

/// Upgrades the datapath of layout `version` (rewound by `rewind`) to this build's
/// under traffic: 100 connections opened through the old program and checked after,
/// 100 long-lived ones busy across it, new connections throughout; none breaks.
/// Returns the start's migration log line.
fn upgrade_keeps_every_connection(version: u32, rewind: Rewind) -> String {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    let bed = TestBed::new(TestBedOptions {
        backends: 4,
        clients: 16,
        ..TestBedOptions::default()
    })
    .expect("bed");
    let mut lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).expect("lb run");
    let old = run_old_layout(&bed, &mut lb, version, rewind).expect("the old datapath");
    let mut flows = connect(&bed, 100);
    let steady = Steady::new(&format!("layout {version}, no daemon"));
    let options = SteadyOptions {
        long_lived: 100,
        period: Duration::from_millis(10),
        new_per_sec: 50,
    };
    let settle = Duration::from_millis(1500);
    let ours = lb_common::maps::LAYOUT_VERSION;
    let tallies = std::thread::scope(|scope| {
        steady.run(scope, &bed, &options).expect("traffic");
        std::thread::sleep(settle);
        steady.phase(&format!(
            "upgrade: lb run migrates layout {version} to {ours}"
        ));
        lb.resume(&[]).expect("this build adopts the old datapath");
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
    let broken: Vec<usize> = (0..flows.len())
        .filter(|&i| {
            let (c, name) = &mut flows[i];
            c.exchange("after").ok().as_ref() != Some(name)
        })
        .collect();
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
        .unwrap_or_else(|| panic!("no migration line:\n{log}"))
        .to_owned();
    assert!(
        line.contains(&format!("layout {version} to {ours} in ")),
        "{line}"
    );
    assert!(entries(&line, "CONNTRACK_V4", "kept") >= 200, "{line}");
    // Three VIPs of the file's family pairs at most: each one's counters converted
    // (by the steps up to layout 3; layout 4 keeps the counters).
    if version < 3 {
        assert!(entries(&line, "VIP_STATS", "converted") >= 1, "{line}");
    }
    let status = lb.cli(&["status"]).expect("lb status");
    assert!(
        status.contains(&format!(
            "datapath migrated from layout {version} to {ours}"
        )),
        "{status}"
    );
    eprintln!("{line}\nphases: {tallies:#?}");
    line
}

#[test]
fn an_upgrade_from_layout_1_migrates_the_datapath_through_each_step_and_keeps_every_connection() {
    let line = upgrade_keeps_every_connection(1, rewind_to_layout1);
    // Each live buffer converted by the 1-to-2 step.
    assert!(entries(&line, "TABLES", "converted") >= 1, "{line}");
    assert!(line.contains("FAST_FILTER created"), "{line}");
}

#[test]
fn an_upgrade_from_layout_2_migrates_the_datapath_and_keeps_every_connection() {
    let line = upgrade_keeps_every_connection(2, rewind_to_layout2);
    // The 2-to-3 step converts the counters alone: the tables are kept as pinned.
    assert!(!line.contains("TABLES converted"), "{line}");
    assert!(!line.contains("FAST_FILTER"), "{line}");
}

#[test]
fn an_upgrade_from_layout_3_creates_the_exceptions_map_and_keeps_every_connection() {
    let line = upgrade_keeps_every_connection(3, rewind_to_layout3);
    // The 3-to-4 step creates the exceptions map alone: the rest is kept as pinned.
    assert!(line.contains("EXCEPTIONS created"), "{line}");
    assert!(!line.contains("TABLES converted"), "{line}");
    assert!(!line.contains("VIP_STATS"), "{line}");
}

#[test]
fn an_upgrade_from_layout_4_lays_the_backend_arrays_out_in_cpu_rows_and_keeps_every_connection() {
    let line = upgrade_keeps_every_connection(4, rewind_to_layout4);
    // The 4-to-5 step converts the backends' counters (the old program forwarded to
    // them) and creates the next-hop cache anew; the rest is kept as pinned.
    assert!(entries(&line, "BACKEND_STATS", "converted") >= 1, "{line}");
    assert!(line.contains("NEXTHOP_CACHE created"), "{line}");
    assert!(!line.contains("TABLES converted"), "{line}");
    assert!(!line.contains("VIP_STATS"), "{line}");
}

#[test]
fn an_upgrade_from_layout_5_creates_the_standard_size_tables_map_and_the_vip_cache_and_keeps_every_connection()
 {
    let line = upgrade_keeps_every_connection(5, rewind_to_layout5);
    // The 5-to-6 step creates `TABLES_STD` and `VIP_CACHE`: the adopted buffers stay in
    // `TABLES` (their `VIPS` entries have no `VIP_TABLE_STD`) until their VIP's next
    // install.
    assert!(line.contains("TABLES_STD created"), "{line}");
    assert!(line.contains("VIP_CACHE created"), "{line}");
    assert!(!line.contains("TABLES converted"), "{line}");
    assert!(!line.contains("VIP_STATS"), "{line}");
    assert!(!line.contains("BACKEND_STATS"), "{line}");
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
    })
    .expect("meta rewritten");
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
