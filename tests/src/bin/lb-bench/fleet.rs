//! The multi-instance benchmark: how long after an LB instance fails the router stops
//! sending it traffic, per failure mode, median of 5.
//!
//! Bed: `lb_tests::fleet` with three instances (BIRD on each and on the router, the
//! fleets chapter's configurations, BGP hold time 3 s, keepalive 1 s), 60 long-lived TCP
//! connections to the IPv4 VIP exchanging a line every 100 ms. Each round fails one
//! instance (the instances take turns), measures from the failing action to the moment
//! the router's kernel no longer lists the instance as a next hop of either VIP address
//! (polled with `ip -j route show` every few milliseconds), waits until every
//! connection exchanged again, restores the instance and measures until the router uses
//! it again. The connections' longest stall and the broken ones are reported too.
//!
//! Yardstick, same run: a host route removed directly in the router's kernel, seen by
//! the same poller (the floor of the measurement itself).
//!
//! Failure modes: the router's port goes down (the kernel drops the next hop at once);
//! the instance's BIRD is killed (the kernel closes its BGP connections, the router's
//! BIRD withdraws); the host falls silent (the router's port drops everything, carrier
//! up: the hold timer fires); the operator withdraws both addresses (`lb vip
//! withdraw`); `lb detach` after a plain stop (routes withdrawn, then the datapath
//! removed).
//!
//! Then the cases of issue 31 that a failure meets a table change in, with the second
//! chance on the IPv4 TCP VIP (`encap = "gue"`, `second_chance = true`), each round
//! with a backend of its own: the rejoin (an instance withdrawn, a backend added on
//! every instance, connections opened, the instance announced again; "converged" is
//! the withdrawal, "rejoined" the announcement), and an instance failing midway
//! through a rollout (its router port down once two of three instances switched to a
//! table with one more backend), rolling and in two phases (`lb reload --phase learn`
//! on every instance first). Their broken counts are the connections the second chance
//! did not save: 0 expected, except for the rolling change.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use lb_tests::{
    daemon::{BackendLine, BackendState},
    fleet::{
        Failure, FleetBed, FleetOptions,
        change::{
            applied_changes, change_everywhere, second_chance_keys, switch, with_second_chance,
        },
        flows::ROUND,
        instance4, tcp_vip,
    },
    packets::{VIP4, VIP6},
};

/// Rounds per failure mode.
const ROUNDS: usize = 5;
/// Long-lived connections per round.
const FLOWS: usize = 60;
/// Bound on every wait (not a target).
const TIMEOUT: Duration = Duration::from_secs(30);
/// The yardstick's host route: an unused address of the VIP range, inside the bed.
const PROBE_ROUTE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 99);

