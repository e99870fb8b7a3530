//! Control-plane, remote API latency (`api`), health-check (`health`), multi-instance failover (`fleet`) and
//! data-plane benchmarks behind `cargo xtask bench`. Data plane: ns/packet of the XDP program by
//! BPF_PROG_TEST_RUN, each reported over the empty XDP program measured in the same run
//! with the same harness.
//!
//! Method: the `lb_bench` harness program restores the 128-byte frame before every
//! repetition (the kernel reuses one buffer, so an encapsulating program would otherwise
//! see its own output) and tail-calls either the load balancer or the empty program.
//! The two alternate, 5 runs of 1,000,000 repetitions each on a pinned CPU; the table
//! gives the median of each and the median of the per-run differences ("over empty").
//! Every long run's action must equal a one-repetition run's. Set-up: 100 backends
//! (IP-in-IP, and the same sent GUE for the VIPs on port 8080, the "GUE" cases, and on
//! port 82 with the second chance on and the flow's slot moved, the "second chance" cases),
//! 65,537-slot tables, a conntrack map of
//! 1,048,576 entries. The cases that look like traffic (populations of established
//! flows, uniform and Zipf-skewed; the SYN + ACK handshake on new 4-tuples; the packet
//! rate through the real `XDP_TX` path) are in `traffic`; the conntrack entries a
//! fast-path VIP keeps, in steady state and after a table change, in `entries`; the same cases on two CPUs at
//! once, against each alone (`--concurrent`), in `concurrent`; the backend agent's
//! cases (`lb_agent` through the same harness), in `agent`.

// A crate root resolves modules beside it: the module lives in lb-bench/, as if this
// file were lb-bench/main.rs.
#[path = "lb-bench/agent.rs"]
mod agent;
#[path = "lb-bench/api.rs"]
mod api;
#[path = "lb-bench/change.rs"]
mod change;
#[path = "lb-bench/concurrent.rs"]
mod concurrent;
#[path = "lb-bench/entries.rs"]
mod entries;
#[path = "lb-bench/fleet.rs"]
mod fleet;
#[path = "lb-bench/health.rs"]
mod health;
#[path = "lb-bench/scale.rs"]
mod scale;
#[path = "lb-bench/traffic.rs"]
mod traffic;

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context as _, bail, ensure};
use lb::{config::Config, controller::Controller};
use lb_common::{
    defaults::{CT_CAPACITY, CT_SYN_CAPACITY},
    maps::{FULL_PROGRAM, RARE_PROGRAM, UNTRACED_PROGRAM, XDP_PROGRAM},
    types::{BACKEND_ACTIVE, BENCH_FRAME_MAX, GUE_DEFAULT_PORT, NEXTHOP_FIB, PROTO_TCP, PROTO_UDP},
};
use lb_dataplane::{BenchTarget, Dataplane as _, KernelDataplane, LoadOptions};
use lb_maglev::flow::slot_of;
use lb_tests::{
    fixture::{
        Lb, SEED, XDP_PASS, XDP_TX, default_config, fib_namespace, flow_key, ifindex, round_robin,
    },
    packets::{ACK, CLIENT4, CLIENT6, Flow, L4, SYN, VIP4, VIP6},
};

/// One benchmarked packet.
struct Case {
    name: &'static str,
    frame: Vec<u8>,
    /// Offset of the source address to vary per repetition (new flows), or 0.
    vary: u32,
    /// Expected action.
    action: u32,
    /// Packets to send once before timing (to pin the flow).
    warm: Vec<Vec<u8>>,
}

/// `frame` padded with payload bytes to exactly `BENCH_FRAME_MAX` bytes, built again
/// with etherparse so lengths and checksums stay right.
fn sized(flow: &Flow, l4: L4) -> Vec<u8> {
    let bare = flow.frame(l4, &[]);
    flow.frame(l4, &vec![0x61; BENCH_FRAME_MAX - bare.len()])
}

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Medians (ns/packet) of the load balancer, of the empty reference, and of their
/// per-run differences; the two programs run alternately, so drift affects both alike.
struct Timing {
    lb: u64,
    empty: u64,
    over: i64,
    /// The same build without packet tracing (`lb_xdp_untraced`) over empty: what the
    /// trace switch costs while it is off is `over - untraced_over`.
    untraced_over: i64,
    /// Fastest load-balancer run minus fastest empty run: the runs least disturbed
    /// by the host (this VM's speed changes by up to 2x between runs).
    min_over: i64,
}

