//! Data-plane cases that look like traffic: many established flows instead of one, the
//! two packets that open a connection, and the packet rate through the real `XDP_TX`
//! path.
//!
//! - Populations: `N` established flows (1,000, 100,000, 1,000,000), pinned by real
//!   handshakes (a SYN, then the ACK that promotes it into conntrack), then timed with
//!   one flow per repetition drawn from a sequence of 2^20 draws that the harness
//!   stamps into the source address (`BENCH_SEQ`): uniform (every flow equally often,
//!   in shuffled order) or Zipf-skewed (`s` = 1: the `k`-th most popular flow is drawn
//!   with weight `1/k`, ranks assigned to flows at random). Conntrack lookups then miss
//!   the CPU caches as they do in production. Every timed repetition must be a
//!   conntrack hit (checked with the VIP's counters). The one-flow row uses the same
//!   harness with a population of one.
//! - Handshake: a SYN, then the ACK completing the handshake, on a new 4-tuple per
//!   connection (the harness alternates the TCP flags' word), with conntrack full, as
//!   it is on a busy load balancer (LRU eviction on every insert).
//! - Flood: mid-flow ACKs from a new 4-tuple per packet past the rate of new pins, each
//!   forwarded by the table without a pin (`tx_unpinned`): the per-packet cost of an
//!   ACK flood once the limit holds it.
//! - Packet rate: `BPF_PROG_TEST_RUN` in live-frames mode (`BPF_F_TEST_XDP_LIVE_FRAMES`):
//!   the frames the program returns with `XDP_TX` leave through `lb0`, a veth in the
//!   benchmark's namespace, whose peer `lb1` drops them in its own XDP program; the
//!   limit is the harness with a program that only returns `XDP_TX`, in the same run.
//!   One flow and 100,000 flows drawn uniformly, each as a conntrack hit and as a
//!   clean-slot hit (the fast path).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Context as _, ensure};
use lb_common::{
    stats::Reason,
    types::{PROTO_TCP, VipKey},
};
use lb_dataplane::{BenchSpec, BenchTarget, Dataplane as _, PassProgram};
use lb_tests::{
    fixture::{Lb, XDP_PASS, XDP_TX, vip_key},
    packets::{ACK, CLIENT6, Flow, L4, SYN, VIP4, VIP6},
};

use crate::{Options, median, setup, sized};

/// Medians (ns/packet) of a traffic case: the load balancer, the empty program, their
/// per-run differences, and the fastest runs' difference (as the main table's).
struct Timing {
    lb: u64,
    empty: u64,
    over: i64,
    min_over: i64,
}

/// Entries of the draw sequence (`BENCH_SEQ`).
pub(crate) const SEQ_LEN: u32 = 1 << 20;
/// Offset of the IPv4 source address in the frame.
pub(crate) const V4_SRC: u32 = 26;
/// Offset of the last 4 bytes of the IPv6 source address in the frame.
const V6_SRC_LOW: u32 = 34;
/// Offset of the word holding the TCP flags (data offset and flags bytes, with the
/// low half of the acknowledgment number before them) after an IPv4 header.
pub(crate) const V4_FLAGS_WORD: u32 = 44;
/// The same after an IPv6 header.
const V6_FLAGS_WORD: u32 = 64;
/// Offset of the TCP sequence number (a SYN's ISN) after an IPv4 header.
pub(crate) const V4_SEQ: u32 = 38;
/// The same after an IPv6 header.
const V6_SEQ: u32 = 58;

/// How the flows of a population are drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Draw {
    Uniform,
    /// Zipf with exponent 1.
    Zipf,
}

/// A small, fast, seeded generator (splitmix64): reproducible draws without a
/// dependency.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u32) -> u32 {
        u32::try_from(((self.next() >> 32) * u64::from(n)) >> 32).unwrap_or(0)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "53 random bits")]
        let x = (self.next() >> 11) as f64;
        x / (1u64 << 53) as f64
    }

    fn shuffle(&mut self, v: &mut [u32]) {
        for i in (1..v.len()).rev() {
            let j = self.below(u32::try_from(i + 1).unwrap_or(u32::MAX)) as usize;
            v.swap(i, j);
        }
    }
}