/// What one round measured.
struct Round {
    converged: Duration,
    rejoined: Duration,
    stall: Duration,
    broken: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Runs the benchmark and prints its table.
///
/// # Errors
/// When the bed cannot be built or a round does not converge.
pub(crate) fn failover_times() -> anyhow::Result<()> {
    let started = Instant::now();
    let mut bed = FleetBed::new(FleetOptions::default()).context("the fleet bed")?;
    println!(
        "fleet: instance failure -> the router stops using it (both VIP addresses), {} \
         instances, {FLOWS} connections, median of {ROUNDS} (min - max)",
        bed.instances().len()
    );
    println!();
    println!(
        "| failure | router converged (ms) | min - max (ms) | rejoined (ms) | longest stall (ms) | broken |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let floor: Vec<Duration> = (0..ROUNDS)
        .map(|_| yardstick(&bed))
        .collect::<anyhow::Result<_>>()?;
    row(
        "yardstick: a route removed in the router's kernel",
        &floor,
        None,
    );
    for failure in [
        Failure::RouterLinkDown,
        Failure::BirdKilled,
        Failure::HostSilent,
        Failure::Withdrawn,
        Failure::Detached,
    ] {
        let mut rounds = Vec::new();
        for r in 0..ROUNDS {
            let k = r % bed.instances().len() + 1;
            rounds.push(
                round(&mut bed, failure, k)
                    .with_context(|| format!("{}, round {r}", failure.name()))?,
            );
        }
        let converged: Vec<Duration> = rounds.iter().map(|r| r.converged).collect();
        row(failure.name(), &converged, Some(&rounds));
    }
    with_second_chance(&mut bed, rejoin_row)?;
    rollout_rows(&mut bed)?;
    println!();
    println!(
        "(bed built and measured in {:.0} s)",
        started.elapsed().as_secs_f64()
    );
    println!();
    Ok(())
}

fn row(name: &str, converged: &[Duration], rounds: Option<&[Round]>) {
    let min = converged.iter().min().copied().unwrap_or_default();
    let max = converged.iter().max().copied().unwrap_or_default();
    let (rejoined, stall, broken) = rounds.map_or_else(
        || (String::new(), String::new(), String::new()),
        |rs| {
            (
                format!("{:.1}", ms(median(rs.iter().map(|r| r.rejoined).collect()))),
                format!("{:.0}", ms(median(rs.iter().map(|r| r.stall).collect()))),
                rs.iter().map(|r| r.broken).sum::<usize>().to_string(),
            )
        },
    );
    println!(
        "| {name} | {:.1} | {:.1} - {:.1} | {rejoined} | {stall} | {broken} |",
        ms(median(converged.to_vec())),
        ms(min),
        ms(max)
    );
}

/// A host route added and removed in the router's kernel, timed by the same poller.
fn yardstick(bed: &FleetBed) -> anyhow::Result<Duration> {
    let route = format!("{PROBE_ROUTE}/32");
    let via = instance4(1).to_string();
    bed.router_ns().ip(&["route", "add", &route, "via", &via])?;
    let addr = IpAddr::from(PROBE_ROUTE);
    bed.wait_router(addr, TIMEOUT, |h| !h.is_empty())?;
    let removed = Instant::now();
    bed.router_ns().ip(&["route", "del", &route])?;
    let seen = bed.wait_router(addr, TIMEOUT, BTreeSet::is_empty)?;
    Ok(seen.duration_since(removed))
}

/// One failure of instance `k` and its restoration, under traffic.
fn round(bed: &mut FleetBed, failure: Failure, k: usize) -> anyhow::Result<Round> {
    let flows = bed.long_flows(FLOWS, false)?;
    if failure == Failure::Detached {
        // Not timed: a plain stop leaves the instance announced and forwarding.
        bed.stop_daemon(k)?;
    }
    let failed = Instant::now();
    bed.fail(k, failure)?;
    let gone4 = bed.wait_router(VIP4.into(), TIMEOUT, |h| !h.contains(&k))?;
    let gone6 = bed.wait_router(VIP6.into(), TIMEOUT, |h| !h.contains(&k))?;
    let gone = gone4.max(gone6);
    flows.wait_progress(gone, TIMEOUT)?;
    let restored = Instant::now();
    bed.restore(k, failure)?;
    let back4 = bed.wait_router(VIP4.into(), TIMEOUT, |h| h.contains(&k))?;
    let back6 = bed.wait_router(VIP6.into(), TIMEOUT, |h| h.contains(&k))?;
    let back = back4.max(back6);
    flows.wait_progress(back, TIMEOUT)?;
    let states = flows.finish();
    bed.wait_all_announced(TIMEOUT)?;
    Ok(measured(
        gone.duration_since(failed),
        back.duration_since(restored),
        &states,
    ))
}

/// The rejoin row (module documentation), with the second chance on.
fn rejoin_row(bed: &mut FleetBed) -> anyhow::Result<()> {
    let mut rounds = Vec::new();
    for r in 0..ROUNDS {
        let k = r % bed.instances().len() + 1;
        rounds.push(rejoin_round(bed, k).with_context(|| format!("rejoin, round {r}"))?);
    }
    let converged: Vec<Duration> = rounds.iter().map(|r| r.converged).collect();
    row(
        "rejoin: withdrawn, a backend added, announced again (second chance)",
        &converged,
        Some(&rounds),
    );
    Ok(())
}

/// The mid-rollout rows (module documentation): the second chance on, and every
/// instance reading its file on `lb reload` only, so that one can stay behind; both
/// undone afterwards.
fn rollout_rows(bed: &mut FleetBed) -> anyhow::Result<()> {
    change_everywhere(bed, |c| {
        c.top_level = "reload = \"signal\"\n".into();
        second_chance_keys(c, true);
    })?;
    let result = (|| {
        for (two_phase, name) in [
            (false, "mid-rollout failure, rolling (second chance)"),
            (true, "mid-rollout failure, two phases (second chance)"),
        ] {
            let mut rounds = Vec::new();
            for r in 0..ROUNDS {
                let k = r % bed.instances().len() + 1;
                rounds.push(
                    rollout_round(bed, k, two_phase)
                        .with_context(|| format!("{name}, round {r}"))?,
                );
            }
            let converged: Vec<Duration> = rounds.iter().map(|r| r.converged).collect();
            row(name, &converged, Some(&rounds));
        }
        Ok(())
    })();
    let reset = change_everywhere(bed, |c| {
        c.top_level.clear();
        second_chance_keys(c, false);
    });
    result.and(reset)
}

/// Waits until the router lists instance `k` for both VIP addresses (`present`) or for
/// neither; the later of the two moments.
fn wait_both(bed: &FleetBed, k: usize, present: bool) -> anyhow::Result<Instant> {
    let v4 = bed.wait_router(VIP4.into(), TIMEOUT, |h| h.contains(&k) == present)?;
    let v6 = bed.wait_router(VIP6.into(), TIMEOUT, |h| h.contains(&k) == present)?;
    Ok(v4.max(v6))
}

/// One rejoin after a change on instance `k`; every backend added is removed again.
fn rejoin_round(bed: &mut FleetBed, k: usize) -> anyhow::Result<Round> {
    let vip = tcp_vip(false);
    let before = bed.fingerprints(&vip)?;
    let flows = bed.long_flows(FLOWS, false)?;
    let failed = Instant::now();
    bed.fail(k, Failure::Withdrawn)?;
    let gone = wait_both(bed, k, false)?;
    flows.wait_progress(gone, TIMEOUT)?;
    let new = bed.add_backend()?;
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("add", &vip, new, None)?;
    }
    let fresh = bed.long_flows(FLOWS, false)?;
    let restored = Instant::now();
    bed.restore(k, Failure::Withdrawn)?;
    let back = wait_both(bed, k, true)?;
    flows.wait_progress(back, TIMEOUT)?;
    fresh.wait_progress(back, TIMEOUT)?;
    // Rounds enough for the flows ECMP moved back to cross the instance.
    std::thread::sleep(ROUND * 3);
    let mut states = flows.finish();
    states.extend(fresh.finish());
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("remove", &vip, new, None)?;
    }
    let after = bed.fingerprints(&vip)?;
    anyhow::ensure!(
        after.iter().all(|f| *f == before[0]),
        "fingerprints after removing b{new}: {after:?}"
    );
    bed.wait_all_announced(TIMEOUT)?;
    Ok(measured(
        gone.duration_since(failed),
        back.duration_since(restored),
        &states,
    ))
}

