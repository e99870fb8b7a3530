//! Long-lived TCP connections under changes: each connection exchanges a line every
//! [`PERIOD`] on its own thread while a test applies its changes, and reports what it
//! saw (errors, replies from another backend, answers after the last change). Used by
//! [`super::stickiness`] (today's conntrack path) and [`super::fastpath`] (the fast
//! path). Reply times are printed, not asserted: a loaded machine may delay a reply
//! without anything being wrong.

use std::{
    panic::AssertUnwindSafe,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use lb_tests::{testbed::TcpConn, traffic::Greeted};

/// Long-lived connections a test drives.
pub(super) const CONNECTIONS: usize = 100;
/// Traffic before, between and after a test's changes.
pub(super) const QUIET: Duration = Duration::from_secs(1);
/// Period of each connection's exchanges.
pub(super) const PERIOD: Duration = Duration::from_millis(100);
/// How long the connections may take to be answered once after the last change (a
/// deadline for something that must happen, not a speed target).
const CATCH_UP: Duration = Duration::from_secs(20);

/// What one connection saw.
#[derive(Debug, Default)]
pub(super) struct Report {
    /// The backend that answered the first line.
    pub(super) first: String,
    messages: u64,
    max_latency: Duration,
    /// Exchanges sent after the last change was applied (and answered).
    after_changes: u64,
    /// Replies from another backend than the first.
    wrong: Vec<String>,
    /// The error that ended the connection's loop early.
    error: Option<String>,
}

impl Report {
    /// Whether the connection broke: an error, or a reply from another backend.
    pub(super) fn broken(&self) -> bool {
        self.error.is_some() || !self.wrong.is_empty()
    }
}

/// Where the run is: the changes applied so far (of `total`), the connections answered
/// after the last one, those whose loop ended with an error, and the signal to stop.
#[derive(Default)]
struct Progress {
    total: usize,
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
        let after_changes = progress.changes.load(Ordering::Relaxed) == progress.total;
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

/// Drives every connection of `greeted` while `changes` runs; `changes` counts each of
/// its `total` changes in the counter it is given once the change took effect. Returns
/// the reports in `greeted`'s order once every connection was answered after the last
/// change (or failed), or [`CATCH_UP`] passed.
///
/// # Panics
/// When `changes` fails or panics (after the connection threads stopped).
pub(super) fn run(
    greeted: Vec<Greeted>,
    total: usize,
    changes: impl FnOnce(&AtomicUsize) -> anyhow::Result<()>,
) -> Vec<Report> {
    let progress = Progress {
        total,
        ..Progress::default()
    };
    let count = greeted.len();
    let started = Instant::now();
    let (reports, changed) = std::thread::scope(|s| {
        let threads: Vec<_> = greeted
            .into_iter()
            .enumerate()
            .map(|(j, g)| {
                let offset = PERIOD * u32::try_from(j % 100).expect("few") / 100;
                let progress = &progress;
                s.spawn(move || drive(g.conn, g.backend, offset, progress))
            })
            .collect();
        // The threads only end once `stop` is set: stop them also when a change panics.
        let changed = std::panic::catch_unwind(AssertUnwindSafe(|| changes(&progress.changes)));
        let deadline = Instant::now() + CATCH_UP;
        let settled =
            || progress.caught_up.load(Ordering::Relaxed) + progress.failed.load(Ordering::Relaxed);
        while changed.as_ref().is_ok_and(Result::is_ok)
            && settled() < count
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
    changed
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        .unwrap_or_else(|e| panic!("changing the load balancer: {e:#}"));
    let messages: u64 = reports.iter().map(|r| r.messages).sum();
    let slowest = reports
        .iter()
        .map(|r| r.max_latency)
        .max()
        .unwrap_or_default();
    eprintln!(
        "{count} connections, {messages} messages in {:?}, slowest reply {slowest:?}",
        started.elapsed()
    );
    reports
}

/// Asserts that every connection whose first backend is not in `lost` kept working on
/// that backend and was answered after the last change; returns how many connections
/// of the backends in `lost` broke (their breaking is expected, not asserted).
///
/// # Panics
/// When a connection of another backend broke or was not answered after the changes.
pub(super) fn assert_kept(reports: &[Report], lost: &[&str]) -> usize {
    let mut lost_broken = 0;
    for (j, r) in reports.iter().enumerate() {
        if lost.contains(&r.first.as_str()) {
            lost_broken += usize::from(r.broken());
            continue;
        }
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
    lost_broken
}