/// `len` flow indexes in `0..n` drawn as `draw` says.
pub(crate) fn draws(n: u32, draw: Draw, len: u32, rng: &mut SplitMix) -> Vec<u32> {
    match draw {
        Draw::Uniform => {
            // Shuffled passes over the population: every flow equally often.
            let mut out = Vec::with_capacity(len as usize);
            let mut pass: Vec<u32> = (0..n).collect();
            while out.len() < len as usize {
                rng.shuffle(&mut pass);
                out.extend_from_slice(&pass);
            }
            out.truncate(len as usize);
            out
        }
        Draw::Zipf => {
            // Inverse transform over the cumulative weights 1/k, ranks given to
            // flows in random order.
            let mut cdf = Vec::with_capacity(n as usize);
            let mut sum = 0.0;
            for k in 1..=n {
                sum += 1.0 / f64::from(k);
                cdf.push(sum);
            }
            let mut flow_of_rank: Vec<u32> = (0..n).collect();
            rng.shuffle(&mut flow_of_rank);
            (0..len)
                .map(|_| {
                    let u = rng.unit() * sum;
                    let rank = cdf.partition_point(|&c| c < u).min(n as usize - 1);
                    flow_of_rank[rank]
                })
                .collect()
        }
    }
}

/// The 4 bytes stamped for flow `i` of a population: an IPv4 source in 10.0.0.0/8, or
/// the last 4 bytes of an IPv6 source (in both cases network order, as stored).
pub(crate) fn source_word(i: u32) -> u32 {
    u32::from_ne_bytes((0x0a00_0000 | i).to_be_bytes())
}

/// One family's frames and offsets.
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) flow: Flow,
    pub(crate) src: u32,
    pub(crate) flags_word: u32,
    pub(crate) seq: u32,
    pub(crate) vip_id: u32,
    pub(crate) vip: VipKey,
}

pub(crate) fn families() -> [Family; 2] {
    // The IPv6 client's last 4 bytes are replaced per flow; its first 12 stay.
    let client6 = Ipv6Addr::from(u128::from(CLIENT6) & !0xffff_ffff);
    [
        Family {
            name: "v4",
            flow: Flow::new(Ipv4Addr::new(10, 0, 0, 0), 40000, VIP4, 80),
            src: V4_SRC,
            flags_word: V4_FLAGS_WORD,
            seq: V4_SEQ,
            vip_id: 0,
            vip: vip_key(VIP4.into(), 80, PROTO_TCP),
        },
        Family {
            name: "v6",
            flow: Flow::new(IpAddr::V6(client6), 40000, VIP6, 80),
            src: V6_SRC_LOW,
            flags_word: V6_FLAGS_WORD,
            seq: V6_SEQ,
            vip_id: 2,
            vip: vip_key(VIP6.into(), 80, PROTO_TCP),
        },
    ]
}

/// A SYN frame and the harness spec that turns odd repetitions into its ACK.
pub(crate) fn handshake(family: &Family) -> anyhow::Result<(Vec<u8>, BenchSpec)> {
    let syn = sized(&family.flow, L4::Tcp(SYN));
    let ack = sized(&family.flow, L4::Tcp(ACK));
    let at = family.flags_word as usize;
    // The two frames differ in the flags' word and the TCP checksum only (the
    // program checks no checksum).
    let checksum = at + 6..at + 8;
    let other = (0..syn.len())
        .find(|&i| syn[i] != ack[i] && !(at..at + 4).contains(&i) && !checksum.contains(&i));
    ensure!(
        other.is_none(),
        "SYN and ACK frames differ at byte {other:?}"
    );
    let mut word = [0; 4];
    word.copy_from_slice(&ack[at..at + 4]);
    Ok((
        syn,
        BenchSpec {
            vary_offset: family.src,
            pair_offset: family.flags_word,
            pair_word: word,
            ..BenchSpec::default()
        },
    ))
}