/// One rollout of a new backend in which instance `k` fails (router port down) once it
/// and another instance switched, the third (`k`'s successor) behind; with
/// `two_phase`, every instance learned first. The backend is removed again.
fn rollout_round(bed: &mut FleetBed, k: usize, two_phase: bool) -> anyhow::Result<Round> {
    let n = bed.instances().len();
    let lagging = k % n + 1;
    let flows = bed.long_flows(FLOWS, false)?;
    let new = bed.add_backend()?;
    let before = applied_changes(bed)?;
    bed.reconfigure(
        |c| {
            c.backends.push(BackendLine {
                k: new,
                weight: 1,
                state: BackendState::Active,
            });
        },
        |_| true,
    )?;
    if two_phase {
        for j in 1..=n {
            bed.daemon(j).cli(&["reload", "--phase", "learn"])?;
        }
    }
    for j in (1..=n).filter(|&j| j != lagging) {
        switch(bed, j, before[j - 1])?;
    }
    let mid = bed.long_flows(FLOWS, false)?;
    let failed = Instant::now();
    bed.fail(k, Failure::RouterLinkDown)?;
    let gone = wait_both(bed, k, false)?;
    flows.wait_progress(gone, TIMEOUT)?;
    mid.wait_progress(gone, TIMEOUT)?;
    std::thread::sleep(ROUND * 3);
    let restored = Instant::now();
    bed.restore(k, Failure::RouterLinkDown)?;
    let back = wait_both(bed, k, true)?;
    switch(bed, lagging, before[lagging - 1])?;
    flows.wait_progress(back, TIMEOUT)?;
    mid.wait_progress(back, TIMEOUT)?;
    std::thread::sleep(ROUND * 3);
    let mut states = flows.finish();
    states.extend(mid.finish());
    change_everywhere(bed, |c| c.backends.retain(|b| b.k != new))?;
    bed.wait_all_announced(TIMEOUT)?;
    Ok(measured(
        gone.duration_since(failed),
        back.duration_since(restored),
        &states,
    ))
}

/// A round's figures from its times and its connections' final states.
fn measured(
    converged: Duration,
    rejoined: Duration,
    states: &[lb_tests::fleet::flows::FlowState],
) -> Round {
    Round {
        converged,
        rejoined,
        stall: states.iter().map(|s| s.max_stall).max().unwrap_or_default(),
        broken: states.iter().filter(|s| s.broken.is_some()).count(),
    }
}
