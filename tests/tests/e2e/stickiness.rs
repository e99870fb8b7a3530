//! 100 long-lived TCP connections, each exchanging a line every
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
    panic::AssertUnwindSafe,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use lb::control::{Status, VipStatus};
use lb_tests::{
    daemon::{BackendState, Daemon, DaemonConfig, backend_addr, vip_text},
    testbed::{TcpConn, TestBed, backend_name, vip_tcp},
    traffic::{self, Ports, Tally},
};

use super::{bed, daemon};

/// Long-lived connections.
const CONNECTIONS: usize = 100;
/// Period of each connection's exchanges.
const PERIOD: Duration = Duration::from_millis(100);
/// Traffic before, between and after the changes.
const QUIET: Duration = Duration::from_secs(1);
/// The changes: add, drain, reload.
const CHANGES: usize = 3;
/// How long the connections may take to be answered once after the last change (a
/// deadline for something that must happen, not a speed target).
const CATCH_UP: Duration = Duration::from_secs(20);
/// Table size of the reloaded file (prime; the first is 65,537).
const RELOADED_TABLE_SIZE: u32 = 32_771;

/// What one connection saw.
#[derive(Debug, Default)]
struct Report {
    first: String,
    messages: u64,
    max_latency: Duration,
    /// Exchanges sent after the last change was applied (and answered).
    after_changes: u64,
    /// Replies from another backend than the first.
    wrong: Vec<String>,
    /// The error that ended the connection's loop early.
    error: Option<String>,
}

/// Where the run is: the changes applied so far, the connections answered after the
/// last one, those whose loop ended with an error, and the signal to stop.
#[derive(Default)]
struct Progress {
    changes: AtomicUsize,
    caught_up: AtomicUsize,
    failed: AtomicUsize,
    stop: AtomicBool,
}

/// Exchanges a line every [`PERIOD`] until `progress.stop`; the first failure ends the
/// loop.
fn drive(mut conn: TcpConn, first: String, offset: Duration, progress: &Progress) -> Report {
    let mut report = Report {
        first,
        ..Report::default()
    };
    // Spread the connections over the period instead of waking all at once.
    std::thread::sleep(offset);
    let mut next = Instant::now();
    while !progress.stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let after_changes = progress.changes.load(Ordering::Relaxed) == CHANGES;
        match conn.exchange("tick") {
            Ok(answer) => {
                report.messages += 1;
                report.max_latency = report.max_latency.max(sent.elapsed());
                if after_changes {
                    if report.after_changes == 0 {
                        progress.caught_up.fetch_add(1, Ordering::Relaxed);
                    }
                    report.after_changes += 1;
                }
                if answer != report.first {
                    report.wrong.push(answer);
                }
            }
            Err(e) => {
                report.error = Some(format!("after {} messages: {e}", report.messages));
                progress.failed.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
        next += PERIOD;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    report
}

fn tcp_vip(status: &Status) -> &VipStatus {
    let vip = vip_text(false, true);
    status
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .expect("the TCP VIP in lb status")
}

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

    let progress = Progress::default();
    let started = Instant::now();
    let (reports, changed) = std::thread::scope(|s| {
        let threads: Vec<_> = greeted
            .into_iter()
            .enumerate()
            .map(|(j, g)| {
                let offset = PERIOD * u32::try_from(j).expect("few") / 100;
                let progress = &progress;
                s.spawn(move || drive(g.conn, g.backend, offset, progress))
            })
            .collect();
        // The threads only end once `stop` is set: stop them also when a change panics.
        let changed =
            std::panic::catch_unwind(AssertUnwindSafe(|| changes(&bed, &lb, &progress.changes)));
        // Until every connection was answered after the last change (or failed), or
        // the deadline.
        let deadline = Instant::now() + CATCH_UP;
        let settled =
            || progress.caught_up.load(Ordering::Relaxed) + progress.failed.load(Ordering::Relaxed);
        while changed.as_ref().is_ok_and(Result::is_ok)
            && settled() < CONNECTIONS
            && Instant::now() < deadline
        {
            std::thread::sleep(PERIOD);
        }
        progress.stop.store(true, Ordering::Relaxed);
        let reports: Vec<Report> = threads
            .into_iter()
            .map(|t| t.join().expect("connection thread"))
            .collect();
        (reports, changed)
    });
    let ran = started.elapsed();
    changed
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        .unwrap_or_else(|e| panic!("changing the load balancer: {e:#}"));

    let messages: u64 = reports.iter().map(|r| r.messages).sum();
    let max_latency = reports
        .iter()
        .map(|r| r.max_latency)
        .max()
        .unwrap_or_default();
    eprintln!(
        "{CONNECTIONS} connections, {messages} messages in {ran:?}, slowest reply {max_latency:?}"
    );
    for (j, r) in reports.iter().enumerate() {
        assert!(
            r.error.is_none(),
            "connection {j} ({}): {:?}",
            r.first,
            r.error
        );
        assert!(
            r.wrong.is_empty(),
            "connection {j} moved from {} to {:?}",
            r.first,
            r.wrong
        );
        assert!(
            r.after_changes > 0,
            "connection {j} ({}) got no answer after the last change within {CATCH_UP:?} \
             ({} messages before; slowest reply {:?})",
            r.first,
            r.messages,
            r.max_latency
        );
    }

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
