//! Two CPUs at once (`--concurrent`): each case run by two `BPF_PROG_TEST_RUN` threads
//! pinned to CPU 0 and CPU 1 at the same time, against each CPU alone, in one run.
//!
//! `BPF_PROG_TEST_RUN` runs all of a call's repetitions on the calling thread's CPU, so
//! a thread pinned with `sched_setaffinity` measures that CPU. The harness keeps its
//! frame and repetition counter per CPU (`BENCH_FRAME` is a per-CPU array), so the two
//! threads share no written cache line of their own making; each thread sends its own
//! flows (CPU `c`'s source port is the case's plus `c`), as receive-side scaling would
//! spread flows over CPUs. What the two threads still write in common is the load
//! balancer's shared state: the conntrack LRU maps' lists and hash buckets, the SYN
//! cache. Per run, in this order: the empty program alone on each CPU, the load
//! balancer alone on each CPU, then the empty program on both CPUs at once and the load
//! balancer on both. Each CPU's figure is the median of its per-run differences (load
//! balancer minus empty, measured the same way: alone or at once), and the scaling
//! efficiency is the CPUs' summed ns alone over their summed ns at once (1.0: no
//! cost from the other CPU; 0.5: two CPUs forward no more than one).

use std::net::Ipv4Addr;

use anyhow::{Context as _, ensure};
use lb_common::stats::{Reason, VipStats};
use lb_dataplane::{
    BenchSpec, BenchTarget, Dataplane as _, KernelDataplane, LoadOptions, TestRunOutput,
};
use lb_tests::{
    cpus::at_once,
    fixture::{Lb, XDP_PASS, XDP_TX, default_config},
    packets::{ACK, Flow, L4, SYN, VIP4},
};

use crate::{
    FAST_VIP_PORT, Options, median, setup, sized,
    traffic::{self, Draw, SEQ_LEN, STEADY_SECS, SplitMix, V4_SRC},
};

/// The CPUs the two threads are pinned to.
pub(crate) const CPUS: [usize; 2] = [0, 1];

/// Established flows per CPU in the many-flow case.
const FLOWS_PER_CPU: u32 = 100_000;

/// The VIP of the cases (VIP4:80/tcp) and of the fast-path cases (VIP4:81/tcp).
const VIP_ID: u32 = 0;
const FAST_VIP_ID: u32 = 5;

/// The cases, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One established flow per CPU: a conntrack hit.
    OneFlowHit,
    /// `FLOWS_PER_CPU` established flows per CPU drawn uniformly: conntrack hits that
    /// miss the CPU caches.
    ManyFlowHits,
    /// A SYN on a new 4-tuple per packet, long after the last table change (table pick
    /// and SYN cache write).
    Syn,
    /// A mid-flow ACK on a new 4-tuple per packet: a conntrack miss that inserts into
    /// the full map (LRU eviction).
    MissInsert,
    /// The same past the new-pin rate: forwarded by the table without an insert.
    Flood,
    /// One flow per CPU on a VIP whose fast path is on: the clean slot decides, no
    /// conntrack.
    CleanSlotHit,
    /// A mid-flow ACK on a new 4-tuple per packet on the fast-path VIP: forwarded by
    /// the clean slot, nothing written.
    CleanSlotNewFlow,
}

impl Kind {
    pub(crate) const ALL: [Kind; 7] = [
        Kind::OneFlowHit,
        Kind::ManyFlowHits,
        Kind::Syn,
        Kind::MissInsert,
        Kind::Flood,
        Kind::CleanSlotHit,
        Kind::CleanSlotNewFlow,
    ];

    /// The row's name (what `--case` matches).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::OneFlowHit => "TCP v4 CT hit, 1 flow per CPU",
            Kind::ManyFlowHits => "TCP v4 CT hit, 100K flows per CPU, uniform",
            Kind::Syn => "TCP v4 SYN, new 4-tuple (table + SYN cache)",
            Kind::MissInsert => "TCP v4 mid-flow CT miss (insert into full 1M CT)",
            Kind::Flood => "TCP v4 ACK flood past the new-pin rate (no insert)",
            Kind::CleanSlotHit => "TCP v4 clean-slot hit (fast path), 1 flow per CPU",
            Kind::CleanSlotNewFlow => "TCP v4 clean-slot new 4-tuple ACK (fast path, no write)",
        }
    }
}

