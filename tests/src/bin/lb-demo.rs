//! The demo behind `cargo xtask demo` (the README's main job): the real `lb run` daemon
//! balancing real TCP connections between network namespaces, and what adding a
//! backend does to established and new connections.
//!
//! 1. Builds the test bed ([`lb_tests::testbed`]): a client namespace with 16
//!    addresses, the LB namespace, and 3 backends (XDP decapsulation, VIP on `lo`, an
//!    echo server answering with its name).
//! 2. Starts `lb run` in the LB namespace with a generated configuration
//!    ([`lb_tests::daemon`]); the `lb` binary is the one next to this executable.
//! 3. Opens 1,000 TCP connections to 203.0.113.10:80 (kernel-chosen source ports),
//!    each answered by its backend, and prints the distribution, the daemon's packet
//!    counters (`lb stats`) and how often its own prediction (`lb flow`) was right.
//! 4. Asks the daemon where 1,000 *new* flows (fixed source ports 10,000..10,999, not
//!    yet used) would go on the current table, then adds a 4th backend with
//!    `lb backend add`.
//! 5. Sends a line on each established connection: kept = still answered by the same
//!    backend. Opens the 1,000 new flows: moved = answered by another backend than the
//!    old table would have chosen; ideally 1/4 (the new backend's share, taken equally
//!    from the three), all of them to the new backend.
//! 6. Tears everything down (also on error or Ctrl-C: the daemon is stopped with
//!    SIGTERM, the namespaces deleted).

use std::{
    io::Write as _,
    sync::atomic::{AtomicBool, Ordering},
    time::Instant,
};

use anyhow::{Context as _, bail};
use clap::Parser;
use lb_tests::{
    daemon::{Daemon, DaemonConfig, backend_addr, backend_of, vip_text},
    testbed::{TestBed, TestBedOptions, backend_name, vip_tcp},
    traffic::{self, Greeted, Ports, Tally},
};

/// TCP connections per phase.
const CONNECTIONS: usize = 1_000;
/// Client addresses.
const CLIENTS: usize = 16;
/// Source port of the first predicted new flow (below the kernel's ephemeral range).
const NEW_FLOW_PORT: u16 = 10_000;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// SIGINT and SIGTERM set [`INTERRUPTED`] (without `SA_RESTART`, so a blocking call
/// returns early) instead of killing the process, so that the bed and the daemon are
/// always torn down.
fn catch_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic
        // (async-signal-safe).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(signal, &raw const action, std::ptr::null_mut());
        }
    }
}

/// Fails once Ctrl-C (or SIGTERM) was received.
fn checkpoint() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

/// Progress lines with the time since the start.
struct Progress {
    start: Instant,
}

impl Progress {
    fn step(&self, text: &str) {
        println!("[{:5.1} s] {text}", self.start.elapsed().as_secs_f64());
        let _ = std::io::stdout().flush();
    }

    fn detail(text: &str) {
        for line in text.lines() {
            println!("          {line}");
        }
        let _ = std::io::stdout().flush();
    }
}

/// Runs the demo of `cargo xtask demo` (as root).
///
/// The real `lb run` daemon balances 1,000 TCP connections between network namespaces,
/// then a backend is added: established connections stay, about a quarter of new ones
/// move, nearly all to the new backend. The demo builds and tears down its own
/// namespaces. It runs the `lb` binary next to its own executable; `cargo xtask demo`
/// builds both.
#[derive(Debug, Parser)]
#[command(name = "lb-demo")]
struct Args {}

fn main() {
    let Args {} = Args::parse();
    if !lb_tests::is_root() {
        eprintln!(
            "lb-demo: must run as root (it creates network namespaces, attaches XDP programs \
             and runs `lb run`): sudo -E cargo xtask demo"
        );
        std::process::exit(1);
    }
    catch_signals();
    let progress = Progress {
        start: Instant::now(),
    };
    let result = run(&progress);
    // Everything is torn down by now (run's locals are dropped).
    match result {
        Ok(()) => progress.step("done: everything torn down"),
        Err(e) => {
            eprintln!("lb-demo: error: {e:#}");
            eprintln!("lb-demo: everything it created has been torn down");
            std::process::exit(1);
        }
    }
}