/// Times `spec` on `frame` against the empty program, `opts.runs` alternating runs;
/// `start(run)` gives each run's first counter (the same for both programs when the
/// flows are drawn from a population).
fn time(
    lb: &mut Lb,
    frame: &[u8],
    spec: &BenchSpec,
    start: &dyn Fn(usize) -> Option<u32>,
    opts: &Options,
) -> anyhow::Result<Timing> {
    let (mut lbs, mut empties, mut overs) = (vec![], vec![], vec![]);
    for run in 0..opts.runs {
        let mut at = *spec;
        at.counter = start(run);
        let empty = lb
            .dp
            .bench_run_spec(BenchTarget::Empty, frame, &at, None, opts.repeat)?;
        at.counter = start(run);
        let full =
            lb.dp
                .bench_run_spec(BenchTarget::LoadBalancer, frame, &at, None, opts.repeat)?;
        ensure!(
            empty.action == XDP_PASS && full.action == XDP_TX,
            "a long run ended with action {} (empty: {})",
            full.action,
            empty.action
        );
        overs.push(signed(full.duration_ns) - signed(empty.duration_ns));
        lbs.push(full.duration_ns);
        empties.push(empty.duration_ns);
    }
    let fastest = |v: &[u64]| signed(v.iter().min().copied().unwrap_or(0));
    Ok(Timing {
        min_over: fastest(&lbs) - fastest(&empties),
        lb: median(lbs),
        empty: median(empties),
        over: median(overs),
    })
}

