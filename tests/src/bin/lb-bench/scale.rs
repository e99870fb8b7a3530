//! Control-plane scale: `lb run` with many VIPs (100 backends each, M = 65,537, skb
//! mode, gateway next hop) in a namespace this benchmark creates, for 1 (the
//! reference), 10, 100, 500 and 1,000 VIPs ([`VIPS`], `--scale-vips` to choose):
//! - start: from the process's start (`ip netns exec ... lb run`) until it sends
//!   `READY=1` on `$NOTIFY_SOCKET` (every table built and written, program attached);
//! - the daemon's private memory once it is ready (and after one stats sample period):
//!   heap and anonymous mappings, the sum of the `Anonymous:` lines of
//!   `/proc/<pid>/smaps` over every mapping but the BPF maps' own (`anon_inode:bpf-map`,
//!   the mmapped table buffers, reported apart as "buffers resident"), divided by the
//!   VIPs, and the growth per VIP over the reference;
//! - restart to adopted: SIGTERM, then a new `lb run` that adopts the pinned datapath
//!   (the same build's programs kept, tables recognised by the record's digests), and
//!   its memory;
//! - idle CPU: the adopted daemon's CPU time over [`IDLE`] without traffic or changes,
//!   as a share of one CPU (what a daemon of that size costs its host at rest).
//!
//! - where each start's time went: the daemon's `start phases` log line (target
//!   `lb::start`): the datapath opened (maps created or opened, programs verified), the
//!   controller's recovery, the plan (while worker threads build the tables; their CPU
//!   time apart), the record, the table buffers, the other map writes, the attach.
//!
//! Each configuration runs [`RUNS`] times, each in a fresh namespace (a first start
//! creates the datapath); the table gives medians. With `--scale-before PATH`, the
//! other build's `lb` runs too, alternating with this one run by run (the machine's
//! speed phases then touch both alike): a change's before and after in one run.

use std::{
    os::unix::net::UnixDatagram,
    path::{Path, PathBuf},
    process::Child,
    time::Duration,
};

use anyhow::{Context as _, bail};
use lb_tests::{
    daemon::{lb_binary, scale_config, start_logged_until_ready, stop_gracefully},
    netns::NetNs,
};

/// The VIP counts measured by default; 1 is the reference of the per-VIP figures.
pub(crate) const VIPS: [usize; 5] = [1, 10, 100, 500, 1_000];

/// What to measure.
pub(crate) struct ScaleOptions {
    /// VIP counts (1 is added when missing: the reference).
    pub(crate) vips: Vec<usize>,
    /// Another `lb` binary to measure alongside, labelled `before`.
    pub(crate) before: Option<PathBuf>,
}

/// The keys of the daemon's `start phases (ms):` line, in the order the breakdown
/// table prints them (`lb/src/daemon/start_phases.rs`).
const PHASES: [&str; 15] = [
    "total",
    "config",
    "open",
    "maps",
    "verify",
    "recover",
    "plan",
    "builds_cpu",
    "record",
    "buffers",
    "writes",
    "service",
    "attach",
    "health",
    "other",
];

/// The start's phases (ms, in [`PHASES`] order), from the last `start phases` line of
/// the daemon's log `log`; `None` when it has none (a build before the line existed).
fn phases(log: &Path) -> anyhow::Result<Option<[f64; PHASES.len()]>> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let Some(line) = text
        .lines()
        .rev()
        .find_map(|l| l.split_once("start phases (ms): "))
    else {
        return Ok(None);
    };
    let mut out = [f64::NAN; PHASES.len()];
    for pair in line.1.split_whitespace() {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        if let Some(i) = PHASES.iter().position(|k| *k == key) {
            out[i] = value
                .parse()
                .with_context(|| format!("phase {key}={value}"))?;
        }
    }
    Ok(Some(out))
}

/// Runs per configuration.
const RUNS: usize = 3;

/// Backends per VIP.
const BACKENDS: usize = 100;

/// Backends per VIP for `vips` VIPs: [`BACKENDS`], or fewer when the backend ids would
/// not suffice (one id per VIP-backend pair, `MAX_BACKENDS - 1` of them: 1,000 VIPs get
/// 65 backends each).
fn backends_for(vips: usize) -> usize {
    BACKENDS.min((lb_common::maps::MAX_BACKENDS as usize - 1) / vips.max(1))
}

