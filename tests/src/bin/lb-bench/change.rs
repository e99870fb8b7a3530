//! Change to live: 100 backend changes in a row through the controller and the kernel
//! data plane (unpinned, loaded in this process), cycling add a backend, drain one,
//! remove another active one, for one VIP with a table of M slots. Each change builds a
//! new table; each cycle of three leaves one active backend fewer, so the VIP starts
//! with N + 33 active backends and ends with N - 33 (N on average).
//!
//! Per change, timed around `Controller::apply`: the whole change (plan with the
//! Maglev build and the fingerprint, controller record, write the idle table buffer,
//! switch the VIP entry; for drain and remove also the RCU grace period and the backend
//! entry written after it), and from the change's report the build and the install
//! (waiting for readers of the idle buffer to leave it when the previous change used
//! it, writing it, switching). The table is live once the install is done; an add is
//! complete then, a drain or remove one grace period later. p50 and p99 over the 100
//! changes (p99 of 100 is the second slowest), and per kind p50 over its 33-34 changes;
//! the build alone (a `MaglevTable::build` of the same inputs in the same run) is the
//! yardstick.

use anyhow::Context as _;
use lb::{
    config::{BackendState, Config},
    controller::{Controller, Desired, VipChange},
};
use lb_dataplane::{KernelDataplane, LoadOptions};
use lb_maglev::{Backend, BackendKey, MaglevTable};

/// Changes measured per configuration.
const CHANGES: usize = 100;

/// The kinds of change, in the order they cycle.
const KINDS: [&str; 3] = ["add", "drain", "remove"];

/// Timings of one change, ms.
#[derive(Clone, Copy)]
struct Change {
    kind: usize,
    total: f64,
    build: f64,
    install: f64,
}

fn backend(i: u32) -> BackendKey {
    format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff)
        .parse()
        .expect("an IPv4 address")
}

fn config(size: u32, n: u32) -> anyhow::Result<Desired> {
    let mut text = format!(
        "interface = \"lo\"\nmax_table_memory_mib = 64\n[encap]\nsource_v4 = \"192.0.2.1\"\n[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\ntable_size = {size}\n"
    );
    for i in 1..=n {
        text.push_str(&format!("[[vip.backend]]\naddress = \"{}\"\n", backend(i)));
    }
    let loaded = Config::from_toml(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Desired::from_config(&loaded.config, [2, 0, 0, 0, 0, 1]))
}

/// The 100 changes for one VIP of `n` backends and `size` slots, and the build alone
/// (median, ms).
fn changes(size: u32, n: u32) -> anyhow::Result<(Vec<Change>, f64)> {
    let dp = KernelDataplane::load(LoadOptions {
        ct_capacity: 65_536,
        ct_syn_capacity: 16_384,
        ..LoadOptions::default()
    })?;
    let mut controller = Controller::new(dp);
    let first = n + u32::try_from(CHANGES / KINDS.len()).unwrap_or(0);
    let mut desired = config(size, first)?;
    controller
        .apply(&desired)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let vip = *desired.vips.keys().next().context("one VIP")?;
    let mut out = Vec::with_capacity(CHANGES);
    let mut builds = Vec::with_capacity(CHANGES);
    // Backends 1..=first are active; `oldest` is the lowest still active.
    let (mut next_new, mut oldest) = (first + 1, 1);
    for k in 0..CHANGES {
        let kind = k % KINDS.len();
        let edited = match kind {
            0 => {
                next_new += 1;
                desired.add_backend(&vip, backend(next_new - 1), 1)
            }
            1 => {
                oldest += 1;
                desired.set_backend(&vip, &backend(oldest - 1), BackendState::Drain, None)
            }
            _ => {
                oldest += 1;
                desired.remove_backend(&vip, &backend(oldest - 1))
            }
        };
        edited.map_err(|e| anyhow::anyhow!("{e}"))?;
        let started = std::time::Instant::now();
        let report = controller
            .apply(&desired)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let total = started.elapsed().as_secs_f64() * 1e3;
        let build = report
            .changes
            .iter()
            .find_map(|c| match c {
                VipChange::Table(t) => Some(t.build_ms),
                VipChange::Removed(_) => None,
            })
            .context("the change built a table")?;
        let install = report.swaps_ms.iter().sum();
        out.push(Change {
            kind,
            total,
            build,
            install,
        });
        // The yardstick: the same build alone.
        let inputs: Vec<Backend> = desired.vips[&vip]
            .backends
            .iter()
            .filter(|(_, b)| b.state == BackendState::Active)
            .map(|(k, b)| Backend::new(*k, b.weight))
            .collect();
        let started = std::time::Instant::now();
        MaglevTable::build(&inputs, size, desired.maglev_seed)?;
        builds.push(started.elapsed().as_secs_f64() * 1e3);
    }
    Ok((out, percentile(builds, 50)))
}

/// The `p`-th percentile (nearest rank) of `v`.
fn percentile(mut v: Vec<f64>, p: usize) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = (v.len() * p).div_ceil(100).max(1);
    v[rank - 1]
}

/// Prints the change-to-live table.
pub(crate) fn change_to_live() -> anyhow::Result<()> {
    println!(
        "control plane: change to live, {CHANGES} changes in a row cycling {} (each builds a table), through the controller and the kernel maps; ms",
        KINDS.join(", ")
    );
    println!();
    println!(
        "| table size M | backends N | change p50 | change p99 | add p50 | drain p50 | remove p50 | build in the change p50 | install (to live) p50 | build alone p50 (yardstick) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (size, n) in [(65_537, 100), (655_373, 1_000)] {
        let (changes, build_alone) = changes(size, n)?;
        let of = |f: fn(&Change) -> f64| changes.iter().map(f).collect::<Vec<_>>();
        let kind = |k: usize| {
            percentile(
                changes
                    .iter()
                    .filter(|c| c.kind == k)
                    .map(|c| c.total)
                    .collect(),
                50,
            )
        };
        println!(
            "| {size} | {n} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            percentile(of(|c| c.total), 50),
            percentile(of(|c| c.total), 99),
            kind(0),
            kind(1),
            kind(2),
            percentile(of(|c| c.build), 50),
            percentile(of(|c| c.install), 50),
            build_alone,
        );
    }
    println!();
    Ok(())
}