fn signed(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

fn row(name: &str, t: &Timing) {
    // The main table's last column (the build without tracing) is not measured here.
    println!(
        "| {name} | gateway | {} | {} | {} | {} | |",
        t.lb, t.empty, t.over, t.min_over
    );
}

/// Established flows: for each family, one flow, then 1K, 100K and 1M flows drawn
/// uniformly and Zipf-skewed.
pub(crate) fn populations(opts: &Options) -> anyhow::Result<()> {
    let populations: &[u32] = &[1, 1_000, 100_000, 1_000_000];
    // Conntrack at twice the largest population: no eviction while timing.
    let mut lb = Lb::with_ct(opts.ct.max(2 * 1_000_000), opts.syn);
    setup(&mut lb);
    lb_tests::pin_to_cpu(opts.cpu).context("pinning the benchmark thread")?;
    let mut rng = SplitMix(0x6c62_5f62_656e_6368);
    for family in families() {
        for &n in populations {
            pin_population(&mut lb, &family, n)?;
            let ack = sized(&family.flow, L4::Tcp(ACK));
            let draws_and_paths = [Draw::Uniform, Draw::Zipf]
                .into_iter()
                .flat_map(|draw| [(draw, false), (draw, true)]);
            for (draw, fast) in draws_and_paths {
                if n == 1 && draw == Draw::Zipf {
                    continue;
                }
                // The fast path on: the same pinned flows, all on clean slots.
                lb.dp.set_fast_path(&family.vip, family.vip_id, fast)?;
                let seq: Vec<u32> = draws(n, draw, SEQ_LEN, &mut rng)
                    .into_iter()
                    .map(source_word)
                    .collect();
                lb.dp.set_bench_seq(&seq)?;
                let spec = BenchSpec {
                    vary_offset: family.src,
                    seq_len: SEQ_LEN,
                    ..BenchSpec::default()
                };
                let before = lb.dp.vip_stats(family.vip_id)?;
                let repeat = opts.repeat;
                let t = time(
                    &mut lb,
                    &ack,
                    &spec,
                    &|run| Some(u32::try_from(run).unwrap_or(0).wrapping_mul(repeat)),
                    opts,
                )?;
                let after = lb.dp.vip_stats(family.vip_id)?;
                let timed = u64::from(opts.repeat) * opts.runs as u64;
                let hits = if fast {
                    after.clean_slot_hits - before.clean_slot_hits
                } else {
                    after.ct_hits - before.ct_hits
                };
                ensure!(
                    hits == timed && after.new_flows == before.new_flows,
                    "{hits} of {timed} timed packets took the expected path (fast path: {fast})"
                );
                let label = match (n, draw) {
                    (1, _) => "1 flow".to_owned(),
                    (_, Draw::Uniform) => format!("{} flows, uniform", flows(n)),
                    (_, Draw::Zipf) => format!("{} flows, Zipf (s = 1)", flows(n)),
                };
                let kind = if fast { "clean-slot hit" } else { "CT hit" };
                row(&format!("TCP {} {kind}, {label}", family.name), &t);
            }
            lb.dp.set_fast_path(&family.vip, family.vip_id, false)?;
        }
    }
    Ok(())
}

/// "1 flow", or "N flows, uniform".
fn flows_label(n: u32) -> String {
    if n == 1 {
        "1 flow".to_owned()
    } else {
        format!("{} flows, uniform", flows(n))
    }
}

fn flows(n: u32) -> String {
    match n {
        1_000_000 => "1M".to_owned(),
        n if n % 1000 == 0 => format!("{}K", n / 1000),
        n => n.to_string(),
    }
}

/// The handshake, a SYN then the ACK completing it on a new 4-tuple per connection, for
/// each family. Reported per packet (the mean of the two) and per connection.
pub(crate) fn handshakes(lb: &mut Lb, opts: &Options) -> anyhow::Result<()> {
    for family in families() {
        let (syn, spec) = handshake(&family)?;
        // Fill conntrack first: every timed connection's insert then evicts, as on a
        // busy load balancer.
        let fill = 2 * opts.ct + opts.ct / 4;
        let mut warm = spec;
        warm.counter = Some(0);
        lb.dp
            .bench_run_spec(BenchTarget::LoadBalancer, &syn, &warm, None, fill)?;
        // Long after the last table change: no SYN looks conntrack up (see `syns`).
        lb.dp.age_table_seen(family.vip_id, STEADY_SECS)?;
        let even = |n: u32| n.wrapping_add(1) & !1;
        let next = even(lb.dp.bench_counter()?);
        let repeat = opts.repeat & !1;
        let before = lb.dp.vip_stats(family.vip_id)?;
        let runs = u32::try_from(opts.runs).unwrap_or(u32::MAX);
        let t = time(
            lb,
            &syn,
            &spec,
            // New connections in every run of both programs.
            &|run| {
                Some(next.wrapping_add(u32::try_from(run).unwrap_or(0).wrapping_mul(2 * repeat)))
            },
            &Options {
                repeat,
                ..opts.clone()
            },
        )?;
        let after = lb.dp.vip_stats(family.vip_id)?;
        // Each connection: its SYN is a new flow, its ACK a conntrack hit on the SYN
        // cache (promoted into conntrack).
        let connections = u64::from(repeat / 2) * u64::from(runs);
        ensure!(
            after.new_flows - before.new_flows == connections
                && after.ct_hits - before.ct_hits == connections,
            "of {connections} handshakes, {} SYNs were new flows and {} ACKs promoted",
            after.new_flows - before.new_flows,
            after.ct_hits - before.ct_hits
        );
        row(
            &format!(
                "TCP {} handshake (SYN + ACK, new 4-tuple per connection, conntrack full), per packet",
                family.name
            ),
            &t,
        );
        let pair = Timing {
            lb: 2 * t.lb,
            empty: 2 * t.empty,
            over: 2 * t.over,
            min_over: 2 * t.min_over,
        };
        row(
            &format!("TCP {} handshake (SYN + ACK), per connection", family.name),
            &pair,
        );
    }
    Ok(())
}

/// How far `age_table_seen` moves a table's first sighting back: past the 180 s window
/// after a table change in which a SYN looks its flow up in conntrack.
pub(crate) const STEADY_SECS: u32 = 200;

/// A TCP SYN on a new 4-tuple per packet, for each family: long after the VIP's last
/// table change (the steady state: the table and SYN cache decide), and within 180 s
/// of one (a conntrack lookup first, for duplicates of connections picked from the
/// older table). Then one 4-tuple with a new ISN per packet, long after the change:
/// each SYN a new connection through the table and one SYN cache slot, which stays in
/// the CPU's caches (the main table's SYN row without its conntrack lookup).
pub(crate) fn syns(lb: &mut Lb, opts: &Options) -> anyhow::Result<()> {
    for family in families() {
        let syn = sized(&family.flow, L4::Tcp(SYN));
        let spec = BenchSpec {
            vary_offset: family.src,
            ..BenchSpec::default()
        };
        for steady in [true, false] {
            // A table switch (a new epoch), seen by one SYN.
            let slots = lb
                .dp
                .table(family.vip_id)?
                .context("the VIP's table")?
                .slots;
            lb.table(family.vip_id, &slots);
            lb.dp
                .bench_run_spec(BenchTarget::LoadBalancer, &syn, &spec, None, 1)?;
            if steady {
                lb.dp.age_table_seen(family.vip_id, STEADY_SECS)?;
            }
            let t = time(lb, &syn, &spec, &|_| None, opts)?;
            let when = if steady {
                "180 s after the last table change: table + SYN cache"
            } else {
                "within 180 s of a table change: conntrack lookup first"
            };
            row(&format!("TCP {} SYN, new 4-tuple, {when}", family.name), &t);
        }
        lb.dp.age_table_seen(family.vip_id, STEADY_SECS)?;
        let isn = BenchSpec {
            vary_offset: family.seq,
            ..BenchSpec::default()
        };
        let before = lb.dp.vip_stats(family.vip_id)?;
        let t = time(lb, &syn, &isn, &|_| None, opts)?;
        let after = lb.dp.vip_stats(family.vip_id)?;
        ensure!(
            after.new_flows > before.new_flows && after.ct_hits == before.ct_hits,
            "SYNs with new ISNs were not new connections"
        );
        row(
            &format!(
                "TCP {} SYN, one 4-tuple, new ISN per packet, 180 s after the last table change",
                family.name
            ),
            &t,
        );
    }
    Ok(())
}

/// The flood path: a TCP v4 mid-flow miss on a new 4-tuple per packet, refused a pin
/// (a rate of one new pin per second, no burst), forwarded by the table.
pub(crate) fn flood(lb: &mut Lb, opts: &Options) -> anyhow::Result<()> {
    let mut cfg = lb_tests::fixture::default_config();
    cfg.new_pin_interval_ns = 1_000_000_000;
    cfg.new_pin_burst_ns = 0;
    lb.dp.set_config(&cfg)?;
    let flow = Flow::new(Ipv4Addr::new(10, 0, 0, 0), 40000, VIP4, 80);
    let frame = sized(&flow, L4::Tcp(ACK));
    let spec = BenchSpec {
        vary_offset: V4_SRC,
        ..BenchSpec::default()
    };
    let before = lb.global();
    let t = time(lb, &frame, &spec, &|_| None, opts)?;
    let unpinned = lb.global().get(Reason::TxUnpinned) - before.get(Reason::TxUnpinned);
    let timed = u64::from(opts.repeat) * opts.runs as u64;
    // A pin a second may pass.
    ensure!(
        unpinned + 2 * opts.runs as u64 + 2 >= timed,
        "only {unpinned} of {timed} flood packets were refused a pin"
    );
    row(
        "TCP v4 mid-flow miss past the new-pin rate (ACK flood: forwarded by the table, unpinned)",
        &t,
    );
    lb.dp.set_config(&lb_tests::fixture::default_config())?;
    Ok(())
}

/// Whether `error` is the kernel refusing a live-frames test run (`EPERM` from
/// `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`, seen on some VMs' kernels):
/// the packet-rate rows are then reported as not measured, and the rest of the
/// benchmark runs.
pub(crate) fn live_frames_refused(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<lb_dataplane::DataplaneError>()
            .is_some_and(|e| e.program_errno() == Some(libc::EPERM))
    })
}