/// A prepared case: one frame per CPU of [`CPUS`] (the same but for the source port)
/// and how the harness varies them.
pub(crate) struct Case {
    pub(crate) frames: Vec<Vec<u8>>,
    pub(crate) spec: BenchSpec,
}

/// CPU `c`'s flow: `flow` with its source port plus `c`.
fn per_cpu(flow: &Flow, l4: L4) -> Vec<Vec<u8>> {
    (0..CPUS.len())
        .map(|c| {
            let mut mine = *flow;
            mine.sport += u16::try_from(c).unwrap_or(0);
            sized(&mine, l4)
        })
        .collect()
}

/// Prepares `kind` on `lb` (pins its flows, fills conntrack, sets the config) and
/// returns its frames; `repeat` sizes the conntrack fill.
pub(crate) fn prepare(lb: &mut Lb, kind: Kind, ct: u32) -> anyhow::Result<Case> {
    lb.dp.set_config(&default_config())?;
    let tcp4 = Flow::new(Ipv4Addr::new(10, 0, 0, 0), 40000, VIP4, 80);
    let fast4 = Flow::new(Ipv4Addr::new(10, 0, 0, 0), 40000, VIP4, FAST_VIP_PORT);
    let vary = BenchSpec {
        vary_offset: V4_SRC,
        ..BenchSpec::default()
    };
    Ok(match kind {
        Kind::OneFlowHit => {
            lb.dp.flush_conntrack()?;
            // Each CPU pins its own flow, as its conntrack entry's LRU list is that
            // CPU's when the lists are per CPU.
            let none = BenchSpec::default();
            for l4 in [L4::Tcp(SYN), L4::Tcp(ACK)] {
                everywhere(lb, &per_cpu(&tcp4, l4), &none, 1)?;
            }
            Case {
                frames: per_cpu(&tcp4, L4::Tcp(ACK)),
                spec: none,
            }
        }
        Kind::ManyFlowHits => many_flows(lb)?,
        Kind::Syn => {
            // The steady state: long after the table's first sighting, no SYN looks
            // conntrack up.
            lb.dp.test_run(&tcp4.frame(L4::Tcp(SYN), &[]))?;
            lb.dp.age_table_seen(VIP_ID, STEADY_SECS)?;
            Case {
                frames: per_cpu(&tcp4, L4::Tcp(SYN)),
                spec: vary,
            }
        }
        Kind::MissInsert => {
            fill(lb, &tcp4, ct)?;
            Case {
                frames: per_cpu(&tcp4, L4::Tcp(ACK)),
                spec: vary,
            }
        }
        Kind::Flood => {
            let mut cfg = default_config();
            cfg.new_pin_interval_ns = 1_000_000_000;
            cfg.new_pin_burst_ns = 0;
            lb.dp.set_config(&cfg)?;
            Case {
                frames: per_cpu(&tcp4, L4::Tcp(ACK)),
                spec: vary,
            }
        }
        Kind::CleanSlotHit => Case {
            frames: per_cpu(&fast4, L4::Tcp(ACK)),
            spec: BenchSpec::default(),
        },
        Kind::CleanSlotNewFlow => Case {
            frames: per_cpu(&fast4, L4::Tcp(ACK)),
            spec: vary,
        },
    })
}

/// Runs the load balancer `repeat` times on every CPU of [`CPUS`] at once, CPU `c` on
/// `frames[c]` varied as `spec` says; every run must forward.
fn everywhere(
    lb: &mut Lb,
    frames: &[Vec<u8>],
    spec: &BenchSpec,
    repeat: u32,
) -> anyhow::Result<()> {
    let runner = lb
        .dp
        .bench_runner(BenchTarget::LoadBalancer, &frames[0], spec)?;
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    for (c, out) in at_once(&runner, &CPUS, &refs, repeat)?.iter().enumerate() {
        ensure!(
            out.action == XDP_TX,
            "preparing on CPU {c}: action {}",
            out.action
        );
    }
    Ok(())
}