fn run_case(
    lb: &mut Lb,
    case: &Case,
    ifindex: Option<u32>,
    opts: &Options,
) -> anyhow::Result<Timing> {
    for frame in &case.warm {
        lb.dp.test_run_with(frame, ifindex, 1)?;
    }
    for (target, expected) in [
        (BenchTarget::Empty, XDP_PASS),
        (BenchTarget::LoadBalancer, case.action),
        (BenchTarget::Untraced, case.action),
    ] {
        let once = lb
            .dp
            .bench_run(target, &case.frame, case.vary, ifindex, 1)?;
        ensure!(
            once.action == expected,
            "{}: one repetition of {target:?} returned action {} (expected {expected})",
            case.name,
            once.action
        );
    }
    let (mut lbs, mut empties, mut overs, mut untraced) = (vec![], vec![], vec![], vec![]);
    for _ in 0..opts.runs {
        let empty = lb.dp.bench_run(
            BenchTarget::Empty,
            &case.frame,
            case.vary,
            ifindex,
            opts.repeat,
        )?;
        let full = lb.dp.bench_run(
            BenchTarget::LoadBalancer,
            &case.frame,
            case.vary,
            ifindex,
            opts.repeat,
        )?;
        let plain = lb.dp.bench_run(
            BenchTarget::Untraced,
            &case.frame,
            case.vary,
            ifindex,
            opts.repeat,
        )?;
        ensure!(
            empty.action == XDP_PASS && full.action == case.action && plain.action == case.action,
            "{}: a long run's last action differs from a single repetition's",
            case.name
        );
        untraced.push(
            i64::try_from(plain.duration_ns).unwrap_or(i64::MAX)
                - i64::try_from(empty.duration_ns).unwrap_or(i64::MAX),
        );
        overs.push(
            i64::try_from(full.duration_ns).unwrap_or(i64::MAX)
                - i64::try_from(empty.duration_ns).unwrap_or(i64::MAX),
        );
        lbs.push(full.duration_ns);
        empties.push(empty.duration_ns);
    }
    let fastest =
        |v: &[u64]| i64::try_from(v.iter().min().copied().unwrap_or(0)).unwrap_or(i64::MAX);
    Ok(Timing {
        min_over: fastest(&lbs) - fastest(&empties),
        lb: median(lbs),
        empty: median(empties),
        over: median(overs),
        untraced_over: median(untraced),
    })
}

fn setup(lb: &mut Lb) {
    // As the daemon does every second: established flows copy this tick into their pins.
    if let Some(mut clock) = lb.dp.take_activity_clock() {
        clock.refresh().expect("activity tick");
    }
    for k in 1..=100u32 {
        let last = u8::try_from(k).expect("small");
        lb.backend(k, Ipv4Addr::new(198, 51, 100, last), BACKEND_ACTIVE);
        let v6 = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x100 + u16::from(last));
        lb.backend(100 + k, v6, BACKEND_ACTIVE);
        // The same backends sent GUE, for the VIPs on port 8080.
        let v4 = Ipv4Addr::new(198, 51, 100, last);
        lb.encap_backend(200 + k, v4, BACKEND_ACTIVE, GUE_DEFAULT_PORT);
        lb.encap_backend(300 + k, v6, BACKEND_ACTIVE, GUE_DEFAULT_PORT);
    }
    let ids4: Vec<u32> = (1..=100).collect();
    let ids6: Vec<u32> = (101..=200).collect();
    let gue4: Vec<u32> = (201..=300).collect();
    let gue6: Vec<u32> = (301..=400).collect();
    lb.table(0, &round_robin(65_537, &ids4));
    lb.table(1, &round_robin(65_537, &ids4));
    lb.table(2, &round_robin(65_537, &ids6));
    lb.table(3, &round_robin(65_537, &gue4));
    lb.table(4, &round_robin(65_537, &gue6));
    lb.vip(0, VIP4, 80, PROTO_TCP);
    lb.vip(1, VIP4, 53, PROTO_UDP);
    lb.vip(2, VIP6, 80, PROTO_TCP);
    lb.vip(3, VIP4, GUE_VIP_PORT, PROTO_TCP);
    lb.vip(4, VIP6, GUE_VIP_PORT, PROTO_TCP);
    // The fast path's VIPs (port 81): every slot clean, so the table decides alone.
    lb.table(5, &round_robin(65_537, &ids4));
    lb.table(6, &round_robin(65_537, &ids6));
    lb.table(7, &round_robin(65_537, &ids4));
    for (id, addr, proto) in [
        (5, IpAddr::from(VIP4), PROTO_TCP),
        (6, IpAddr::from(VIP6), PROTO_TCP),
        (7, IpAddr::from(VIP4), PROTO_UDP),
    ] {
        let key = lb.vip(id, addr, FAST_VIP_PORT, proto);
        lb.dp.set_fast_path(&key, id, true).expect("fast path on");
    }
    second_chance_vips(lb, &gue4, &gue6);
}