/// The daemon's configuration: `vips` VIPs of [`backends_for`] backends, 65,537-slot
/// tables. Distinct backends per VIP: no two VIPs share a table build.
fn config(dir: &Path, vips: usize) -> String {
    let backends = backends_for(vips);
    scale_config(dir, vips, backends, 65_537, |v, b| {
        let a = 1 + v * backends + b;
        [a >> 16, (a >> 8) & 0xff, a & 0xff]
    })
}

/// A running `lb run` and the time it took to become ready.
struct Started {
    child: Child,
    took: Duration,
    /// CPU time the daemon used until then (user + system).
    cpu: Duration,
    /// Where the start's time went, by the daemon's account.
    phases: Option<[f64; PHASES.len()]>,
}

/// The CPU time (user + system) process `pid` has used, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command (which may contain spaces) and its closing parenthesis:
    // state is field 3, utime 14 and stime 15 (proc(5)).
    let rest = stat.rsplit_once(')').context("a /proc stat line")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100);
    Ok(Duration::from_millis(ticks * 1_000 / hz.max(1)))
}

/// Starts `lb` (`lb run`) in `ns` and returns once READY=1 arrived, checking that its
/// status says the datapath was `how` (`created` or `adopted`).
fn start(
    lb: &Path,
    ns: &NetNs,
    dir: &Path,
    notify: &UnixDatagram,
    how: &str,
) -> anyhow::Result<Started> {
    let log = dir.join("lb.log");
    let (child, message, took) = start_logged_until_ready(lb, ns, dir, notify, Some(&log))?;
    let expected = format!("datapath {how}");
    if !message.contains(&expected) {
        bail!("lb run became ready without \"{expected}\": {message:?}");
    }
    let cpu = cpu_time(child.id())?;
    Ok(Started {
        child,
        took,
        cpu,
        phases: phases(&log)?,
    })
}

/// A process's memory, KiB (from `/proc/<pid>/smaps`).
#[derive(Clone, Copy, Default)]
struct Memory {
    /// Anonymous pages outside the BPF maps' mappings: heap, anonymous mappings,
    /// stacks.
    private: u64,
    /// Resident pages of the mmapped BPF maps (the table buffers).
    buffers: u64,
}

/// Reads `pid`'s memory. `ip netns exec` execs the command, so the child is `lb` itself.
fn memory(pid: u32) -> anyhow::Result<Memory> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))?;
    if comm.trim() != "lb" {
        bail!("process {pid} is {:?}, not lb", comm.trim());
    }
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut memory = Memory::default();
    let mut bpf = false;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if !first.ends_with(':') {
            // A mapping's header: range, perms, offset, dev, inode, [path].
            bpf = line.contains("bpf-map");
            continue;
        }
        let mut kib = || {
            fields
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match (first, bpf) {
            ("Anonymous:", false) => memory.private += kib(),
            ("Rss:", true) => memory.buffers += kib(),
            _ => {}
        }
    }
    Ok(memory)
}

/// One run of one configuration.
struct Run {
    first: Duration,
    first_cpu: Duration,
    first_memory: Memory,
    restart: Duration,
    restart_memory: Memory,
    /// CPU time of the adopted daemon over [`IDLE`], without traffic or changes, as a
    /// share of one CPU.
    idle_cpu: f64,
    first_phases: Option<[f64; PHASES.len()]>,
    restart_phases: Option<[f64; PHASES.len()]>,
}

/// How long the idle daemon's CPU time is measured: three stats sample periods.
const IDLE: Duration = Duration::from_secs(3);

/// The share of one CPU process `pid` uses over [`IDLE`].
fn idle_cpu(pid: u32) -> anyhow::Result<f64> {
    let before = cpu_time(pid)?;
    std::thread::sleep(IDLE);
    let used = cpu_time(pid)?.saturating_sub(before);
    Ok(used.as_secs_f64() / IDLE.as_secs_f64())
}

/// Memory once the daemon has run one stats sample period after READY=1.
fn settled_memory(pid: u32) -> anyhow::Result<Memory> {
    std::thread::sleep(Duration::from_millis(1_200));
    memory(pid)
}