/// Fills conntrack with `ct + ct / 8` new flows, half from each CPU at once (on other
/// source ports than the timed flows'), so that every timed insert evicts.
fn fill(lb: &mut Lb, flow: &Flow, ct: u32) -> anyhow::Result<()> {
    let mut filler = *flow;
    filler.sport = 50000;
    let spec = BenchSpec {
        vary_offset: V4_SRC,
        ..BenchSpec::default()
    };
    let each = (ct + ct / 8).div_ceil(u32::try_from(CPUS.len()).unwrap_or(1));
    everywhere(lb, &per_cpu(&filler, L4::Tcp(ACK)), &spec, each)
}

/// Pins `FLOWS_PER_CPU` flows per CPU with real handshakes (CPU `c`'s on source port
/// 40000 + `c`) and returns the case drawing them uniformly.
fn many_flows(lb: &mut Lb) -> anyhow::Result<Case> {
    let [v4, _] = traffic::families();
    lb.dp.flush_conntrack()?;
    let n = FLOWS_PER_CPU;
    let identity: Vec<u32> = (0..n).map(traffic::source_word).collect();
    lb.dp.set_bench_seq(&identity)?;
    // Each CPU pins its own flows (source port 40000 + c) with real handshakes: flow
    // i's SYN, then its ACK.
    let (syn, mut pair) = traffic::handshake(&v4)?;
    pair.seq_len = n.next_power_of_two();
    pair.counter = Some(0);
    let syns = per_cpu(&v4.flow, L4::Tcp(SYN));
    ensure!(syns[0] == syn, "the handshake's SYN is CPU 0's");
    everywhere(lb, &syns, &pair, 2 * n)?;
    let (pinned, _) = lb.dp.conntrack_len()?;
    let expected = n as usize * CPUS.len();
    ensure!(pinned == expected, "{pinned} flows pinned of {expected}");
    let mut rng = SplitMix(0x6c62_5f63_7075_7321);
    let seq: Vec<u32> = traffic::draws(n, Draw::Uniform, SEQ_LEN, &mut rng)
        .into_iter()
        .map(traffic::source_word)
        .collect();
    lb.dp.set_bench_seq(&seq)?;
    Ok(Case {
        frames: per_cpu(&v4.flow, L4::Tcp(ACK)),
        spec: BenchSpec {
            vary_offset: v4.src,
            seq_len: SEQ_LEN,
            ..BenchSpec::default()
        },
    })
}

/// What every timed repetition of the load balancer must have done (counted in the
/// VIP's or the global counters).
fn expected_path(kind: Kind) -> fn(&VipStats, u64) -> u64 {
    match kind {
        Kind::OneFlowHit | Kind::ManyFlowHits => |s, _| s.ct_hits,
        Kind::CleanSlotHit | Kind::CleanSlotNewFlow => |s, _| s.clean_slot_hits,
        Kind::Syn | Kind::MissInsert => |s, _| s.new_flows,
        // Counted in the global counters (`tx_unpinned`), the second argument.
        Kind::Flood => |_, unpinned| unpinned,
    }
}

/// Repetitions and runs of the concurrent section: `--quick` keeps them short.
pub(crate) fn sizes(opts: &Options) -> (usize, u32) {
    if opts.quick {
        (opts.runs.min(3), opts.repeat.min(200_000))
    } else {
        (opts.runs, opts.repeat)
    }
}

/// One case's figures (ns per packet).
#[derive(Debug, Default)]
pub(crate) struct Scaling {
    /// The empty program alone and at once, mean of the CPUs' medians.
    pub(crate) empty_alone: u64,
    pub(crate) empty_both: u64,
    /// Per CPU: the load balancer over empty, alone and at once.
    pub(crate) alone: Vec<i64>,
    pub(crate) both: Vec<i64>,
}

impl Scaling {
    /// The CPUs' summed ns over empty alone divided by the same at once.
    pub(crate) fn efficiency(&self) -> f64 {
        let alone: i64 = self.alone.iter().sum();
        let both: i64 = self.both.iter().sum();
        if both <= 0 {
            return f64::NAN;
        }
        #[expect(clippy::cast_precision_loss, reason = "ns per packet, far below 2^52")]
        let ratio = alone as f64 / both as f64;
        ratio
    }
}

/// Per-run samples of one target: per CPU alone, per CPU at once.
#[derive(Default)]
struct Samples {
    alone: Vec<Vec<u64>>,
    both: Vec<Vec<u64>>,
}