/// Packets per second through the real `XDP_TX` path (live frames into `lb0`, dropped
/// by `lb_sink` on its peer `lb1`), for established IPv4 flows: one flow and 100,000
/// drawn uniformly, each as a conntrack hit and as a clean-slot hit (the fast path),
/// with the `XDP_TX`-only program as the limit, measured alternately in the same run;
/// `ns` is the benchmark's namespace (the caller's thread is in it). The first line
/// gives the one-flow conntrack hit's share of the limit (the reference case).
pub(crate) fn packet_rate(
    lb: &mut Lb,
    ns: &lb_tests::netns::NetNs,
    opts: &Options,
) -> anyhow::Result<()> {
    let lb0 = lb_tests::fixture::ifindex("lb0");
    ensure!(lb0 != 0, "lb0 missing in the benchmark namespace");
    let _sink = PassProgram::attach_sink("lb1").context("the sink on lb1")?;
    let family = &families()[0];
    let mut rng = SplitMix(0x7478_5f72_6174_6573);
    let mut rows = Vec::new();
    for n in [1, 100_000] {
        pin_population(lb, family, n)?;
        for fast in [false, true] {
            lb.dp.set_fast_path(&family.vip, family.vip_id, fast)?;
            let seq: Vec<u32> = draws(n, Draw::Uniform, SEQ_LEN, &mut rng)
                .into_iter()
                .map(source_word)
                .collect();
            lb.dp.set_bench_seq(&seq)?;
            let before = lb.dp.vip_stats(family.vip_id)?;
            let rate = live_rate(lb, ns, family, lb0, opts)?;
            let after = lb.dp.vip_stats(family.vip_id)?;
            let hits = if fast {
                after.clean_slot_hits - before.clean_slot_hits
            } else {
                after.ct_hits - before.ct_hits
            };
            ensure!(
                hits == rate.sent && after.new_flows == before.new_flows,
                "{hits} of {} live frames took the expected path (fast path: {fast})",
                rate.sent
            );
            let kind = if fast { "clean-slot hit" } else { "CT hit" };
            rows.push((format!("TCP v4 {kind}, {}", flows_label(n)), rate));
        }
        lb.dp.set_fast_path(&family.vip, family.vip_id, false)?;
    }
    let (first, rate) = &rows[0];
    println!(
        "packet rate through XDP_TX (BPF_PROG_TEST_RUN live frames, batches of {LIVE_BATCH}, into a veth whose peer drops them in XDP), {first}, median of {} runs x {}: lb_xdp {:.2} Mpps ({} ns/packet), XDP_TX-only limit {:.2} Mpps ({} ns/packet), {:.0} % of the limit; the peer received {} of lb_xdp's {} frames in the last run",
        opts.runs,
        rate.repeat,
        mpps(rate.lb_ns),
        rate.lb_ns,
        mpps(rate.limit_ns),
        rate.limit_ns,
        rate.share(),
        rate.delivered,
        rate.repeat
    );
    println!();
    println!(
        "| live frames through XDP_TX | XDP_TX-only (ns/packet) | push 20 bytes + XDP_TX (ns/packet) | lb_xdp (ns/packet) | lb_xdp over XDP_TX-only (ns) | share of XDP_TX-only | share of push + XDP_TX |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, rate) in &rows {
        println!(
            "| {name} | {} | {} | {} | {} | {:.0} % | {:.0} % |",
            rate.limit_ns,
            rate.encap_ns,
            rate.lb_ns,
            signed(rate.lb_ns) - signed(rate.limit_ns),
            rate.share(),
            100.0 * rate.encap_ns as f64 / rate.lb_ns.max(1) as f64
        );
    }
    Ok(())
}

