//! The fast path end to end (issue 30, the one-instance bed): 100 long-lived TCP
//! connections ([`super::longlived`]) to a VIP with `fast_path = true` and TCP health
//! probes, while the controller adds a backend, reweights one, drains one, restarts
//! (the dirty period goes on across it), is upgraded from the last build of map layout
//! 2 (still dirty), adds another, sees it fail its probes and
//! recover (a flap: its slots move away and back while dirty), and removes one; then
//! the traffic runs on until the cleaning walk has turned slots clean (quiet time one
//! minute). Every connection of a backend that was not removed keeps working on its
//! first backend.
//!
//! Each step is checked to be what it claims: before the first change the connections
//! forward by the table alone (clean-slot hits, no conntrack entry of an established
//! connection); after it the VIP has dirty slots; at the end slots were cleaned and new
//! connections avoid the drained and removed backends.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use lb::control::ConnList;
use lb_dataplane::pinned::migrate::rewind_to_layout2;
use lb_tests::{
    daemon::{Daemon, DaemonConfig, Stop, backend_addr, vip_text},
    old_layout::run_old_layout,
    testbed::{
        TestBed, backend_name,
        health::{PortListener, TCP_PROBE_PORT},
        vip_tcp,
    },
    traffic::{self, Ports, Tally},
};

use super::{
    bed, daemon,
    longlived::{self, CONNECTIONS, QUIET},
    tcp_vip,
};

/// The changes: add, weight, drain, restart, upgrade, add, down, up, remove, and the
/// cleaning.
const CHANGES: usize = 10;
/// How long the cleaning may take to turn a slot clean after the first change: the
/// quiet time (60 s) plus walks every second, with margin for a loaded machine.
const CLEANED_WITHIN: Duration = Duration::from_secs(150);

fn config() -> DaemonConfig {
    let vip = vip_text(false, true);
    let probe = format!(
        "kind = \"tcp\"\nport = {TCP_PROBE_PORT}\ninterval_ms = 200\ntimeout_ms = 100\n\
         rise = 2\nfall = 3\nflap_transitions = 0\n"
    );
    DaemonConfig {
        vip_keys: vec![(vip.clone(), "fast_path = true".to_owned())],
        conntrack_keys: "tcp_idle_secs = 60\nquiet_secs = 60\nclean_interval_secs = 1\n".to_owned(),
        ..DaemonConfig::equal(1..=3)
    }
    .with_health(&vip, &probe)
}

/// Backend `k`'s probe port, open until dropped.
fn probe_port(bed: &TestBed, k: u8) -> anyhow::Result<PortListener> {
    PortListener::open(bed.backend_ns(k), TCP_PROBE_PORT)
}

/// Backend `k`'s health label, once `lb status` says `label` (within 10 s); counted
/// in `applied` and followed by [`QUIET`].
fn health_is(lb: &Daemon<'_>, applied: &AtomicUsize, k: u8, label: &str) -> anyhow::Result<()> {
    let vip = vip_text(false, true);
    let addr = backend_addr(k, false).to_string();
    let status = lb.wait_status(&format!("b{k} {label}"), Duration::from_secs(10), |s| {
        s.vips.iter().filter(|v| v.vip == vip).any(|v| {
            v.backends
                .iter()
                .any(|b| b.address == addr && b.health.as_ref().is_some_and(|h| h.state == label))
        })
    })?;
    eprintln!("b{k} {label}: {:?}", tcp_vip(&status).slot_states);
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);
    Ok(())
}

/// The VIP's counter `name` in `lb stats`.
fn vip_counter(lb: &Daemon<'_>, name: &str) -> u64 {
    let vip = vip_text(false, true);
    let stats = lb.stats().expect("lb stats");
    stats
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .and_then(|v| v.counters.iter().find(|c| c.name == name))
        .map_or(0, |c| c.value)
}

/// Established connections of the VIP in conntrack (`lb conn list`).
fn pinned(lb: &Daemon<'_>) -> u64 {
    let vip = vip_text(false, true);
    let args = [
        "conn",
        "list",
        "--json",
        "--vip",
        &vip,
        "--state",
        "established",
    ];
    let text = lb.cli(&args).expect("lb conn list");
    let list: ConnList = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    list.matched
}

/// `lb backend VERB --vip VIP --backend B [EXTRA]`, printed, then counted in `applied`
/// and followed by [`QUIET`].
fn backend(
    lb: &Daemon<'_>,
    applied: &AtomicUsize,
    verb: &str,
    b: u8,
    extra: Option<&str>,
) -> anyhow::Result<()> {
    let vip = vip_text(false, true);
    let b = backend_addr(b, false).to_string();
    let mut args = vec!["backend", verb, "--vip", &vip, "--backend", &b];
    args.extend(extra);
    let started = Instant::now();
    let out = lb.cli(&args)?;
    eprintln!(
        "lb {} ({:?}): {}",
        args.join(" "),
        started.elapsed(),
        out.trim()
    );
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);
    Ok(())
}