/// Times `case` as the module says: `runs` rounds of the empty program and the load
/// balancer, each alone on every CPU of [`CPUS`] then on all of them at once.
fn measure(lb: &mut Lb, case: &Case, runs: usize, repeat: u32) -> anyhow::Result<Scaling> {
    let frames: Vec<&[u8]> = case.frames.iter().map(Vec::as_slice).collect();
    let mut samples = [Samples::default(), Samples::default()];
    for s in &mut samples {
        s.alone = vec![Vec::new(); CPUS.len()];
        s.both = vec![Vec::new(); CPUS.len()];
    }
    for _ in 0..runs {
        let [empty, full] = &mut samples;
        for (target, action, s) in [
            (BenchTarget::Empty, XDP_PASS, empty),
            (BenchTarget::LoadBalancer, XDP_TX, full),
        ] {
            let runner = lb.dp.bench_runner(target, frames[0], &case.spec)?;
            for (c, &cpu) in CPUS.iter().enumerate() {
                let out = at_once(&runner, &[cpu], &frames[c..=c], repeat)?;
                check(&out, action, target)?;
                s.alone[c].push(out[0].duration_ns);
            }
            let outs = at_once(&runner, &CPUS, &frames, repeat)?;
            check(&outs, action, target)?;
            for (c, out) in outs.iter().enumerate() {
                s.both[c].push(out.duration_ns);
            }
        }
    }
    let [empty, full] = samples;
    let over = |lb: &[u64], empty: &[u64]| {
        median(
            lb.iter()
                .zip(empty)
                .map(|(&l, &e)| signed(l) - signed(e))
                .collect(),
        )
    };
    let mean = |v: &[Vec<u64>]| {
        let medians: Vec<u64> = v.iter().map(|r| median(r.clone())).collect();
        medians.iter().sum::<u64>() / medians.len().max(1) as u64
    };
    Ok(Scaling {
        empty_alone: mean(&empty.alone),
        empty_both: mean(&empty.both),
        alone: (0..CPUS.len())
            .map(|c| over(&full.alone[c], &empty.alone[c]))
            .collect(),
        both: (0..CPUS.len())
            .map(|c| over(&full.both[c], &empty.both[c]))
            .collect(),
    })
}