/// Frames per `BPF_PROG_TEST_RUN` batch in live-frames mode.
const LIVE_BATCH: u32 = 64;

/// Medians of one live-frames case: the load balancer, the `XDP_TX`-only limit and the
/// limit of an encapsulating program (`lb_tx_encap`: push 20 bytes, `XDP_TX`), in
/// ns/packet; the frames the peer received in the last run, the timed frames the load
/// balancer sent and the repetitions per run.
struct LiveRate {
    lb_ns: u64,
    limit_ns: u64,
    encap_ns: u64,
    delivered: u64,
    sent: u64,
    repeat: u32,
}

impl LiveRate {
    /// The load balancer's packet rate as a percentage of the limit's.
    fn share(&self) -> f64 {
        100.0 * self.limit_ns as f64 / self.lb_ns.max(1) as f64
    }
}

/// Millions of packets per second at `ns` per packet.
fn mpps(ns: u64) -> f64 {
    if ns == 0 { 0.0 } else { 1e3 / ns as f64 }
}

/// Pins `n` flows of `family` (sources `source_word(0..n)`) with real handshakes.
fn pin_population(lb: &mut Lb, family: &Family, n: u32) -> anyhow::Result<()> {
    lb.dp.flush_conntrack()?;
    let identity: Vec<u32> = (0..n).map(source_word).collect();
    lb.dp.set_bench_seq(&identity)?;
    let (syn, mut pair) = handshake(family)?;
    pair.seq_len = n.next_power_of_two();
    pair.counter = Some(0);
    let out = lb
        .dp
        .bench_run_spec(BenchTarget::LoadBalancer, &syn, &pair, None, 2 * n)?;
    ensure!(
        out.action == XDP_TX,
        "pinning {n} flows: action {}",
        out.action
    );
    let (pinned, _) = lb.dp.conntrack_len()?;
    ensure!(pinned == n as usize, "{pinned} flows pinned of {n}");
    Ok(())
}