fn run(lb: &Path, vips: usize) -> anyhow::Result<Run> {
    let ns = NetNs::create("lbb-scale-")?;
    ns.ip(&["link", "add", "lb0", "type", "veth", "peer", "name", "lb1"])?;
    ns.ip(&["link", "set", "lb0", "up"])?;
    ns.ip(&["link", "set", "lb1", "up"])?;
    let tmp = lb_tests::daemon::TempDir::new("lbb-scale-")?;
    let dir = tmp.path();
    std::fs::write(dir.join("lb.toml"), config(dir, vips))?;
    let notify = UnixDatagram::bind(dir.join("notify.sock"))?;
    notify.set_read_timeout(Some(Duration::from_secs(300)))?;
    let first = start(lb, &ns, dir, &notify, "created")?;
    let first_memory = settled_memory(first.child.id());
    stop_gracefully(first.child)?;
    let restart = start(lb, &ns, dir, &notify, "adopted")?;
    let restart_memory = settled_memory(restart.child.id());
    let idle = idle_cpu(restart.child.id());
    stop_gracefully(restart.child)?;
    // The namespace's drop removes the pins.
    Ok(Run {
        first: first.took,
        first_cpu: first.cpu,
        first_memory: first_memory?,
        restart: restart.took,
        restart_memory: restart_memory?,
        idle_cpu: idle?,
        first_phases: first.phases,
        restart_phases: restart.phases,
    })
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// The median of each figure over [`RUNS`] runs.
#[derive(Clone, Copy)]
struct Figures {
    first_ms: f64,
    first_cpu_ms: f64,
    first: Memory,
    restart_ms: f64,
    restart: Memory,
    idle_cpu: f64,
    first_phases: Option<[f64; PHASES.len()]>,
    restart_phases: Option<[f64; PHASES.len()]>,
}

/// The median of each phase over `runs`, `None` when a run lacks them.
fn median_phases(runs: &[Option<[f64; PHASES.len()]>]) -> Option<[f64; PHASES.len()]> {
    let runs: Vec<[f64; PHASES.len()]> = runs.iter().copied().collect::<Option<_>>()?;
    let mut out = [0.0; PHASES.len()];
    for (i, phase) in out.iter_mut().enumerate() {
        *phase = median(runs.iter().map(|r| r[i]).collect());
    }
    Some(out)
}

fn figures(runs: &[Run]) -> Figures {
    let ms =
        |f: fn(&Run) -> Duration| median(runs.iter().map(|r| f(r).as_secs_f64() * 1e3).collect());
    let kib = |f: fn(&Run) -> u64| median(runs.iter().map(f).collect());
    let phases = |f: fn(&Run) -> Option<[f64; PHASES.len()]>| {
        median_phases(&runs.iter().map(f).collect::<Vec<_>>())
    };
    Figures {
        first_ms: ms(|r| r.first),
        first_cpu_ms: ms(|r| r.first_cpu),
        first: Memory {
            private: kib(|r| r.first_memory.private),
            buffers: kib(|r| r.first_memory.buffers),
        },
        restart_ms: ms(|r| r.restart),
        restart: Memory {
            private: kib(|r| r.restart_memory.private),
            buffers: kib(|r| r.restart_memory.buffers),
        },
        idle_cpu: median(runs.iter().map(|r| r.idle_cpu).collect()),
        first_phases: phases(|r| r.first_phases),
        restart_phases: phases(|r| r.restart_phases),
    }
}

/// The builds to measure: this one's `lb` (`this`), and with `before`, that binary
/// first (`before`).
fn builds(options: &ScaleOptions) -> Vec<(&'static str, PathBuf)> {
    let mut builds = Vec::new();
    if let Some(before) = &options.before {
        builds.push(("before", before.clone()));
    }
    builds.push(("this", lb_binary()));
    builds
}

/// The figures of each build for `vips` VIPs, their runs alternating between builds.
fn measure(builds: &[(&'static str, PathBuf)], vips: usize) -> anyhow::Result<Vec<Figures>> {
    let mut runs: Vec<Vec<Run>> = builds.iter().map(|_| Vec::new()).collect();
    for _ in 0..RUNS {
        for (i, (_, lb)) in builds.iter().enumerate() {
            runs[i].push(run(lb, vips)?);
        }
    }
    Ok(runs.iter().map(|r| figures(r)).collect())
}

/// One row of the breakdown table: the phases of `phases`, or dashes.
fn phase_cells(phases: Option<[f64; PHASES.len()]>) -> String {
    match phases {
        Some(p) => p
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
            .join(" | "),
        None => vec!["-"; PHASES.len()].join(" | "),
    }
}

/// Prints the scale table, then the breakdown of the starts.
pub(crate) fn daemon_scale(options: &ScaleOptions) -> anyhow::Result<()> {
    println!(
        "control plane at scale: lb run, {BACKENDS} backends per VIP (fewer where the {} backend ids do not suffice, one per VIP-backend pair), M = 65,537, skb mode, gateway next hop; medians of {RUNS} runs, each in a fresh namespace. Start: until READY=1 (tables built and written, program attached), and the CPU time the daemon used for it (user + system: what a shared machine's load does not stretch). Private memory: anonymous pages outside the BPF map mappings, {:.1} s after READY=1; per VIP over the 1-VIP reference. Restart: SIGTERM, then a start that adopts the pinned datapath. Idle CPU: the adopted daemon's CPU time over the next {} s, without traffic or changes (its stats samples, metrics bookkeeping, conntrack walks), as a share of one CPU.",
        lb_common::maps::MAX_BACKENDS - 1,
        1.2,
        IDLE.as_secs()
    );
    println!();
    let builds = builds(options);
    let mut vips = options.vips.clone();
    vips.retain(|&v| v > 1);
    vips.sort_unstable();
    vips.dedup();
    let reference = measure(&builds, 1)?;
    let mut measured = vec![(1, reference.clone())];
    for &v in &vips {
        measured.push((v, measure(&builds, v)?));
    }
    println!(
        "| VIPs | backends per VIP | build | first start (ms) | its CPU time (ms) | private (KiB) | private per VIP over 1 VIP (KiB) | buffers resident (KiB) | restart to adopted (ms) | private after restart (KiB) | per VIP over 1 VIP (KiB) | idle CPU (%) |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (vips, figures) in &measured {
        for (b, f) in figures.iter().enumerate() {
            let base = &reference[b];
            let per_vip = |now: u64, base: u64| {
                if *vips == 1 {
                    "-".to_owned()
                } else {
                    format!("{:.0}", now.saturating_sub(base) as f64 / (vips - 1) as f64)
                }
            };
            println!(
                "| {vips} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {:.0} | {} | {} | {:.1} |",
                backends_for(*vips),
                builds[b].0,
                f.first_ms,
                f.first_cpu_ms,
                f.first.private,
                per_vip(f.first.private, base.first.private),
                f.first.buffers,
                f.restart_ms,
                f.restart.private,
                per_vip(f.restart.private, base.restart.private),
                f.idle_cpu * 100.0,
            );
        }
    }
    println!();
    println!(
        "where the starts' time went (ms, medians; the daemon's `start phases` line): total from the start's beginning in the daemon; config = the file and the state file read and checked; open = the datapath opened, of which maps = object read and maps created or opened, verify = programs verified; recover = the record read back; plan = ids, entries and operations while worker threads build the tables (builds_cpu: the Maglev builds' times summed, without the tables' fingerprints, CPU time on several threads); record = the controller's record stored; buffers = table buffers created; writes = every other map write; service = the rest of the first apply (desired state, overrides, report); attach; health = what follows the attach (health checks started, next hops watched, pins kept); other = the rest (sockets)."
    );
    println!();
    println!("| VIPs | build | start | {} |", PHASES.join(" | "));
    println!("|---:|---|---|{}", "---:|".repeat(PHASES.len()));
    for (vips, figures) in &measured {
        for (b, f) in figures.iter().enumerate() {
            for (how, phases) in [("first", f.first_phases), ("restart", f.restart_phases)] {
                println!(
                    "| {vips} | {} | {how} | {} |",
                    builds[b].0,
                    phase_cells(phases)
                );
            }
        }
    }
    println!();
    Ok(())
}