fn run(progress: &Progress) -> anyhow::Result<()> {
    progress.step(&format!(
        "building the test bed: a client namespace ({CLIENTS} addresses 192.0.2.10..), the LB \
         namespace (lb0) and 3 backends (XDP decapsulation, VIP on lo, an echo server)"
    ));
    let bed = TestBed::new(TestBedOptions {
        backends: 3,
        clients: CLIENTS,
        ..TestBedOptions::default()
    })
    .context("building the test bed")?;
    checkpoint()?;

    let lb_bin = lb_tests::daemon::lb_binary();
    progress.step(&format!(
        "starting `{} run` in the LB namespace with a generated configuration \
         (4 VIPs, 3 backends, Maglev tables of 65,537 slots, native XDP on lb0)",
        lb_bin.display()
    ));
    let lb = Daemon::start(&bed, &DaemonConfig::equal(1..=3)).context("starting lb run")?;
    progress.step(&format!(
        "lb run answers on {} after {:.1} s; `lb status` for the TCP VIP:",
        lb.socket_path().display(),
        lb.startup_time().as_secs_f64()
    ));
    let vip = vip_text(false, true);
    Progress::detail(&status_block(&lb, &vip)?);
    checkpoint()?;

    let result = demo(progress, &bed, &lb, &vip);
    progress
        .step("tearing down: stopping lb run (SIGTERM: its datapath stays pinned), deleting the namespaces and the pins");
    let stopped = lb.stop();
    drop(bed);
    result?;
    stopped.context("stopping lb run")?;
    Ok(())
}

/// The `lb status` text block of `vip`.
fn status_block(lb: &Daemon<'_>, vip: &str) -> anyhow::Result<String> {
    let text = lb.cli(&["status"])?;
    let header = format!("VIP {vip} ");
    let block: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with(&header))
        .take_while(|l| !l.trim().is_empty())
        .collect();
    Ok(block.join("\n"))
}

/// Backend `k` of a `b<k>` name.
fn k_of(name: &str) -> anyhow::Result<u8> {
    name.strip_prefix('b')
        .and_then(|k| k.parse().ok())
        .with_context(|| format!("unexpected answer {name:?}"))
}