/// Alternating live-frames runs of the limit and the load balancer on `family`'s ACK,
/// one flow per frame drawn from `BENCH_SEQ`.
fn live_rate(
    lb: &mut Lb,
    ns: &lb_tests::netns::NetNs,
    family: &Family,
    lb0: u32,
    opts: &Options,
) -> anyhow::Result<LiveRate> {
    let frame = sized(&family.flow, L4::Tcp(ACK));
    let spec = BenchSpec {
        vary_offset: family.src,
        seq_len: SEQ_LEN,
        ..BenchSpec::default()
    };
    let repeat = opts.repeat.max(1_000_000);
    let mut live = |target| {
        lb.dp
            .bench_live(target, &frame, &spec, lb0, repeat, LIVE_BATCH)
    };
    let (mut lbs, mut limits, mut encaps) = (vec![], vec![], vec![]);
    let mut delivered = 0;
    for _ in 0..opts.runs {
        limits.push(live(BenchTarget::Tx)?);
        encaps.push(live(BenchTarget::TxEncap)?);
        let before = rx_packets(ns)?;
        lbs.push(live(BenchTarget::LoadBalancer)?);
        delivered = rx_packets(ns)? - before;
    }
    Ok(LiveRate {
        lb_ns: median(lbs),
        limit_ns: median(limits),
        encap_ns: median(encaps),
        delivered,
        sent: u64::from(repeat) * opts.runs as u64,
        repeat,
    })
}

/// The frames `lb1` received (its XDP program saw them), read inside the namespace.
fn rx_packets(ns: &lb_tests::netns::NetNs) -> anyhow::Result<u64> {
    let out = ns.exec("cat", &["/sys/class/net/lb1/statistics/rx_packets"])?;
    ensure!(out.status.success(), "reading lb1's rx_packets failed");
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}