/// An upgrade in the dirty period: the last build of map layout 2 runs the datapath
/// (`lb_tests::old_layout`) for [`QUIET`], then this build's `lb run` migrates it and
/// takes over, the slots still dirty.
fn upgrade(bed: &TestBed, lb: &mut Daemon<'_>) -> anyhow::Result<()> {
    run_old_layout(bed, lb, 2, rewind_to_layout2)?;
    std::thread::sleep(QUIET);
    lb.resume(&[])?;
    let text = lb.cli(&["status"])?;
    anyhow::ensure!(
        text.contains("datapath migrated from layout 2 to"),
        "no migration in lb status:\n{text}"
    );
    let status = lb.status()?;
    anyhow::ensure!(
        tcp_vip(&status).slot_states.is_some_and(|d| d.dirty > 0),
        "the upgrade lost the dirty slots: {:?}",
        tcp_vip(&status).slot_states
    );
    eprintln!("after the upgrade: {:?}", tcp_vip(&status).slot_states);
    // The migration created the VIP cache empty; the adopting daemon filled it.
    anyhow::ensure!(
        tcp_vip(&status).entry_cached == Some(true),
        "the VIP's entry is not cached after the upgrade: {:?}",
        tcp_vip(&status).entry_cached
    );
    Ok(())
}

/// The changes, while the connections run.
fn changes(bed: &TestBed, lb: &mut Daemon<'_>, applied: &AtomicUsize) -> anyhow::Result<()> {
    std::thread::sleep(QUIET);
    anyhow::ensure!(bed.add_backend()? == 4, "the bed's fourth backend");
    anyhow::ensure!(bed.add_backend()? == 5, "the bed's fifth backend");
    let _probe4 = probe_port(bed, 4)?;
    let probe5 = probe_port(bed, 5)?;
    backend(lb, applied, "add", 4, None)?;
    let status = lb.wait_status("dirty slots after the add", QUIET * 10, |s| {
        tcp_vip(s).slot_states.is_some_and(|d| d.dirty > 0)
    })?;
    eprintln!("after the add: {:?}", tcp_vip(&status).slot_states);
    // The connections on moved slots are pinned to their clean owners: exceptions.
    let status = lb.wait_status("pins naming another backend", QUIET * 10, |s| {
        (tcp_vip(s).slot_states.and_then(|d| d.pins)).is_some_and(|p| p.other_live > 0)
    })?;
    eprintln!("pins: {:?}", tcp_vip(&status).slot_states);
    backend(lb, applied, "weight", 1, Some("3"))?;
    backend(lb, applied, "drain", 2, None)?;

    lb.restart(Stop::Term, &[])?;
    // The control socket answers after the first cleaning walk: its first status
    // already shows the slot states.
    let status = lb.status()?;
    anyhow::ensure!(
        tcp_vip(&status).slot_states.is_some_and(|d| d.dirty > 0),
        "the restart lost the dirty slots: {:?}",
        tcp_vip(&status).slot_states
    );
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);
    upgrade(bed, lb)?;
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);

    backend(lb, applied, "add", 5, None)?;
    health_is(lb, applied, 5, "healthy")?;
    // A flap: b5 fails its probes, its slots move away, then it recovers.
    drop(probe5);
    health_is(lb, applied, 5, "unhealthy")?;
    let _probe5 = probe_port(bed, 5)?;
    health_is(lb, applied, 5, "healthy")?;
    backend(lb, applied, "remove", 3, None)?;

    let status = lb.wait_status("slots cleaned by the walk", CLEANED_WITHIN, |s| {
        s.cleaning.as_ref().is_some_and(|c| c.cleaned_total > 0)
    })?;
    eprintln!(
        "cleaning: {:?}; slots: {:?}",
        status.cleaning,
        tcp_vip(&status).slot_states
    );
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);
    Ok(())
}

#[test]
fn fast_path_connections_survive_changes_a_restart_an_upgrade_a_flap_and_the_cleaning() {
    let bed = bed(3);
    let _probes = (1..=3)
        .map(|k| probe_port(&bed, k))
        .collect::<anyhow::Result<Vec<_>>>()
        .expect("probe ports");
    let mut lb = daemon(&bed, &config());
    let first = lb.status().expect("status");
    assert!(
        first.cleaning.is_some() && tcp_vip(&first).slot_states.is_some(),
        "the first status after the start has no cleaning walk: {:?}, {:?}",
        first.cleaning,
        tcp_vip(&first).slot_states
    );
    let srcs = traffic::sources(&bed, CONNECTIONS, false, Ports::Kernel);
    let greeted = traffic::connect_all(&bed, &srcs, vip_tcp(false)).expect("connections");
    let initial = Tally::of(greeted.iter().map(|g| g.backend.as_str()));
    eprintln!("long-lived connections: {initial}");
    for k in 1..=3 {
        assert!(
            initial.get(&backend_name(k)) > 0,
            "b{k} got none: {initial}"
        );
    }
    // Clean slots: established connections forward by the table alone.
    assert!(
        vip_counter(&lb, "clean_slot_hits") > 0,
        "no clean-slot hit: the fast path is not on"
    );
    assert_eq!(
        pinned(&lb),
        0,
        "established connections pinned on clean slots"
    );

    let reports = longlived::run(greeted, CHANGES, |applied| changes(&bed, &mut lb, applied));
    let lost = longlived::assert_kept(&reports, &["b3"]);
    let of_b3 = reports.iter().filter(|r| r.first == "b3").count();
    eprintln!("{lost} of b3's {of_b3} connections broke (b3 was removed)");

    let srcs = traffic::sources(&bed, 200, false, Ports::Kernel);
    let answered = traffic::greet_all(&bed, &srcs, vip_tcp(false)).expect("new connections");
    let fresh = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
    eprintln!("new connections after the changes: {fresh}");
    for gone in ["b2", "b3"] {
        assert_eq!(
            fresh.get(gone),
            0,
            "a new connection reached {gone}: {fresh}"
        );
    }
    assert!(fresh.get("b4") > 0 && fresh.get("b5") > 0, "{fresh}");
}