fn demo(progress: &Progress, bed: &TestBed, lb: &Daemon<'_>, vip: &str) -> anyhow::Result<()> {
    progress.step(&format!(
        "opening {CONNECTIONS} TCP connections to {} from {CLIENTS} client addresses \
         (kernel-chosen ports); each sends a line, its backend answers with its name",
        vip_tcp(false)
    ));
    let started = Instant::now();
    let mut conns: Vec<Greeted> = Vec::with_capacity(CONNECTIONS);
    for chunk in traffic::sources(bed, CONNECTIONS, false, Ports::Kernel).chunks(100) {
        checkpoint()?;
        conns.extend(traffic::connect_all(bed, chunk, vip_tcp(false))?);
    }
    let mut predicted_right = 0;
    for c in &conns {
        let flow = lb.flow(vip, c.conn.local_addr()?)?;
        let table = flow.table_backend.as_deref().and_then(backend_of);
        if table.map(backend_name).as_deref() == Some(c.backend.as_str()) {
            predicted_right += 1;
        }
    }
    let before = Tally::of(conns.iter().map(|c| c.backend.as_str()));
    progress.step(&format!(
        "all {} answered in {:.2} s; distribution:",
        before.total(),
        started.elapsed().as_secs_f64()
    ));
    let stats = lb.stats()?;
    let lb_packets = |k: u8| stats.backend_packets(vip, &backend_addr(k, false).to_string());
    let mut table = format!(
        "{:<8} {:<15} {:>11} {:>7} {:>7} {:>18}\n",
        "BACKEND", "ADDRESS", "CONNECTIONS", "SHARE", "IDEAL", "PACKETS (lb stats)"
    );
    for k in 1..=3 {
        let name = backend_name(k);
        table.push_str(&format!(
            "{:<8} {:<15} {:>11} {:>6.1}% {:>6.1}% {:>18}\n",
            name,
            backend_addr(k, false),
            before.get(&name),
            100.0 * before.share(&name),
            100.0 / 3.0,
            lb_packets(k)
        ));
    }
    table.push_str(&format!(
        "the daemon's own prediction (`lb flow`) named the answering backend for \
         {predicted_right}/{CONNECTIONS} connections"
    ));
    Progress::detail(&table);
    checkpoint()?;

    progress.step(&format!(
        "asking the daemon where {CONNECTIONS} new flows (ports {NEW_FLOW_PORT}..{}) would go on \
         the current table (`lb flow`)",
        u32::from(NEW_FLOW_PORT) + u32::try_from(CONNECTIONS).unwrap_or(0) - 1
    ));
    let new_srcs = traffic::sources(bed, CONNECTIONS, false, Ports::Fixed(NEW_FLOW_PORT));
    let old_choice: Vec<Option<u8>> = new_srcs
        .iter()
        .map(|src| {
            let flow = lb.flow(vip, *src)?;
            Ok(flow.table_backend.as_deref().and_then(backend_of))
        })
        .collect::<anyhow::Result<_>>()?;
    checkpoint()?;

    let k = bed.add_backend().context("building a 4th backend")?;
    progress.step(&format!(
        "adding backend b{k} ({}): its namespace first, then `lb backend add --vip {vip} \
         --backend {}`",
        backend_addr(k, false),
        backend_addr(k, false)
    ));
    let out = lb.backend("add", vip, k, None)?;
    Progress::detail(out.trim());
    Progress::detail(&status_block(lb, vip)?);
    checkpoint()?;

    progress.step(&format!(
        "each of the {} established connections sends another line",
        conns.len()
    ));
    let mut kept = 0;
    let mut broken = Vec::new();
    for (j, c) in conns.iter_mut().enumerate() {
        match c.conn.exchange("still there?") {
            Ok(answer) if answer == c.backend => kept += 1,
            Ok(answer) => broken.push(format!("{j}: {} -> {answer}", c.backend)),
            Err(e) => broken.push(format!("{j} ({}): {e}", c.backend)),
        }
    }
    Progress::detail(&format!(
        "established connections kept: {kept}/{} (same backend as before the change)",
        conns.len()
    ));
    for b in broken.iter().take(5) {
        Progress::detail(&format!("  not kept: {b}"));
    }
    checkpoint()?;

    progress.step(&format!(
        "opening the {CONNECTIONS} new connections (the predicted flows)"
    ));
    let mut answered = Vec::with_capacity(CONNECTIONS);
    for chunk in new_srcs.chunks(100) {
        checkpoint()?;
        answered.extend(traffic::greet_all(bed, chunk, vip_tcp(false))?);
    }
    let after = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
    let mut moved: u32 = 0;
    let mut moved_to_new: u32 = 0;
    for ((_, backend), old) in answered.iter().zip(&old_choice) {
        let now = k_of(backend)?;
        if Some(now) != *old {
            moved += 1;
            if now == k {
                moved_to_new += 1;
            }
        }
    }
    let mut table = format!(
        "{:<8} {:<15} {:>11} {:>7} {:>7}\n",
        "BACKEND", "ADDRESS", "CONNECTIONS", "SHARE", "IDEAL"
    );
    for b in 1..=k {
        let name = backend_name(b);
        table.push_str(&format!(
            "{:<8} {:<15} {:>11} {:>6.1}% {:>6.1}%\n",
            name,
            backend_addr(b, false),
            after.get(&name),
            100.0 * after.share(&name),
            100.0 / f64::from(k)
        ));
    }
    #[expect(clippy::cast_precision_loss, reason = "counts up to 1,000")]
    let moved_share = f64::from(moved) / CONNECTIONS as f64;
    table.push_str(&format!(
        "share of new connections that moved: {:.1}% ({moved}/{CONNECTIONS}) measured vs \
         ideal 25.0% (1/4)\n\
         of the moved ones, {moved_to_new} went to the new b{k} and {} between the old \
         backends",
        100.0 * moved_share,
        moved - moved_to_new
    ));
    Progress::detail(&table);
    if kept != conns.len() {
        bail!(
            "{} established connections were not kept",
            conns.len() - kept
        );
    }
    Ok(())
}