/// The second chance's VIPs (port 82, GUE backends): the slot of the benchmark's flow
/// moved from its clean owner to another backend, so an ACK that misses conntrack there
/// is sent to the owner with the clean owner as its candidate, and is not pinned
/// (`lb_common::second_chance`): every repetition takes that path.
fn second_chance_vips(lb: &mut Lb, gue4: &[u32], gue6: &[u32]) {
    for (id, addr, ids) in [(8, IpAddr::from(VIP4), gue4), (9, IpAddr::from(VIP6), gue6)] {
        let mut table = round_robin(65_537, ids);
        lb.table(id, &table);
        let key = lb.vip(id, addr, SECOND_CHANCE_VIP_PORT, PROTO_TCP);
        let flow = Flow::new(
            CLIENT_OF[usize::from(id == 9)],
            40000,
            addr,
            SECOND_CHANCE_VIP_PORT,
        );
        let slot = slot_of(&flow_key(&flow, PROTO_TCP), SEED, 65_537).expect("a slot");
        let at = usize::try_from(slot).expect("fits");
        table[at] = if table[at] == ids[0] { ids[1] } else { ids[0] };
        lb.table(id, &table);
        lb.dp
            .set_second_chance(&key, id, true)
            .expect("second chance on");
    }
}

/// The clients of the benchmark's IPv4 and IPv6 flows.
const CLIENT_OF: [IpAddr; 2] = [IpAddr::V4(CLIENT4), IpAddr::V6(CLIENT6)];

/// The port of the benchmark's VIPs whose second chance is on.
const SECOND_CHANCE_VIP_PORT: u16 = 82;

/// The port of the benchmark's VIPs whose fast path is on (`fast_path = true`).
const FAST_VIP_PORT: u16 = 81;

/// The port of the benchmark's VIPs whose backends are sent GUE.
const GUE_VIP_PORT: u16 = 8080;

