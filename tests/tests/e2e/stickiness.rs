//! 100 long-lived TCP connections ([`super::longlived`]), each exchanging a line every
//! 100 ms on its own thread, while the controller adds a backend (`lb backend add`),
//! drains one (`lb backend drain`) and reloads a configuration file with a new table
//! size (the file is rewritten; the daemon's watcher reloads it). Every connection
//! must keep working and keep its backend: no error (reset, or no reply within the
//! bed's socket timeout), every reply from the first backend, and every connection
//! answered again after the last change. Reply times are printed, not asserted: a
//! loaded machine may delay a reply without anything being wrong.
//!
//! Each change is checked to have taken effect (`lb status`; new connections avoid the
//! drained backend and reach the added one), so the test cannot pass because a change
//! silently did nothing.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use lb_tests::{
    daemon::{BackendState, Daemon, DaemonConfig, backend_addr, vip_text},
    testbed::{TestBed, backend_name, vip_tcp},
    traffic::{self, Ports, Tally},
};

use super::{
    bed, daemon,
    longlived::{self, CONNECTIONS, QUIET},
    tcp_vip,
};

/// The changes: add, drain, reload.
const CHANGES: usize = 3;
/// Table size of the reloaded file (prime; the first is 65,537).
const RELOADED_TABLE_SIZE: u32 = 32_771;

/// The changes, while the connections run, each counted in `applied` once it took
/// effect; returns when the last quiet second is over.
fn changes(bed: &TestBed, lb: &Daemon<'_>, applied: &AtomicUsize) -> anyhow::Result<()> {
    let vip = vip_text(false, true);
    let b2 = backend_addr(2, false).to_string();
    let b4 = backend_addr(4, false).to_string();
    std::thread::sleep(QUIET);

    let k = bed.add_backend()?;
    anyhow::ensure!(k == 4, "the new backend is b{k}");
    let started = Instant::now();
    let out = lb.backend("add", &vip, 4, None)?;
    eprintln!("lb backend add ({:?}): {}", started.elapsed(), out.trim());
    let status = lb.status()?;
    let added = tcp_vip(&status).backends.iter().find(|b| b.address == b4);
    anyhow::ensure!(
        added.is_some_and(|b| b.slots > 0),
        "b4 has no slots: {status:?}"
    );
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);

    let started = Instant::now();
    let out = lb.backend("drain", &vip, 2, None)?;
    eprintln!("lb backend drain ({:?}): {}", started.elapsed(), out.trim());
    let status = lb.status()?;
    let drained = tcp_vip(&status).backends.iter().find(|b| b.address == b2);
    anyhow::ensure!(
        drained.is_some_and(|b| b.state == "drain" && b.slots == 0),
        "b2 is not drained: {status:?}"
    );
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);

    // The file now says what the runtime changes made, with a new table size.
    let mut config = DaemonConfig::equal(1..=4);
    config.backends[1].state = BackendState::Drain;
    config.table_size = RELOADED_TABLE_SIZE;
    let started = Instant::now();
    lb.write_config(&config)?;
    let status = lb.wait_status("the reloaded table size", Duration::from_secs(10), |s| {
        tcp_vip(s).table_size == RELOADED_TABLE_SIZE
    })?;
    eprintln!(
        "reload by file change applied after {:?}: table {} slots, generation {}",
        started.elapsed(),
        tcp_vip(&status).table_size,
        tcp_vip(&status).generation
    );
    anyhow::ensure!(
        !status.differs_from_file,
        "the running state differs from the reloaded file: {status:?}"
    );
    applied.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(QUIET);
    Ok(())
}

#[test]
fn live_connections_keep_their_backend_through_add_drain_and_reload() {
    let bed = bed(3);
    let lb = daemon(&bed, &DaemonConfig::equal(1..=3));
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

    let reports = longlived::run(greeted, CHANGES, |applied| changes(&bed, &lb, applied));
    longlived::assert_kept(&reports, &[]);

    // The changes are live: new connections avoid the drained b2 and reach b4.
    let srcs = traffic::sources(&bed, 200, false, Ports::Kernel);
    let answered = traffic::greet_all(&bed, &srcs, vip_tcp(false)).expect("new connections");
    let fresh = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
    eprintln!("new connections after the changes: {fresh}");
    assert_eq!(
        fresh.get("b2"),
        0,
        "a new connection reached drained b2: {fresh}"
    );
    assert!(fresh.get("b4") > 0, "no new connection reached b4: {fresh}");
}