fn signed(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// Every run ended with the expected action.
fn check(outs: &[TestRunOutput], action: u32, target: BenchTarget) -> anyhow::Result<()> {
    for out in outs {
        ensure!(
            out.action == action,
            "a run of {target:?} ended with action {} (expected {action})",
            out.action
        );
    }
    Ok(())
}

/// The concurrent section: every case of [`Kind::ALL`] that `--case` keeps, on two CPUs
/// at once against each alone, `--rounds` times; with `--object`, each round measures
/// the embedded object and then that build (before and after a change, in one run).
pub(crate) fn two_cpus(opts: &Options) -> anyhow::Result<()> {
    // Online CPUs, whatever this thread's affinity (earlier sections pin it).
    // SAFETY: sysconf only reads.
    let cpus = usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap_or(1);
    if cpus <= CPUS[1] {
        ensure!(
            !opts.concurrent,
            "--concurrent pins threads to CPUs {CPUS:?}: this machine has {cpus} CPU(s)"
        );
        println!("two CPUs at once: skipped, this machine has {cpus} CPU(s)");
        return Ok(());
    }
    let (runs, repeat) = sizes(opts);
    // Conntrack holds the many-flow case's flows without eviction.
    let ct = opts.ct.max(4 * FLOWS_PER_CPU);
    let object = match &opts.object {
        None => None,
        Some(path) => Some(
            std::fs::read(path).with_context(|| format!("reading --object {}", path.display()))?,
        ),
    };
    println!();
    println!(
        "two CPUs at once: BPF_PROG_TEST_RUN threads pinned to CPUs {CPUS:?}, each alone and both at once, median of {runs} runs x {repeat} repetitions, conntrack {ct} entries, gateway next hop; ns/packet over the empty program measured the same way (alone or at once); scaling efficiency = summed ns alone / summed ns at once"
    );
    println!();
    println!(
        "| case | object | empty, alone / at once (ns) | CPU 0: alone / at once (ns) | CPU 1: alone / at once (ns) | scaling efficiency |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for _ in 0..opts.rounds {
        let builds = std::iter::once(("embedded", None))
            .chain(object.as_deref().map(|o| ("--object", Some(o))));
        for (label, bytes) in builds {
            let mut lb = match bytes {
                None => Lb::with_ct(ct, opts.syn),
                Some(bytes) => {
                    let options = LoadOptions {
                        ct_capacity: ct,
                        ct_syn_capacity: opts.syn,
                        ..LoadOptions::default()
                    };
                    Lb::over(KernelDataplane::load_object_bytes(options, bytes)?)
                }
            };
            setup(&mut lb);
            for kind in Kind::ALL {
                if crate::wants(opts, kind.name()) {
                    let t = checked(&mut lb, kind, ct, runs, repeat)?;
                    println!(
                        "| {} | {label} | {} / {} | {} / {} | {} / {} | {:.2} |",
                        kind.name(),
                        t.empty_alone,
                        t.empty_both,
                        t.alone[0],
                        t.both[0],
                        t.alone[1],
                        t.both[1],
                        t.efficiency()
                    );
                }
            }
        }
    }
    Ok(())
}

/// Prepares and measures `kind`, checking that every timed repetition of the load
/// balancer took the case's path.
fn checked(lb: &mut Lb, kind: Kind, ct: u32, runs: usize, repeat: u32) -> anyhow::Result<Scaling> {
    let case = prepare(lb, kind, ct)?;
    let vip = if matches!(kind, Kind::CleanSlotHit | Kind::CleanSlotNewFlow) {
        FAST_VIP_ID
    } else {
        VIP_ID
    };
    let unpinned = |lb: &Lb| lb.global().get(Reason::TxUnpinned);
    let (before, unpinned_before) = (lb.dp.vip_stats(vip)?, unpinned(lb));
    let t = measure(lb, &case, runs, repeat)?;
    let (after, unpinned_after) = (lb.dp.vip_stats(vip)?, unpinned(lb));
    let path = expected_path(kind);
    let timed = u64::from(repeat) * runs as u64 * 2 * CPUS.len() as u64;
    let took = path(&after, unpinned_after) - path(&before, unpinned_before);
    // The flood lets one pin a second through per CPU.
    let slack = if kind == Kind::Flood {
        4 * runs as u64 + 4
    } else {
        0
    };
    ensure!(
        took + slack >= timed,
        "{}: {took} of {timed} timed packets took the expected path",
        kind.name()
    );
    lb.dp.set_config(&default_config())?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_the_summed_ns_alone_over_the_summed_ns_at_once() {
        let t = Scaling {
            alone: vec![40, 60],
            both: vec![50, 75],
            ..Scaling::default()
        };
        assert!((t.efficiency() - 0.8).abs() < 1e-9);
        let none = Scaling {
            alone: vec![40, 60],
            both: vec![0, 0],
            ..Scaling::default()
        };
        assert!(none.efficiency().is_nan());
    }

    #[test]
    fn each_cpus_frame_differs_from_cpu_0s_in_its_source_port_and_checksum_only() {
        let flow = Flow::new(Ipv4Addr::new(10, 0, 0, 0), 40000, VIP4, 80);
        let frames = per_cpu(&flow, L4::Tcp(ACK));
        assert_eq!(frames.len(), CPUS.len());
        // Ethernet 14 + IPv4 20: the TCP source port at 34..36, its checksum at 50..52.
        let differing: Vec<usize> = (0..frames[0].len())
            .filter(|&i| frames[0][i] != frames[1][i])
            .collect();
        assert!(!differing.is_empty());
        assert!(
            differing
                .iter()
                .all(|i| (34..36).contains(i) || (50..52).contains(i)),
            "{differing:?}"
        );
        assert_eq!(&frames[1][34..36], &40001u16.to_be_bytes());
    }

    #[test]
    fn quick_keeps_the_concurrent_section_short() {
        let mut opts = <Options as clap::Parser>::parse_from([
            "lb-bench",
            "--concurrent",
            "--runs",
            "5",
            "--repeat",
            "1000000",
        ]);
        assert_eq!(sizes(&opts), (5, 1_000_000));
        opts.quick = true;
        assert_eq!(sizes(&opts), (3, 200_000));
    }

    #[test]
    fn every_case_has_its_own_name() {
        let mut names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Kind::ALL.len());
    }
}