fn cases() -> Vec<Case> {
    let tcp4 = Flow::new(CLIENT4, 40000, VIP4, 80);
    let tcp6 = Flow::new(CLIENT6, 40000, VIP6, 80);
    let udp4 = Flow::new(CLIENT4, 50000, VIP4, 53);
    let gue4 = Flow::new(CLIENT4, 40000, VIP4, GUE_VIP_PORT);
    let gue6 = Flow::new(CLIENT6, 40000, VIP6, GUE_VIP_PORT);
    let other = Flow::new(CLIENT4, 40000, Ipv4Addr::new(203, 0, 113, 99), 80);
    let fast4 = Flow::new(CLIENT4, 40000, VIP4, FAST_VIP_PORT);
    let fast6 = Flow::new(CLIENT6, 40000, VIP6, FAST_VIP_PORT);
    let fast_udp4 = Flow::new(CLIENT4, 50000, VIP4, FAST_VIP_PORT);
    let sc4 = Flow::new(CLIENT4, 40000, VIP4, SECOND_CHANCE_VIP_PORT);
    let sc6 = Flow::new(CLIENT6, 40000, VIP6, SECOND_CHANCE_VIP_PORT);
    vec![
        Case {
            name: "non-VIP pass",
            frame: sized(&other, L4::Tcp(SYN)),
            vary: 0,
            action: XDP_PASS,
            warm: vec![],
        },
        Case {
            name: "TCP v4 CT hit",
            frame: sized(&tcp4, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![tcp4.frame(L4::Tcp(SYN), &[]), tcp4.frame(L4::Tcp(ACK), &[])],
        },
        Case {
            name: "TCP v6 CT hit",
            frame: sized(&tcp6, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![tcp6.frame(L4::Tcp(SYN), &[]), tcp6.frame(L4::Tcp(ACK), &[])],
        },
        Case {
            name: "TCP v4 CT hit, GUE",
            frame: sized(&gue4, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![gue4.frame(L4::Tcp(SYN), &[]), gue4.frame(L4::Tcp(ACK), &[])],
        },
        Case {
            name: "TCP v6 CT hit, GUE",
            frame: sized(&gue6, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![gue6.frame(L4::Tcp(SYN), &[]), gue6.frame(L4::Tcp(ACK), &[])],
        },
        Case {
            name: "UDP v4 CT hit",
            frame: sized(&udp4, L4::Udp),
            vary: 0,
            action: XDP_TX,
            warm: vec![udp4.frame(L4::Udp, &[])],
        },
        Case {
            name: "TCP v4 new flow (SYN, CT insert)",
            frame: sized(&tcp4, L4::Tcp(SYN)),
            vary: 26,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "TCP v4 clean-slot hit (fast path)",
            frame: sized(&fast4, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "TCP v6 clean-slot hit (fast path)",
            frame: sized(&fast6, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "UDP v4 clean-slot hit (fast path)",
            frame: sized(&fast_udp4, L4::Udp),
            vary: 0,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "TCP v4 new flow (SYN, clean slot, no write)",
            frame: sized(&fast4, L4::Tcp(SYN)),
            vary: 26,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "TCP v4 handshake's ACK (clean slot, no insert)",
            frame: sized(&fast4, L4::Tcp(ACK)),
            vary: 26,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "TCP v4 second chance (dirty-slot miss, GUE + 1 candidate)",
            frame: sized(&sc4, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "TCP v6 second chance (dirty-slot miss, GUE + 1 candidate)",
            frame: sized(&sc6, L4::Tcp(ACK)),
            vary: 0,
            action: XDP_TX,
            warm: vec![],
        },
        Case {
            name: "TCP v4 mid-flow CT miss (insert into 1M CT)",
            frame: sized(&tcp4, L4::Tcp(ACK)),
            vary: 26,
            action: XDP_TX,
            warm: vec![],
        },
    ]
}

/// Command-line options. The defaults are the method of the book's performance chapter: 5 runs
/// of 1,000,000 repetitions, CPU 1, the daemon's default conntrack sizes.
#[derive(Clone, clap::Parser)]
#[command(about = "Control- and data-plane benchmarks of lb (run as root)")]
struct Options {
    /// Skip the control-plane, health-check and multi-instance parts.
    #[arg(long)]
    data_only: bool,
    /// Only the health-check part.
    #[arg(long)]
    health_only: bool,
    /// Only the control-plane part (change to live, daemon start and memory at scale).
    #[arg(long)]
    control_only: bool,
    /// Only the daemon's start, restart and memory at scale (part of the control plane).
    #[arg(long)]
    scale_only: bool,
    /// The VIP counts of the scale part (the 1-VIP reference is always measured).
    #[arg(long, value_delimiter = ',', default_values_t = scale::VIPS)]
    scale_vips: Vec<usize>,
    /// Also run the scale part with this other `lb` binary (the build before a change;
    /// a file named `lb`, the memory figures check the process's name), alternating with
    /// this build's run by run, in the same table.
    #[arg(long)]
    scale_before: Option<std::path::PathBuf>,
    /// Only the multi-instance part (failover to router converged, per failure mode).
    #[arg(long)]
    fleet_only: bool,
    /// Only the conntrack walks (connection counts, `lb conn list`) of a full map.
    #[arg(long)]
    walk_only: bool,
    /// Only the remote API's request latency.
    #[arg(long)]
    api_only: bool,
    /// Keep the slow sections short (the API's: 20 requests of each kind instead of
    /// 200; the concurrent section's: at most 3 runs of 200,000 repetitions).
    #[arg(long)]
    quick: bool,
    /// Only the data plane on two CPUs at once (CPU 0 and CPU 1) against each alone:
    /// the scaling efficiency of each case.
    #[arg(long)]
    concurrent: bool,
    /// Skip the FIB next-hop modes.
    #[arg(long)]
    gateway_only: bool,
    /// Keep only data-plane cases whose name contains this text.
    #[arg(long)]
    case: Option<String>,
    /// Conntrack capacity (entries per family).
    #[arg(long, default_value_t = CT_CAPACITY)]
    ct: u32,
    /// SYN cache slots.
    #[arg(long, default_value_t = CT_SYN_CAPACITY)]
    syn: u32,
    /// Measure the case list this many times (to show the spread).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Runs per case (quick comparisons: many short runs, read the fastest-runs column).
    #[arg(long, env = "LB_BENCH_RUNS", default_value_t = 5)]
    runs: usize,
    /// Repetitions per run.
    #[arg(long, env = "LB_BENCH_REPEAT", default_value_t = 1_000_000)]
    repeat: u32,
    /// CPU the benchmark thread is pinned to.
    #[arg(long, env = "LB_BENCH_CPU", default_value_t = 1)]
    cpu: usize,
    /// Benchmark this build of the eBPF object (with the `test-harness` programs)
    /// instead of the embedded one: for quick comparisons of changes to lb-ebpf. The
    /// concurrent section measures both, the embedded object then this one, each round.
    #[arg(long)]
    object: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let opts = <Options as clap::Parser>::parse();
    if !lb_tests::is_root() {
        bail!("the data-plane benchmark loads XDP programs: run it as root");
    }
    if opts.health_only {
        health::cpu_cost()?;
        return health::detection_to_live();
    }
    if opts.control_only {
        return control_plane(&opts);
    }
    if opts.scale_only {
        return scale::daemon_scale(&scale_options(&opts));
    }
    if opts.fleet_only {
        return fleet::failover_times();
    }
    if opts.walk_only {
        return conntrack_walk(&opts);
    }
    if opts.api_only {
        return api::api_latency(opts.quick);
    }
    if opts.concurrent {
        return concurrent::two_cpus(&opts);
    }
    if !opts.data_only {
        control_plane(&opts)?;
        api::api_latency(opts.quick)?;
        observability(&opts)?;
        health::cpu_cost()?;
        health::detection_to_live()?;
        fleet::failover_times()?;
    }
    data_plane(&opts)?;
    concurrent::two_cpus(&opts)
}

/// Observability costs: a scrape of the metrics endpoint's content at 100 VIPs x 100
/// backends (time and size, both formats), and a walk of a full conntrack map.
fn observability(opts: &Options) -> anyhow::Result<()> {
    use lb::daemon::{
        metrics::{Recorder, Snapshot, encode},
        service::Service,
    };
    let mut file = String::from(
        "interface = \"lo\"\nmax_table_memory_mib = 64\n[encap]\nsource_v4 = \"192.0.2.1\"\n",
    );
    for v in 0..100u32 {
        file.push_str(&format!(
            "[[vip]]\naddress = \"203.0.{}.{}\"\nport = 80\nprotocol = \"tcp\"\ntable_size = 10007\n",
            v / 200,
            v % 200 + 1
        ));
        for b in 0..100u32 {
            file.push_str(&format!(
                "[[vip.backend]]\naddress = \"10.1.{v}.{}\"\n",
                b + 1
            ));
        }
    }
    let loaded = Config::from_toml(&file).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dp = KernelDataplane::load(LoadOptions {
        ct_capacity: 65_536,
        ct_syn_capacity: 16_384,
        ..LoadOptions::default()
    })?;
    let (mut service, _, _) = Service::start(
        Controller::new(dp),
        "bench.toml".into(),
        &loaded,
        [2, 0, 0, 0, 0, 1],
        "-".into(),
        None,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let recorder = Recorder::default();
    println!(
        "observability: metrics scrape at 100 VIPs x 100 backends (10,000 backend series each), median of 11"
    );
    println!();
    println!("| format | scrape: snapshot + encode (ms) | body (bytes) | samples |");
    println!("|---|---:|---:|---:|");
    for openmetrics in [false, true] {
        let mut times = Vec::new();
        let mut body = String::new();
        for _ in 0..11 {
            let started = std::time::Instant::now();
            let snapshot = Snapshot::take(&mut service, std::time::Duration::from_secs(600))?;
            body = encode(snapshot, &recorder, openmetrics).0;
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let samples = body.lines().filter(|l| !l.starts_with('#')).count();
        println!(
            "| {} | {:.1} | {} | {samples} |",
            if openmetrics {
                "OpenMetrics"
            } else {
                "Prometheus text 0.0.4"
            },
            times[times.len() / 2],
            body.len()
        );
    }
    println!();
    conntrack_walk(opts)
}

/// A walk of `CONNTRACK_V4` filled with `opts.ct` entries (by the program itself: new
/// mid-flow flows, one per repetition), plus the empty IPv6 map and the SYN cache.
fn conntrack_walk(opts: &Options) -> anyhow::Result<()> {
    use lb_dataplane::WalkSettings;
    let mut lb = Lb::with_ct(opts.ct, opts.syn);
    setup(&mut lb);
    let tcp4 = Flow::new(CLIENT4, 40000, VIP4, 80);
    let frame = sized(&tcp4, L4::Tcp(ACK));
    // Each repetition varies the source address: a new flow pinned into conntrack.
    lb.dp.bench_run(
        BenchTarget::LoadBalancer,
        &frame,
        26,
        None,
        opts.ct + opts.ct / 8,
    )?;
    let walker = lb.dp.take_conntrack_walker().context("the walker")?;
    let settings = WalkSettings {
        udp_timeout: std::time::Duration::from_secs(30),
        idle: std::time::Duration::from_secs(60),
        syn_window: WalkSettings::SYN_WINDOW,
    };
    let mut times = Vec::new();
    let mut entries = 0;
    for _ in 0..7 {
        let census = walker.walk(&settings)?;
        entries = census.v4_entries;
        times.push(census.took.as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let ms = times[times.len() / 2];
    let interval_ms = f64::from(lb::defaults::CONNECTIONS_INTERVAL_MS);
    println!(
        "conntrack walk (BPF_MAP_LOOKUP_BATCH, 8,192 entries per call): {entries} IPv4 entries \
         of {} + {} SYN cache slots, median of 7: {ms:.1} ms per walk, {:.2}% of one CPU at \
         the default interval of {interval_ms} ms",
        opts.ct,
        opts.syn,
        100.0 * ms / interval_ms
    );
    conn_list(&walker, &settings)?;
    println!();
    Ok(())
}

/// `lb conn list`'s walk of the same maps (median of 7): every entry matched and
/// counted, 1,000 kept (the default `--limit`); and a filter no entry passes.
fn conn_list(
    walker: &lb_dataplane::ConntrackWalker,
    settings: &lb_dataplane::WalkSettings,
) -> anyhow::Result<()> {
    let median = |keep: &dyn Fn(&lb_dataplane::ConnRow) -> bool| -> anyhow::Result<(f64, u64)> {
        let mut times = Vec::new();
        let mut walked = 0;
        for _ in 0..7 {
            let listing = walker.list(settings, true, keep, 1_000)?;
            walked = listing.walked;
            times.push(listing.took.as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        Ok((times[times.len() / 2], walked))
    };
    let (all, walked) = median(&|_| true)?;
    let (none, _) = median(&|r| r.backend_id == u32::MAX)?;
    println!(
        "lb conn list walk (BPF_MAP_LOOKUP_BATCH, filter per entry): {walked} entries, median \
         of 7: {all:.1} ms with every entry matching (1,000 kept), {none:.1} ms with none"
    );
    Ok(())
}

fn control_plane(opts: &Options) -> anyhow::Result<()> {
    change::change_to_live()?;
    scale::daemon_scale(&scale_options(opts))
}

/// The scale part's options.
fn scale_options(opts: &Options) -> scale::ScaleOptions {
    scale::ScaleOptions {
        vips: opts.scale_vips.clone(),
        before: opts.scale_before.clone(),
    }
}

/// Whether the traffic section `name` runs: no `--case`, or one that `name` contains.
fn wants(opts: &Options, name: &str) -> bool {
    opts.case.as_ref().is_none_or(|c| name.contains(c.as_str()))
}

fn data_plane(opts: &Options) -> anyhow::Result<()> {
    let mut lb = match &opts.object {
        None => Lb::with_ct(opts.ct, opts.syn),
        Some(path) => {
            let object =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let options = LoadOptions {
                ct_capacity: opts.ct,
                ct_syn_capacity: opts.syn,
                ..LoadOptions::default()
            };
            Lb::over(KernelDataplane::load_object_bytes(options, &object)?)
        }
    };
    setup(&mut lb);
    let ns = fib_namespace("lbbench").context("benchmark namespace")?;
    println!(
        "data plane: ns/packet by BPF_PROG_TEST_RUN, median of {} runs x {} repetitions, CPU {} pinned",
        opts.runs, opts.repeat, opts.cpu
    );
    let verified = lb.dp.verified_instructions(XDP_PROGRAM)?;
    let untraced = lb.dp.verified_instructions(UNTRACED_PROGRAM)?;
    let count = |n: Option<u32>| n.map_or_else(|| "?".to_owned(), |n| n.to_string());
    println!(
        "lb_xdp: {} instructions processed by the verifier ({} built without tracing)",
        count(verified),
        count(untraced)
    );
    println!(
        "{RARE_PROGRAM}: {} instructions processed by the verifier",
        count(lb.dp.verified_instructions(RARE_PROGRAM)?)
    );
    println!(
        "{FULL_PROGRAM}: {} instructions processed by the verifier",
        count(lb.dp.verified_instructions(FULL_PROGRAM)?)
    );
    println!();
    println!(
        "| case | next hop | lb_xdp (ns) | empty (ns) | over empty (ns) | fastest runs: lb_xdp - empty (ns) | built without tracing, over empty (ns) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let results = ns
        .enter(|| -> anyhow::Result<()> {
            lb_tests::pin_to_cpu(opts.cpu).context("pinning the benchmark thread")?;
            let lb0 = ifindex("lb0");
            ensure!(lb0 != 0, "lb0 missing in the benchmark namespace");
            // Next-hop modes: gateway MAC; FIB lookup on every packet; FIB result reused
            // for 100 ms (the default `nexthop.cache_ms`).
            for (mode, ifindex, cache_ns) in [
                ("gateway", None, 0),
                ("fib, no cache", Some(lb0), 0),
                ("fib, 100 ms cache", Some(lb0), 100_000_000),
            ] {
                let fib = ifindex.is_some();
                if opts.gateway_only && fib {
                    continue;
                }
                let mut cfg = default_config();
                if fib {
                    cfg.nexthop_mode = NEXTHOP_FIB;
                    cfg.nexthop_cache_ns = cache_ns;
                }
                lb.dp.set_config(&cfg)?;
                lb.dp.flush_conntrack()?;
                for case in (0..opts.rounds).flat_map(|_| cases()) {
                    if fib && case.action != XDP_TX
                        || opts
                            .case
                            .as_ref()
                            .is_some_and(|c| !case.name.contains(c.as_str()))
                    {
                        continue;
                    }
                    let t = run_case(&mut lb, &case, ifindex, opts)?;
                    println!(
                        "| {} | {mode} | {} | {} | {} | {} | {} |",
                        case.name, t.lb, t.empty, t.over, t.min_over, t.untraced_over
                    );
                }
            }
            lb.dp.set_config(&default_config())?;
            agent::rows(&mut lb, &ns, lb0, opts)?;
            if wants(opts, "SYN") {
                traffic::syns(&mut lb, opts)?;
            }
            if wants(opts, "handshake") {
                traffic::handshakes(&mut lb, opts)?;
            }
            if wants(opts, "flood") {
                traffic::flood(&mut lb, opts)?;
            }
            if wants(opts, "packet rate") {
                println!();
                match traffic::packet_rate(&mut lb, &ns, opts) {
                    Err(e) if traffic::live_frames_refused(&e) => println!(
                        "packet rate through XDP_TX: not measured: the kernel refuses \
                         BPF_F_TEST_XDP_LIVE_FRAMES here ({e})"
                    ),
                    result => result?,
                }
            }
            Ok(())
        })
        .context("entering the benchmark namespace")?;
    results?;
    drop(lb);
    if wants(opts, "flows") {
        println!();
        println!(
            "established flows drawn from a population (every repetition a conntrack hit), same harness:"
        );
        println!();
        println!(
            "| case | next hop | lb_xdp (ns) | empty (ns) | over empty (ns) | fastest runs: lb_xdp - empty (ns) | |"
        );
        println!("|---|---|---:|---:|---:|---:|---|");
        traffic::populations(opts)?;
    }
    if wants(opts, "entries") {
        entries::entries(opts)?;
    }
    Ok(())
}
