//! Several load-balancer instances behind an ECMP router, their VIPs announced by BGP
//! through BIRD (the bed of `lb_tests::fleet`), with real TCP from clients behind the
//! router. The scenarios share one bed (BGP takes a second or two to converge each
//! time one is built), run in order, and each leaves it as it found it: three
//! instances announcing both VIP addresses, backends 1 to 3.
//!
//! - Spread: new connections reach every instance (per-instance packet counters) and
//!   every backend, each the backend the Maglev table predicts (`lb flow`), and all
//!   instances report the same table fingerprint.
//! - Failover, five ways (the router's port to an instance goes down; the instance's
//!   BIRD is killed; the host falls silent, so only the BGP hold timer notices; the
//!   operator withdraws the instance with `lb vip withdraw`; the instance's `lb run`
//!   stops, which keeps it announced and its pinned datapath forwarding, and then `lb
//!   detach` withdraws its routes and removes the datapath): 300 long-lived
//!   connections keep exchanging while one instance fails. The router stops using it
//!   within a bound (the time is printed; the benchmark measures it), no connection
//!   breaks, and the connections it carried now arrive at other instances, miss
//!   conntrack there, and are picked onto their old backend from the same table (the
//!   mid-flow path; BR-13.T5 in `docs/src/operations/failure-scenarios.md`: an instance change
//!   without a table change keeps the backend). Then the instance rejoins: its
//!   announcement returns, ECMP moves flows back, and they keep their backends.
//! - Health-gated announcement: an instance whose probes fail for every backend stops
//!   announcing (reason in `lb status`), the router stops using it, and it comes back
//!   when its probes pass again.
//! - A backend added on all instances while connections run, then an instance fails:
//!   the connections whose table slot moved to the new backend and whose conntrack pin
//!   was on the failed instance break (their new instance picks the new backend, which
//!   resets them): that is where consistent hashing alone cannot help (BR-13.T2, the
//!   conntrack miss after a table change). The count is printed next to the share
//!   `lb table diff` predicts; every connection that breaks had a moved slot (some
//!   were moved between the surviving instances by the router's rehash). The same
//!   with the second chance (issue 31, stage 3: `encap = "gue"`, `second_chance =
//!   true`, the backends' agents following the candidates): none breaks, printed beside
//!   the count without it.
//! - The same on a router with a resilient next-hop group (`tests/src/fleet/resilient.rs`:
//!   a static route through `ip nexthop ... type resilient`, which BIRD cannot install)
//!   instead of BIRD's hash-threshold multipath: no connection of the survivors changes
//!   instance (asserted; with hash-threshold they do, printed), so without the second
//!   chance exactly the failed instance's connections with a moved slot break, and with
//!   it none does.
//! - A backend removed, with the second chance: a backend added on every instance,
//!   connections opened, the backend removed on every instance, then an instance
//!   fails: the removed backend's connections break (expected); of the others none
//!   whose slot kept its owner does; those whose slot the removal moved back (the
//!   add had moved it between the other backends) may, and are counted apart.
//! - Two successive changes of the same slots (two backends added, one after the
//!   other) while connections stay idle (no packet) across both: then an instance
//!   fails and the idle connections send again. Without the second chance those of
//!   the failed instance whose slot moved break (printed); with it none does, those
//!   whose slot moved twice included (their count is asserted above zero).
//! - The rejoin case: an instance withdrawn, a backend added on every instance,
//!   connections opened, the instance announced again: without the second chance the
//!   connections the rehash brings to it with a moved slot break (printed); with it
//!   none does.
//! - An instance fails midway through a rollout (a backend written into every file,
//!   two of three instances switched with `lb reload`): rolling, the connections a
//!   switched instance opened on moved slots break where they reach the instance
//!   behind (printed); in two phases (`lb reload --phase learn` on every instance
//!   first) none does.
//! - One daemon dead (SIGKILL), then another instance's router port down, then both
//!   back (the port up, the daemon started again), with no table change: none breaks,
//!   some of the failed instance's connections pinned by the dead one's datapath.
//! - One daemon dead (SIGKILL, not restarted; its routes stay announced and its
//!   pinned datapath forwards by the old table), a backend added on the other two,
//!   then one of them fails: the connections opened on moved slots that reach the
//!   dead instance break (printed); with the remedy, `lb detach` of the dead instance
//!   before the change, none does.
//! - The remote API (issue 33): every instance serves it; from the router's namespace
//!   `lb --remote` reads one instance, `lb fleet status` finds the three in agreement
//!   (exit 0), `lb fleet apply` pushes a VIP set to all three, which then agree on the
//!   new tables; pushed to one instance only, the disagreement is reported (exit 1,
//!   the fingerprint named); a read-only token cannot push (exit 3, its role named);
//!   `lb fleet apply --two-phase` learns on all three, then switches all three.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    process::ExitCode,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use lb_tests::{
    daemon::{DaemonConfig, TempDir, backend_addr, backend_of, lb_binary},
    fleet::{
        Failure, FleetBed, FleetOptions, api_url,
        change::{applied_changes, change_everywhere, switch, with_second_chance},
        describe,
        flows::FlowState,
        instance4,
        resilient::{ResilientGroup, with_resilient},
        tcp_vip,
    },
    packets::{VIP4, VIP6},
    testbed::{backend_name, client},
    traffic::{Tally, within},
};
use libtest_mimic::{Arguments, Failed, Trial};

/// The bed, built by the first scenario that runs.
type Shared = Arc<Mutex<Option<Result<FleetBed, String>>>>;

/// The instances' API files (`main` makes them before any scenario runs).
static API_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Long-lived connections of the failover scenarios.
const LONG_FLOWS: usize = 300;
/// How long the router may take to stop (or start again) using an instance, and the
/// connections to make progress afterwards: a generous bound, not a target (the
/// benchmark measures the times).
const CONVERGE: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // One bed, one scenario at a time, in this order.
    args.test_threads = Some(1);
    let bed: Shared = Arc::new(Mutex::new(None));
    // The instances' API files, kept until the bed is gone.
    let api = TempDir::new("lb-fleet-api-").expect("a directory for the API's files");
    api_files(api.path(), 3);
    API_DIR.get_or_init(|| api.path().to_path_buf());
    let trials = vec![
        trial(&bed, "spread_over_instances_and_backends", spread),
        trial(&bed, "failover_router_link_down", |b| {
            failover(b, Failure::RouterLinkDown, 2)
        }),
        trial(&bed, "failover_bird_killed", |b| {
            failover(b, Failure::BirdKilled, 3)
        }),
        trial(&bed, "failover_host_silent_hold_timer", |b| {
            failover(b, Failure::HostSilent, 3)
        }),
        trial(&bed, "failover_operator_withdrawal", |b| {
            failover(b, Failure::Withdrawn, 1)
        }),
        trial(
            &bed,
            "daemon_stop_keeps_forwarding_then_detach_withdraws_first",
            |b| failover(b, Failure::Detached, 2),
        ),
        trial(&bed, "announcement_follows_usable_backends", health_gated),
        trial(&bed, "backend_added_then_instance_fails", |b| {
            backend_then_failure(b, false)
        }),
        trial(
            &bed,
            "backend_added_then_instance_fails_with_second_chance",
            |b| with_second_chance(b, |b| backend_then_failure(b, true)),
        ),
        trial(
            &bed,
            "backend_added_then_instance_fails_resilient_router",
            |b| {
                with_resilient(b, ResilientGroup::RECOMMENDED, |b| {
                    backend_then_failure(b, false)
                })
            },
        ),
        trial(
            &bed,
            "backend_added_then_instance_fails_resilient_router_with_second_chance",
            |b| {
                with_resilient(b, ResilientGroup::RECOMMENDED, |b| {
                    with_second_chance(b, |b| backend_then_failure(b, true))
                })
            },
        ),
        trial(
            &bed,
            "backend_removed_then_instance_fails_with_second_chance",
            |b| with_second_chance(b, backend_removed_then_failure),
        ),
        trial(
            &bed,
            "two_changes_of_a_slot_idle_flows_then_instance_fails",
            |b| two_changes_then_failure(b, false),
        ),
        trial(
            &bed,
            "two_changes_of_a_slot_idle_flows_then_instance_fails_with_second_chance",
            |b| with_second_chance(b, |b| two_changes_then_failure(b, true)),
        ),
        trial(&bed, "withdrawn_backend_added_then_rejoin", |b| {
            withdrawn_then_rejoin(b, false)
        }),
        trial(
            &bed,
            "withdrawn_backend_added_then_rejoin_with_second_chance",
            |b| with_second_chance(b, |b| withdrawn_then_rejoin(b, true)),
        ),
        trial(&bed, "rolling_change_then_instance_fails", |b| {
            rollout_then_failure(b, false)
        }),
        trial(&bed, "two_phase_rollout_then_instance_fails", |b| {
            rollout_then_failure(b, true)
        }),
        trial(
            &bed,
            "dead_daemon_then_another_instance_fails_then_both_back",
            dead_daemon_then_another_fails,
        ),
        trial(
            &bed,
            "dead_daemon_change_reaches_the_others_then_one_fails",
            |b| with_second_chance(b, |b| dead_daemon_then_failure(b, false)),
        ),
        trial(
            &bed,
            "dead_daemon_detached_first_change_then_one_fails",
            |b| with_second_chance(b, |b| dead_daemon_then_failure(b, true)),
        ),
        trial(&bed, "fleet_status_and_apply_from_the_router", fleet_api),
    ];
    let conclusion = libtest_mimic::run(&args, trials);
    // Tear the bed down before exiting (exit does not run destructors).
    drop(bed.lock().unwrap_or_else(PoisonError::into_inner).take());
    drop(api);
    conclusion.exit_code()
}

/// A scenario run on the shared bed (built on first use).
fn trial(
    bed: &Shared,
    name: &str,
    scenario: impl Fn(&mut FleetBed) -> anyhow::Result<()> + Send + 'static,
) -> Trial {
    let bed = Arc::clone(bed);
    Trial::test(name, move || {
        let mut guard = bed.lock().unwrap_or_else(PoisonError::into_inner);
        let built = guard.get_or_insert_with(|| {
            let started = Instant::now();
            let built = FleetBed::new(FleetOptions {
                api_dir: API_DIR.get().cloned(),
                ..FleetOptions::default()
            })
            .map_err(|e| format!("{e:#}"));
            if built.is_ok() {
                eprintln!(
                    "fleet: bed built, every instance announced, in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
            }
            built
        });
        let fleet = built
            .as_mut()
            .map_err(|e| Failed::from(format!("building the bed: {e}")))?;
        scenario(fleet).map_err(|e| {
            let state = describe(fleet);
            // The next scenario starts from the baseline again.
            let healed = match fleet.heal() {
                Ok(()) => String::new(),
                Err(h) => format!("\nhealing the bed failed too: {h:#}"),
            };
            Failed::from(format!("{e:#}\n{state}{healed}"))
        })
    })
}

/// A CA, a server certificate for every instance's address, and the two tokens, in
/// `dir` (made here with rcgen, never committed).
fn api_files(dir: &std::path::Path, instances: usize) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "lb fleet test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("CA");
    let key = KeyPair::generate().expect("key");
    let names: Vec<String> = (1..=instances).map(|k| instance4(k).to_string()).collect();
    let mut params = CertificateParams::new(names).expect("params");
    params.distinguished_name.push(DnType::CommonName, "lb");
    let cert = params.signed_by(&key, &ca).expect("certificate");
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).expect("write");
    write("ca.crt", ca.pem());
    write("server.crt", cert.pem());
    write("server.key", key.serialize_pem());
    write(
        "admin.token",
        "deploy-0123456789abcdef0123456789abcdef\n".into(),
    );
    write(
        "reader.token",
        "grafana-0123456789abcdef0123456789abcdef\n".into(),
    );
}

fn all(bed: &FleetBed) -> BTreeSet<usize> {
    (1..=bed.instances().len()).collect()
}

fn vip4() -> IpAddr {
    VIP4.into()
}

/// New connections of both families: spread over the instances and over the
/// backends, each on the backend the table predicts; one fingerprint everywhere.
fn spread(bed: &mut FleetBed) -> anyhow::Result<()> {
    for (v6, n) in [(false, 600), (true, 240)] {
        let vip = tcp_vip(v6);
        let fingerprints = bed.fingerprints(&vip)?;
        ensure!(
            fingerprints.iter().all(|f| *f == fingerprints[0]),
            "{vip}: the instances' tables differ: {fingerprints:?}"
        );
        let before: Vec<u64> = (1..=bed.instances().len())
            .map(|k| bed.counter(k, &vip, "packets"))
            .collect::<anyhow::Result<_>>()?;
        let timeout = bed.options().io_timeout;
        let dst = lb_tests::testbed::vip_tcp(v6);
        let answered: Vec<(SocketAddr, String)> = bed
            .client_ns()
            .enter(|| {
                bed.sources(n, v6)
                    .into_iter()
                    .map(|src| {
                        let mut conn = client::tcp_connect(src, dst, timeout)?;
                        let local = conn.local_addr()?;
                        Ok((local, conn.exchange("hello")?))
                    })
                    .collect::<std::io::Result<Vec<_>>>()
            })?
            .context("new connections through the router")?;
        // Every instance predicts the backend that answered.
        for k in 1..=bed.instances().len() {
            let daemon = bed.daemon(k);
            let mut wrong = 0;
            for (local, name) in &answered {
                let predicted = daemon
                    .flow(&vip, *local)?
                    .table_backend
                    .and_then(|b| backend_of(&b))
                    .map(backend_name);
                wrong += usize::from(predicted.as_deref() != Some(name.as_str()));
            }
            ensure!(
                wrong == 0,
                "{vip}: instance {k}'s table predicted another backend for {wrong} of {n} connections"
            );
        }
        let tally = Tally::of(answered.iter().map(|(_, b)| b.as_str()));
        let third = 1.0 / 3.0;
        for b in 1..=3 {
            ensure!(
                within(tally.share(&backend_name(b)), third, 0.35),
                "{vip}: backends {tally}"
            );
        }
        let carried: Vec<u64> = (1..=bed.instances().len())
            .map(|k| Ok(bed.counter(k, &vip, "packets")? - before[k - 1]))
            .collect::<anyhow::Result<_>>()?;
        let total: u64 = carried.iter().sum();
        eprintln!(
            "fleet: {vip}: {n} connections, backends {tally}; packets per instance {carried:?}"
        );
        for (i, c) in carried.iter().enumerate() {
            #[expect(clippy::cast_precision_loss, reason = "packet counts of a test")]
            let share = *c as f64 / total.max(1) as f64;
            ensure!(
                share > 0.1,
                "{vip}: instance {} carried {c} of {total} packets: ECMP does not spread",
                i + 1
            );
        }
    }
    Ok(())
}

/// The connections of `states` that broke, with why.
fn broken(states: &[FlowState]) -> Vec<(SocketAddr, String)> {
    states
        .iter()
        .filter_map(|s| s.broken.clone().map(|why| (s.local, why)))
        .collect()
}

fn longest_stall(states: &[FlowState]) -> Duration {
    states.iter().map(|s| s.max_stall).max().unwrap_or_default()
}

/// The instance holding each connection's pin (exactly one), with its backend.
fn carriers(bed: &FleetBed, locals: &[SocketAddr]) -> anyhow::Result<Vec<(usize, String)>> {
    let pins = bed.pins(&tcp_vip(false), locals)?;
    pins.into_iter()
        .zip(locals)
        .map(|(p, local)| match p.as_slice() {
            [one] => Ok(one.clone()),
            other => bail!("connection from {local}: pins on {other:?} (expected exactly one)"),
        })
        .collect()
}

/// 300 long-lived connections; instance `k` fails the `failure` way, then rejoins.
fn failover(bed: &mut FleetBed, failure: Failure, k: usize) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let flows = bed.long_flows(LONG_FLOWS, false)?;
    let locals = flows.locals();
    let carried = carriers(bed, &locals)?;
    let on_failed: Vec<usize> = (0..locals.len()).filter(|&i| carried[i].0 == k).collect();
    ensure!(
        !on_failed.is_empty(),
        "instance {k} carries none of {LONG_FLOWS} connections"
    );
    let survivors: Vec<usize> = all(bed).into_iter().filter(|&j| j != k).collect();
    let misses_before: u64 = survivors
        .iter()
        .map(|&j| bed.counter(j, &vip, "ct_misses_non_syn"))
        .sum::<anyhow::Result<u64>>()?;

    if failure == Failure::Detached {
        daemon_stop_keeps_serving(bed, &flows, k)?;
    }
    let failed_at = Instant::now();
    bed.fail(k, failure)?;
    let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&k) && !h.is_empty())?;
    bed.wait_router(VIP6.into(), CONVERGE, |h| !h.contains(&k))?;
    let converged = gone.duration_since(failed_at);
    flows
        .wait_progress(gone, CONVERGE)
        .context("traffic after the failover")?;
    let after_failover = flows.snapshot();
    let broken_failover = broken(&after_failover);
    let stall_failover = longest_stall(&after_failover);
    // The moved connections are now pinned on a survivor, to their old backend.
    let pins = bed.pins(&vip, &locals)?;
    let mut moved_ok = 0;
    for &i in &on_failed {
        let backend = &carried[i].1;
        if pins[i].iter().any(|(j, b)| *j != k && b == backend) {
            moved_ok += 1;
        }
    }
    let misses_after: u64 = survivors
        .iter()
        .map(|&j| bed.counter(j, &vip, "ct_misses_non_syn"))
        .sum::<anyhow::Result<u64>>()?;

    let rejoin_at = Instant::now();
    bed.restore(k, failure)?;
    let back = bed.wait_router(vip4(), CONVERGE, |h| h.contains(&k))?;
    bed.wait_router(VIP6.into(), CONVERGE, |h| h.contains(&k))?;
    let rejoined = back.duration_since(rejoin_at);
    let packets_back = bed.counter(k, &vip, "packets")?;
    flows
        .wait_progress(back, CONVERGE)
        .context("traffic after the rejoin")?;
    // Two more rounds of exchanges, so that ECMP's moved-back flows did cross it.
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let packets_after = bed.counter(k, &vip, "packets")?;
    let states = flows.finish();
    let broken_total = broken(&states);
    eprintln!(
        "fleet: {}: instance {k} carried {} of {LONG_FLOWS} connections; router stopped using it \
         after {:.1} ms; broken {} (after the failover), longest stall {:.0} ms; {} of them pinned \
         again on a survivor to their old backend, survivors' mid-flow misses +{}; rejoined after \
         {:.1} ms, broken in all {}, longest stall {:.0} ms, instance {k} forwarded {} packets after \
         the rejoin",
        failure.name(),
        on_failed.len(),
        converged.as_secs_f64() * 1e3,
        broken_failover.len(),
        stall_failover.as_secs_f64() * 1e3,
        moved_ok,
        misses_after - misses_before,
        rejoined.as_secs_f64() * 1e3,
        broken_total.len(),
        longest_stall(&states).as_secs_f64() * 1e3,
        packets_after - packets_back,
    );
    ensure!(
        broken_total.is_empty(),
        "{}: {} connections broke: {:?}",
        failure.name(),
        broken_total.len(),
        &broken_total[..broken_total.len().min(10)]
    );
    ensure!(
        moved_ok == on_failed.len(),
        "only {moved_ok} of the {} connections of instance {k} are pinned on a survivor to their old backend",
        on_failed.len()
    );
    ensure!(
        misses_after - misses_before >= on_failed.len() as u64,
        "the survivors saw {} mid-flow conntrack misses for {} moved connections",
        misses_after - misses_before,
        on_failed.len()
    );
    ensure!(
        packets_after > packets_back,
        "instance {k} forwarded nothing after it rejoined"
    );
    if failure == Failure::Withdrawn {
        // Withdrawn for maintenance, the instance said so until it was announced again.
        let status = bed.daemon(k).status()?;
        ensure!(
            status
                .announce
                .addresses
                .iter()
                .all(|a| a.announced && !a.withdrawn_by_operator)
        );
    }
    bed.wait_all_announced(CONVERGE)
}

/// A plain stop of instance `k`'s daemon: its routes stay, the router keeps sending
/// it traffic, and its pinned datapath keeps forwarding (every connection, its own
/// too, makes progress while no daemon runs there).
fn daemon_stop_keeps_serving(
    bed: &mut FleetBed,
    flows: &lb_tests::fleet::flows::LongFlows,
    k: usize,
) -> anyhow::Result<()> {
    let log = bed.stop_daemon(k)?;
    ensure!(
        log.contains("routes kept in table"),
        "the stopped daemon did not say it kept its routes; its log:\n{log}"
    );
    // Long enough for a withdrawal to reach the router, had there been one.
    std::thread::sleep(Duration::from_millis(1500));
    for addr in [vip4(), VIP6.into()] {
        let hops = bed.router_nexthops(addr)?;
        ensure!(
            hops.contains(&k),
            "{addr}: the router stopped using instance {k} when its daemon stopped: {hops:?}"
        );
    }
    flows
        .wait_progress(Instant::now(), CONVERGE)
        .with_context(|| format!("traffic while instance {k}'s daemon is stopped"))?;
    eprintln!(
        "fleet: instance {k}'s daemon stopped: still announced, its pinned datapath forwards"
    );
    Ok(())
}

/// Health probes on every instance; instance 1's probes fail for every backend, so it
/// stops announcing, and comes back when they pass again.
fn health_gated(bed: &mut FleetBed) -> anyhow::Result<()> {
    let vips = [tcp_vip(false), lb_tests::daemon::vip_text(false, false)];
    let probed = |on: bool| move |s: &lb::control::Status| (s.health.probed > 0) == on;
    let health = format!(
        "kind = \"tcp\"\nport = {}\ninterval_ms = 200\ntimeout_ms = 100\nfall = 2\nrise = 2\n",
        lb_tests::fleet::HEALTH_PORT
    );
    bed.reconfigure(
        |c| {
            c.vip_health = [false, true]
                .into_iter()
                .flat_map(|v6| [true, false].map(|tcp| lb_tests::daemon::vip_text(v6, tcp)))
                .map(|v| (v, health.clone()))
                .collect();
        },
        probed(true),
    )?;
    let result = (|| -> anyhow::Result<()> {
        let blocked_at = Instant::now();
        let block = bed.block_probes(1)?;
        let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&1))?;
        bed.wait_router(VIP6.into(), CONVERGE, |h| !h.contains(&1))?;
        let status = bed.daemon(1).status()?;
        for vip in &vips {
            let v = status
                .vips
                .iter()
                .find(|s| s.vip == *vip)
                .context("VIP in status")?;
            let a = v.announce.as_ref().context("announcement in status")?;
            ensure!(
                !a.announced && !a.servable && a.reason.contains("unhealthy"),
                "{vip}: {a:?}"
            );
        }
        // New connections go to the other instances only.
        let before = bed.counter(1, &tcp_vip(false), "packets")?;
        let timeout = bed.options().io_timeout;
        let dst = lb_tests::testbed::vip_tcp(false);
        let sources = bed.sources(60, false);
        bed.client_ns()
            .enter(|| {
                sources
                    .iter()
                    .map(|&src| client::tcp_exchange(src, dst, "hello", timeout))
                    .collect::<std::io::Result<Vec<_>>>()
            })?
            .context("connections while instance 1 is withdrawn")?;
        ensure!(
            bed.counter(1, &tcp_vip(false), "packets")? == before,
            "the withdrawn instance still got new connections"
        );
        let unblocked_at = Instant::now();
        drop(block);
        let back = bed.wait_router(vip4(), CONVERGE, |h| h.contains(&1))?;
        bed.wait_router(VIP6.into(), CONVERGE, |h| h.contains(&1))?;
        eprintln!(
            "fleet: probes blocked on instance 1: withdrawn after {:.0} ms, back {:.0} ms after \
             they passed again (fall 2, rise 2, every 200 ms)",
            gone.duration_since(blocked_at).as_secs_f64() * 1e3,
            back.duration_since(unblocked_at).as_secs_f64() * 1e3
        );
        Ok(())
    })();
    bed.reconfigure(|c| c.vip_health.clear(), probed(false))?;
    result?;
    bed.wait_all_announced(CONVERGE)
}

/// `lb table diff --json` of the table before and after adding backend `new` (offline,
/// with the daemons' defaults): the share of slots that changed owner.
fn predicted_share(old: &[u8], new: u8) -> anyhow::Result<f64> {
    let list = |ks: &[u8]| {
        ks.iter()
            .map(|&k| backend_addr(k, false).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut with_new = old.to_vec();
    with_new.push(new);
    let out = std::process::Command::new(lb_binary())
        .args(["table", "diff", "--json", "--old", &list(old), "--new"])
        .arg(list(&with_new))
        .output()
        .context("running lb table diff")?;
    ensure!(
        out.status.success(),
        "lb table diff: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("lb table diff --json")?;
    json.get("changed_fraction")
        .and_then(serde_json::Value::as_f64)
        .context("no changed_fraction in lb table diff --json")
}

/// Broken connections of the scenarios without the second chance, by scenario
/// (`usize::MAX` until it ran), printed beside the count with it.
static TODAY_BROKEN: [AtomicUsize; 5] = [const { AtomicUsize::new(usize::MAX) }; 5];
/// [`TODAY_BROKEN`]'s index of `backend_then_failure`, of `withdrawn_then_rejoin`, of
/// `two_changes_then_failure`, and of `backend_then_failure` with the router's
/// resilient group; at [`HASH_THRESHOLD_SHUFFLED`], not a broken count but the
/// survivors' connections that changed instance in `backend_then_failure` (the router's
/// hash-threshold multipath, no second chance).
const BACKEND_THEN_FAILURE: usize = 0;
const WITHDRAWN_THEN_REJOIN: usize = 1;
const TWO_CHANGES: usize = 2;
const BACKEND_THEN_FAILURE_RESILIENT: usize = 3;
const HASH_THRESHOLD_SHUFFLED: usize = 4;

/// Today's count of scenario `which`, as text.
fn today(which: usize) -> String {
    match TODAY_BROKEN[which].load(Ordering::Relaxed) {
        usize::MAX => "not run".to_owned(),
        n => n.to_string(),
    }
}

/// A backend added on every instance while connections run, then an instance fails:
/// the broken connections are exactly those whose slot moved and whose instance
/// changed. With the second chance (`second_chance`), none breaks: each reaches the
/// new owner with its old backend as the candidate, and the agent there hands it on.
fn backend_then_failure(bed: &mut FleetBed, second_chance: bool) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let k = 1;
    let flows = bed.long_flows(LONG_FLOWS, false)?;
    let locals = flows.locals();
    let carried = carriers(bed, &locals)?;
    let before = bed.fingerprints(&vip)?;
    let new = bed.add_backend()?;
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("add", &vip, new, None)?;
    }
    let after = bed.fingerprints(&vip)?;
    ensure!(
        after.iter().all(|f| *f == after[0]) && after[0] != before[0],
        "fingerprints after the add: {after:?} (before {before:?})"
    );
    let share = predicted_share(&[1, 2, 3], new)?;
    // A connection's slot moved when the new table gives it another backend than its pin.
    let mut moved = BTreeSet::new();
    for (i, local) in locals.iter().enumerate() {
        let table = bed
            .daemon(carried[i].0)
            .flow(&vip, *local)?
            .table_backend
            .context("table backend")?;
        if table != carried[i].1 {
            moved.insert(i);
        }
    }
    // The pins hold while every instance is up.
    let changed_at = Instant::now();
    flows.wait_progress(changed_at, CONVERGE)?;
    ensure!(
        broken(&flows.snapshot()).is_empty(),
        "connections broke at the table change"
    );

    let failed_at = Instant::now();
    bed.fail(k, Failure::RouterLinkDown)?;
    let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&k) && !h.is_empty())?;
    flows.wait_progress(gone, CONVERGE)?;
    let states = flows.snapshot();
    let broke: BTreeMap<usize, String> = states
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.broken.clone().map(|w| (i, w)))
        .collect();
    let on_failed: BTreeSet<usize> = (0..locals.len()).filter(|&i| carried[i].0 == k).collect();
    let must_break: BTreeSet<usize> = moved.intersection(&on_failed).copied().collect();
    let broke_set: BTreeSet<usize> = broke.keys().copied().collect();
    let between_survivors: BTreeSet<usize> = broke_set.difference(&must_break).copied().collect();
    let shuffled = shuffled(bed, &locals, &carried, k, &broke_set)?;

    bed.restore(k, Failure::RouterLinkDown)?;
    let back = bed.wait_router(vip4(), CONVERGE, |h| h.contains(&k))?;
    flows.wait_progress(back, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let final_states = flows.finish();
    let broke_after_rejoin = broken(&final_states).len() - broke.len();
    #[expect(clippy::cast_precision_loss, reason = "connection counts")]
    let predicted = on_failed.len() as f64 * share;
    let (router, today_index) = router_note(bed);
    eprintln!(
        "fleet: {router}{}backend b{new} added on every instance: lb table diff predicts \
         {:.2}% of slots moved; {} of {LONG_FLOWS} connections had their slot moved; instance \
         {k} (link down) carried {}, {} of them with a moved slot; {shuffled} of the \
         survivors' {} changed instance; broken: {} (predicted {:.1} = {} x {:.4}; {} of them \
         moved between surviving instances by the ECMP rehash); broken at the rejoin: {} more; \
         failover after {:.1} ms",
        if second_chance {
            format!(
                "with the second chance (without it: {} broken): ",
                today(today_index)
            )
        } else {
            String::new()
        },
        share * 100.0,
        moved.len(),
        on_failed.len(),
        must_break.len(),
        locals.len() - on_failed.len(),
        broke.len(),
        predicted,
        on_failed.len(),
        share,
        between_survivors.len(),
        broke_after_rejoin,
        gone.duration_since(failed_at).as_secs_f64() * 1e3,
    );
    if second_chance {
        ensure!(
            !must_break.is_empty(),
            "no connection with a moved slot was on the failed instance: the test proves nothing"
        );
        ensure!(
            broke.is_empty() && broke_after_rejoin == 0,
            "with the second chance, connections broke: {broke:?}, {broke_after_rejoin} at the rejoin"
        );
    } else {
        TODAY_BROKEN[today_index].store(broke.len(), Ordering::Relaxed);
    }
    settle_router(bed, second_chance, shuffled, broke_set == must_break)?;
    ensure!(
        must_break.is_subset(&broke_set) || second_chance,
        "connections with a moved slot pinned on the failed instance survived: {:?}",
        must_break.difference(&broke_set).collect::<Vec<_>>()
    );
    ensure!(
        broke_set.is_subset(&moved),
        "connections whose slot did not move broke: {:?}",
        broke_set
            .difference(&moved)
            .map(|i| (&locals[*i], &broke[i]))
            .collect::<Vec<_>>()
    );
    remove_backend(bed, new, &before[0])
}

/// How `backend_then_failure`'s report names the router (nothing for BIRD's
/// hash-threshold multipath), and its [`TODAY_BROKEN`] index.
fn router_note(bed: &FleetBed) -> (String, usize) {
    match bed.resilient() {
        Some(g) => (
            format!(
                "router by a resilient group ({} buckets; with hash-threshold {} of the \
                 survivors' connections changed instance): ",
                g.buckets,
                today(HASH_THRESHOLD_SHUFFLED)
            ),
            BACKEND_THEN_FAILURE_RESILIENT,
        ),
        None => (String::new(), BACKEND_THEN_FAILURE),
    }
}

/// `backend_then_failure`'s checks of the router. With the resilient group only the
/// failed instance's buckets move: none of the survivors' connections changes instance
/// (`shuffled`), so without the second chance the broken ones are exactly the failed
/// instance's with a moved slot (`exact`). With hash-threshold, `shuffled` is kept for
/// the resilient run's report.
fn settle_router(
    bed: &FleetBed,
    second_chance: bool,
    shuffled: usize,
    exact: bool,
) -> anyhow::Result<()> {
    if bed.resilient().is_none() {
        if !second_chance {
            TODAY_BROKEN[HASH_THRESHOLD_SHUFFLED].store(shuffled, Ordering::Relaxed);
        }
        return Ok(());
    }
    ensure!(
        shuffled == 0,
        "with the resilient group, {shuffled} of the survivors' connections changed instance"
    );
    ensure!(
        second_chance || exact,
        "with the resilient group, the broken connections are not exactly the failed \
         instance's with a moved slot"
    );
    Ok(())
}

/// Of the connections `locals` that instance `k` did not carry (`carried`, as
/// [`carriers`] found them before it failed), how many changed instance at its failure:
/// those broken (`broke`, indexes into `locals`) or pinned now on another survivor than
/// their own.
fn shuffled(
    bed: &FleetBed,
    locals: &[SocketAddr],
    carried: &[(usize, String)],
    k: usize,
    broke: &BTreeSet<usize>,
) -> anyhow::Result<usize> {
    let pins = bed.pins(&tcp_vip(false), locals)?;
    Ok((0..locals.len())
        .filter(|&i| carried[i].0 != k)
        .filter(|&i| {
            broke.contains(&i) || pins[i].iter().any(|(j, _)| *j != k && *j != carried[i].0)
        })
        .count())
}

/// Back to the baseline: backend `new` out of the IPv4 TCP VIP everywhere, and the
/// table `fingerprint` again.
fn remove_backend(bed: &mut FleetBed, new: u8, fingerprint: &str) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("remove", &vip, new, None)?;
    }
    let restored = bed.fingerprints(&vip)?;
    ensure!(
        restored.iter().all(|f| f == fingerprint),
        "fingerprints after removing b{new}: {restored:?}"
    );
    bed.wait_all_announced(CONVERGE)
}

/// Connections of the backend-removal scenario.
const REMOVAL_FLOWS: usize = 150;

/// Which backend's name, if any, each connection of `states` ([`FlowState`]'s
/// `backend`) moves to in instance `k`'s table now: `Some(name)` when the table gives
/// its slot another backend than the one that first answered it.
fn table_moves(
    bed: &FleetBed,
    k: usize,
    states: &[FlowState],
) -> anyhow::Result<Vec<Option<String>>> {
    let vip = tcp_vip(false);
    states
        .iter()
        .map(|s| {
            let table = bed
                .daemon(k)
                .flow(&vip, s.local)?
                .table_backend
                .and_then(|b| backend_of(&b))
                .map(backend_name)
                .context("the table's backend")?;
            Ok((table != s.backend).then_some(table))
        })
        .collect()
}

/// Issue 31's row "a backend removed", with the second chance on: backend `new` added on
/// every instance, connections opened (some on `new`), `new` removed on every instance,
/// then instance 1's router port goes down. The connections of the removed backend
/// break (expected: it is gone, and a removed backend is never a candidate). Of the
/// others, none whose slot kept its owner breaks (asserted). A few slots moved at the
/// add between the remaining backends (X to Y) and move back at the removal: the slot
/// then names X as owner and clean owner, Y is forgotten (rule SC5), and a connection
/// opened on Y in between breaks if ECMP moves it. Those are counted apart (printed),
/// and only they may break (asserted).
fn backend_removed_then_failure(bed: &mut FleetBed) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let k = 1;
    let before = bed.fingerprints(&vip)?;
    let new = bed.add_backend()?;
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("add", &vip, new, None)?;
    }
    let flows = bed.long_flows(REMOVAL_FLOWS, false)?;
    let gone_name = backend_name(new);
    let of_removed: BTreeSet<usize> = flows
        .snapshot()
        .iter()
        .enumerate()
        .filter_map(|(i, s)| (s.backend == gone_name).then_some(i))
        .collect();
    ensure!(
        !of_removed.is_empty(),
        "no connection reached b{new}: the test proves nothing"
    );
    let removed_at = Instant::now();
    remove_backend(bed, new, &before[0])?;
    flows.wait_progress(removed_at, CONVERGE)?;
    let moved_back: BTreeSet<usize> = table_moves(bed, k, &flows.snapshot())?
        .iter()
        .enumerate()
        .filter_map(|(i, m)| (m.is_some() && !of_removed.contains(&i)).then_some(i))
        .collect();

    let failed_at = Instant::now();
    bed.fail(k, Failure::RouterLinkDown)?;
    let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&k) && !h.is_empty())?;
    flows.wait_progress(gone, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    bed.restore(k, Failure::RouterLinkDown)?;
    let back = bed.wait_router(vip4(), CONVERGE, |h| h.contains(&k))?;
    flows.wait_progress(back, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let states = flows.finish();
    let broke: Vec<usize> = (0..states.len())
        .filter(|&i| states[i].broken.is_some())
        .collect();
    let (broke_removed, broke_others): (Vec<usize>, Vec<usize>) =
        broke.iter().partition(|i| of_removed.contains(i));
    let (broke_moved_back, broke_kept): (Vec<usize>, Vec<usize>) =
        broke_others.iter().partition(|i| moved_back.contains(i));
    eprintln!(
        "fleet: with the second chance: b{new} added on every instance, {REMOVAL_FLOWS} \
         connections opened ({} on b{new}), b{new} removed on every instance, instance {k} \
         (link down) failed after {:.1} ms and rejoined: broken {} of the {} on b{new} \
         (expected), {} of the {} others whose slot kept its owner, {} of the {} others whose \
         slot the removal moved back (their owner forgotten, rule SC5)",
        of_removed.len(),
        gone.duration_since(failed_at).as_secs_f64() * 1e3,
        broke_removed.len(),
        of_removed.len(),
        broke_kept.len(),
        REMOVAL_FLOWS - of_removed.len() - moved_back.len(),
        broke_moved_back.len(),
        moved_back.len(),
    );
    ensure!(
        broke_kept.is_empty(),
        "connections of other backends than the removed b{new}, their slot unmoved, broke: {:?}",
        broke_kept
            .iter()
            .map(|&i| (states[i].local, &states[i].backend, &states[i].broken))
            .collect::<Vec<_>>()
    );
    ensure!(
        broke_removed.len() == of_removed.len(),
        "connections of the removed b{new} survived: {} of {}",
        of_removed.len() - broke_removed.len(),
        of_removed.len()
    );
    Ok(())
}

/// Connections held idle across both changes of the two-changes scenario.
const IDLE_FLOWS: usize = 300;
/// Connections kept busy meanwhile.
const BUSY_FLOWS: usize = 150;

/// Issue 31's row "two successive changes of the same slot with a flow idle across
/// both". Connections are opened on backends 1 to 3, then
/// [`IDLE_FLOWS`] of them fall silent while backend `a` and then backend `b` are added
/// on every instance; some slots move twice (owner X, then `a`, then `b`). A dirty slot
/// keeps the clean owner it had when it was last clean (`SlotState::marked`), so after
/// the second change such a slot names `b` as owner and still X as clean owner: `a` is
/// forgotten (rule SC5), and the idle connection, pinned to X, can still be found. The
/// cleaning cannot turn the slot clean between the changes: it waits for the quiet time
/// (at least the TCP idle time, two hours). Then the instance carrying the most such
/// connections fails and the idle ones send again: with the second chance
/// (`second_chance`) none breaks (asserted); without it, those of the failed instance
/// whose slot moved break (printed).
fn two_changes_then_failure(bed: &mut FleetBed, second_chance: bool) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let before = bed.fingerprints(&vip)?;
    let idle = bed.long_flows(IDLE_FLOWS, false)?;
    let busy = bed.long_flows(BUSY_FLOWS, false)?;
    let locals = idle.locals();
    let carried = carriers(bed, &locals)?;
    idle.pause(CONVERGE)?;
    let silent_at = Instant::now();
    let a = bed.add_backend()?;
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("add", &vip, a, None)?;
    }
    let middle = bed.fingerprints(&vip)?;
    let first = table_moves(bed, 1, &idle.snapshot())?;
    let b = bed.add_backend()?;
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("add", &vip, b, None)?;
    }
    let second = table_moves(bed, 1, &idle.snapshot())?;
    // Moved twice: another backend after the first change, and yet another after the
    // second.
    let twice: Vec<usize> = (0..locals.len())
        .filter(|&i| matches!((&first[i], &second[i]), (Some(x), Some(y)) if x != y))
        .collect();
    let once = (0..locals.len()).filter(|&i| second[i].is_some()).count() - twice.len();
    let per_instance = |k: usize| twice.iter().filter(|&&i| carried[i].0 == k).count();
    let k = (1..=bed.instances().len())
        .max_by_key(|&k| per_instance(k))
        .context("instances")?;
    ensure!(
        per_instance(k) > 0,
        "no idle connection's slot moved twice on instance {k}: the test proves nothing \
         ({} moved twice in all)",
        twice.len()
    );
    busy.wait_progress(silent_at, CONVERGE)?;

    let failed_at = Instant::now();
    bed.fail(k, Failure::RouterLinkDown)?;
    let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&k) && !h.is_empty())?;
    busy.wait_progress(gone, CONVERGE)?;
    let idle_for = silent_at.elapsed();
    let resumed_at = Instant::now();
    idle.resume();
    idle.wait_progress(resumed_at, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let broke_failover = broken(&idle.snapshot());
    bed.restore(k, Failure::RouterLinkDown)?;
    let back = bed.wait_router(vip4(), CONVERGE, |h| h.contains(&k))?;
    idle.wait_progress(back, CONVERGE)?;
    busy.wait_progress(back, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let idle_states = idle.finish();
    let broke_idle = broken(&idle_states);
    let broke_twice = twice
        .iter()
        .filter(|&&i| idle_states[i].broken.is_some())
        .count();
    let broke_busy = broken(&busy.finish());
    eprintln!(
        "fleet: {}{IDLE_FLOWS} connections idle for {:.1} s across two \
         changes (b{a}, then b{b} added on every instance), {BUSY_FLOWS} busy: {} idle ones' \
         slots moved twice ({} of them on instance {k}), {once} once; instance {k} (link down) \
         failed after {:.1} ms, then the idle ones sent again: broken {} of {IDLE_FLOWS} idle \
         after the failover ({broke_twice} of the twice-moved), {} in all with the rejoin, {} \
         of {BUSY_FLOWS} busy",
        if second_chance {
            format!(
                "with the second chance (without it: {} broken): ",
                today(TWO_CHANGES)
            )
        } else {
            String::new()
        },
        idle_for.as_secs_f64(),
        twice.len(),
        per_instance(k),
        gone.duration_since(failed_at).as_secs_f64() * 1e3,
        broke_failover.len(),
        broke_idle.len(),
        broke_busy.len(),
    );
    if second_chance {
        ensure!(
            broke_idle.is_empty() && broke_busy.is_empty(),
            "connections broke: idle {:?}, busy {:?}",
            &broke_idle[..broke_idle.len().min(10)],
            &broke_busy[..broke_busy.len().min(10)]
        );
    } else {
        TODAY_BROKEN[TWO_CHANGES].store(broke_idle.len() + broke_busy.len(), Ordering::Relaxed);
    }
    remove_backend(bed, b, &middle[0])?;
    remove_backend(bed, a, &before[0])
}

/// Connections opened after the change in the rejoin scenario.
const FRESH_FLOWS: usize = 60;

/// The rejoin case: instance 1 withdrawn (its connections move to the
/// survivors and are pinned there), a backend added on every instance (the withdrawn
/// one too), connections opened, instance 1 announced again: the router's rehash
/// brings connections pinned on a survivor to instance 1, which has no pin for them
/// and whose table moved some of their slots. Without the second chance those break
/// (printed); with it none does.
fn withdrawn_then_rejoin(bed: &mut FleetBed, second_chance: bool) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let k = 1;
    let flows = bed.long_flows(LONG_FLOWS, false)?;
    let locals = flows.locals();
    let before = bed.fingerprints(&vip)?;
    bed.fail(k, Failure::Withdrawn)?;
    let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&k) && !h.is_empty())?;
    flows.wait_progress(gone, CONVERGE)?;
    let new = bed.add_backend()?;
    for j in 1..=bed.instances().len() {
        bed.daemon(j).backend("add", &vip, new, None)?;
    }
    // A connection is at risk when the new table gives its slot another backend.
    let answered: Vec<String> = flows.snapshot().into_iter().map(|s| s.backend).collect();
    let mut moved = 0;
    for (i, local) in locals.iter().enumerate() {
        let table = bed
            .daemon(k)
            .flow(&vip, *local)?
            .table_backend
            .and_then(|b| backend_of(&b))
            .map(backend_name);
        moved += usize::from(table.as_deref() != Some(answered[i].as_str()));
    }
    let fresh = bed.long_flows(FRESH_FLOWS, false)?;
    let rejoin_at = Instant::now();
    bed.restore(k, Failure::Withdrawn)?;
    let back = bed.wait_router(vip4(), CONVERGE, |h| h.contains(&k))?;
    flows.wait_progress(back, CONVERGE)?;
    fresh.wait_progress(back, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let old_broken = broken(&flows.finish()).len();
    let fresh_broken = broken(&fresh.finish()).len();
    eprintln!(
        "fleet: {}instance {k} withdrawn, b{new} added on every instance, {FRESH_FLOWS} \
         connections opened, instance {k} announced again after {:.1} ms: {moved} of \
         {LONG_FLOWS} older connections had their slot moved; broken {old_broken} of them and \
         {fresh_broken} of the {FRESH_FLOWS} new",
        if second_chance {
            format!(
                "with the second chance (without it: {} broken): ",
                today(WITHDRAWN_THEN_REJOIN)
            )
        } else {
            String::new()
        },
        back.duration_since(rejoin_at).as_secs_f64() * 1e3,
    );
    if second_chance {
        ensure!(
            moved > 0,
            "no connection's slot moved: the test proves nothing"
        );
        ensure!(
            old_broken + fresh_broken == 0,
            "with the second chance, {old_broken} older and {fresh_broken} new connections broke"
        );
    } else {
        TODAY_BROKEN[WITHDRAWN_THEN_REJOIN].store(old_broken + fresh_broken, Ordering::Relaxed);
    }
    remove_backend(bed, new, &before[0])
}

/// `lb ARGS...` in the router's namespace: (exit status, stdout, stderr).
fn lb_router(bed: &FleetBed, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let lb = lb_binary();
    let out = bed.router_ns().exec(&lb.display().to_string(), args)?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The `[[vip]]` tables of the bed's configuration with backends `ks`, written to a
/// file in the bed's directory for `lb fleet apply`.
fn vip_set(bed: &FleetBed, name: &str, ks: std::ops::RangeInclusive<u8>) -> anyhow::Result<String> {
    let full = DaemonConfig::equal(ks).to_toml(std::path::Path::new("/unused"));
    let at = full
        .find("\n[[vip]]")
        .context("the configuration has VIPs")?;
    let path = bed.dir().join(name);
    std::fs::write(&path, &full[at..])?;
    Ok(path.display().to_string())
}

/// Checks `value` against the shape docs/src/guide/json.md documents for `verb`.
fn documented(verb: &str, value: &serde_json::Value) -> anyhow::Result<()> {
    let shapes = lb_tests::schema::documented()?;
    let shape = shapes
        .get(verb)
        .with_context(|| format!("json.md documents no `{verb}`"))?;
    lb_tests::schema::check(shape, value).map_err(|e| anyhow::anyhow!("{verb}: {e}"))
}

/// `lb fleet status --json` from the router: (exit status, report).
fn fleet_status(bed: &FleetBed, fleet: &str) -> anyhow::Result<(i32, serde_json::Value)> {
    let (code, out, err) = lb_router(bed, &["fleet", "status", "--fleet", fleet, "--json"])?;
    let report =
        serde_json::from_str(&out).with_context(|| format!("lb fleet status: {out}{err}"))?;
    Ok((code, report))
}

/// Waits until `lb fleet status` exits with `want`.
fn wait_fleet(bed: &FleetBed, fleet: &str, want: i32) -> anyhow::Result<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, report) = fleet_status(bed, fleet)?;
        if code == want {
            return Ok(report);
        }
        ensure!(
            Instant::now() < deadline,
            "lb fleet status exits {code}, not {want}: {report:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The remote API end to end, from the router's namespace (see the module
/// documentation); leaves every instance with backends 1 to 3 again.
fn fleet_api(bed: &mut FleetBed) -> anyhow::Result<()> {
    let api = bed
        .instance(1)
        .config()
        .extra
        .split("cert_file = \"")
        .nth(1)
        .and_then(|rest| rest.split("/server.crt").next())
        .context("the bed runs the API")?
        .to_owned();
    let n = bed.instances().len();
    let mut fleet = format!("cacert = \"{api}/ca.crt\"\ntoken_file = \"{api}/admin.token\"\n");
    for k in 1..=n {
        fleet.push_str(&format!(
            "\n[[instance]]\nname = \"lb{k}\"\nurl = \"{}\"\n",
            api_url(k)
        ));
    }
    let fleet_file = bed.dir().join("fleet.toml");
    std::fs::write(&fleet_file, fleet)?;
    let fleet_file = fleet_file.display().to_string();

    // One instance, remotely: the text `lb status` prints over the socket.
    let (code, text, err) = lb_router(
        bed,
        &[
            "status",
            "--remote",
            &api_url(2),
            "--cacert",
            &format!("{api}/ca.crt"),
            "--token-file",
            &format!("{api}/reader.token"),
        ],
    )?;
    ensure!(
        code == 0 && text.contains(&tcp_vip(false).to_string()),
        "lb status --remote: {code} {text}{err}"
    );

    let before = wait_fleet(bed, &fleet_file, 0)?;
    ensure!(before["agree"] == true, "{before:#}");
    documented("lb fleet status", &before)?;
    let (code, out, err) = lb_router(
        bed,
        &[
            "fleet",
            "apply",
            "--dry-run",
            "--json",
            &vip_set(bed, "same.toml", 1..=3)?,
            "--fleet",
            &fleet_file,
        ],
    )?;
    ensure!(code == 0, "lb fleet apply --dry-run: {code}\n{out}{err}");
    let dry: serde_json::Value = serde_json::from_str(&out)?;
    documented("lb fleet apply", &dry)?;
    ensure!(
        dry["instances"]
            .as_array()
            .is_some_and(|i| i.iter().all(|i| i["diff"]["changed"] == false)),
        "the bed's own VIPs change nothing: {dry:#}"
    );
    let vips = before["vips"].as_array().context("vips")?;
    ensure!(
        vips.len() == 4
            && vips
                .iter()
                .all(|v| v["instances"].as_array().map(Vec::len) == Some(n)),
        "{before:#}"
    );

    // Pushed to all: backend 3 goes everywhere, and they agree on the new tables.
    let two = vip_set(bed, "two.toml", 1..=2)?;
    let (code, out, err) = lb_router(bed, &["fleet", "apply", &two, "--fleet", &fleet_file])?;
    ensure!(code == 0, "lb fleet apply: {code}\n{out}{err}");
    ensure!(
        out.contains(&format!("{n} of {n} instances applied")),
        "{out}"
    );
    for k in 1..=n {
        bed.daemon(k)
            .wait_status("the pushed VIPs", Duration::from_secs(10), |s| {
                s.vips.iter().all(|v| v.backends.len() == 2)
            })?;
    }
    let after = wait_fleet(bed, &fleet_file, 0)?;
    ensure!(
        after["vips"][0]["instances"][0]["fingerprint"]
            != before["vips"][0]["instances"][0]["fingerprint"],
        "the tables changed: {after:#}"
    );

    // Pushed to one instance only: the fleet disagrees, and says where.
    let three = vip_set(bed, "three.toml", 1..=3)?;
    let (code, out, err) = lb_router(
        bed,
        &[
            "fleet",
            "apply",
            &three,
            "--instances",
            &api_url(1),
            "--cacert",
            &format!("{api}/ca.crt"),
            "--token-file",
            &format!("{api}/admin.token"),
        ],
    )?;
    ensure!(code == 0, "lb fleet apply to lb1: {code}\n{out}{err}");
    let split = wait_fleet(bed, &fleet_file, 1)?;
    ensure!(split["agree"] == false, "{split:#}");
    ensure!(
        split["vips"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|v| v["differs"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "fingerprint"))),
        "{split:#}"
    );
    let (code, text, _) = lb_router(bed, &["fleet", "status", "--fleet", &fleet_file])?;
    ensure!(
        code == 1 && text.contains("DIFFER (fingerprint") && text.contains("THEY DISAGREE"),
        "{text}"
    );

    // A read-only token cannot push: exit 3, the role named.
    let (code, out, err) = lb_router(
        bed,
        &[
            "fleet",
            "apply",
            &three,
            "--fleet",
            &fleet_file,
            "--token-file",
            &format!("{api}/reader.token"),
        ],
    )?;
    ensure!(code == 3 && out.contains("read-only"), "{code}\n{out}{err}");

    // Back to backends 1 to 3 everywhere, in two phases (these VIPs have no second
    // chance: each instance learns nothing, then all switch).
    let (code, out, err) = lb_router(
        bed,
        &[
            "fleet",
            "apply",
            "--two-phase",
            "--json",
            &three,
            "--fleet",
            &fleet_file,
        ],
    )?;
    ensure!(code == 0, "lb fleet apply --two-phase: {code}\n{out}{err}");
    let two_phase: serde_json::Value = serde_json::from_str(&out)?;
    documented("lb fleet apply", &two_phase)?;
    ensure!(
        two_phase["two_phase"] == true
            && two_phase["instances"].as_array().is_some_and(|i| i
                .iter()
                .all(|i| i["ok"] == true && i["learned"]["vips"].as_array().is_some())),
        "{two_phase:#}"
    );
    let healed = wait_fleet(bed, &fleet_file, 0)?;
    ensure!(
        healed["vips"][0]["instances"][0]["fingerprint"]
            == before["vips"][0]["instances"][0]["fingerprint"],
        "{healed:#}"
    );
    Ok(())
}

/// Connections of the rollout scenario: opened before the change, and as many again
/// between the phases.
const ROLLOUT_FLOWS: usize = 150;

/// Broken connections of the rolling change without the two phases (`usize::MAX`
/// until it ran), printed beside the count with them.
static ROLLING_BROKEN: AtomicUsize = AtomicUsize::new(usize::MAX);

/// An instance fails midway through a rollout (issue 31's table: "an instance fails
/// midway through a rolling change"), with the second chance on. Every instance reads
/// its file on `lb reload` only (`reload = "signal"`); backend `new` is written into
/// every file. With `two_phase`, `lb reload --phase learn` runs on every instance
/// first. Then instances 2 and 3 switch (`lb reload`), instance 1 does not yet;
/// connections are opened (those through 2 and 3 on the next table's owners); then
/// instance 2's router port goes down. Its connections move to 1 (behind: its slots
/// are clean, or pending with the next owner after a learn) and to 3. Without the
/// learn, those whose slot moved break on 1 (printed); with it none breaks (asserted).
/// Then instance 2 comes back and instance 1 switches too.
fn rollout_then_failure(bed: &mut FleetBed, two_phase: bool) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let result = rollout_steps(bed, two_phase);
    // Back to the baseline whatever happened: the backend out, reload on writes, the
    // second chance off.
    let cleanup = change_everywhere(bed, |c| {
        c.backends.retain(|b| b.k <= 3);
        c.top_level.clear();
        c.vip_keys.retain(|(v, _)| *v != vip);
    })
    .and_then(|()| bed.wait_all_announced(CONVERGE));
    result.and(cleanup)
}

fn rollout_steps(bed: &mut FleetBed, two_phase: bool) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let (lagging, failing) = (1, 2);
    change_everywhere(bed, |c| {
        c.top_level = "reload = \"signal\"\n".into();
        c.vip_keys.retain(|(v, _)| *v != vip);
        c.vip_keys
            .push((vip.clone(), "encap = \"gue\"\nsecond_chance = true".into()));
    })?;
    let before_flows = bed.long_flows(ROLLOUT_FLOWS, false)?;
    let new = bed.add_backend()?;
    let before = applied_changes(bed)?;
    bed.reconfigure(
        |c| {
            c.backends.push(lb_tests::daemon::BackendLine {
                k: new,
                weight: 1,
                state: lb_tests::daemon::BackendState::Active,
            });
        },
        |_| true,
    )?;
    let mut pending = Vec::new();
    if two_phase {
        for k in 1..=bed.instances().len() {
            let out = bed
                .daemon(k)
                .cli(&["reload", "--phase", "learn", "--json"])?;
            let learned: serde_json::Value = serde_json::from_str(&out)?;
            documented("lb reload --phase learn", &learned)?;
            let n = learned["vips"][0]["pending_slots"].as_u64().unwrap_or(0);
            ensure!(
                learned["vips"].as_array().map(Vec::len) == Some(1) && n > 0,
                "instance {k}: the learn names the second-chance VIP's pending slots: {learned}"
            );
            let status = bed.daemon(k).status()?;
            let shown = status.vips.iter().find(|v| v.vip == vip);
            ensure!(
                shown.and_then(|v| v.pending_rollout).map(u64::from) == Some(n),
                "instance {k}: lb status shows the pending rollout"
            );
            pending.push(n);
        }
    }
    for k in (1..=bed.instances().len()).filter(|&k| k != lagging) {
        switch(bed, k, before[k - 1])?;
    }
    let fingerprints = bed.fingerprints(&vip)?;
    ensure!(
        fingerprints[lagging - 1] != fingerprints[failing - 1],
        "instance {lagging} is behind: {fingerprints:?}"
    );
    let mid_flows = bed.long_flows(ROLLOUT_FLOWS, false)?;
    let changed_at = Instant::now();
    before_flows.wait_progress(changed_at, CONVERGE)?;
    mid_flows.wait_progress(changed_at, CONVERGE)?;

    let failed = fail_and_count(bed, failing, &before_flows, &mid_flows)?;
    let (failed_at, gone, broken_before, broken_mid) =
        (failed.at, failed.gone, failed.broken[0], failed.broken[1]);
    // The rollout ends: the lagging instance switches too.
    switch(bed, lagging, before[lagging - 1])?;
    let done = Instant::now();
    before_flows.wait_progress(done, CONVERGE)?;
    mid_flows.wait_progress(done, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let total = broken(&before_flows.finish()).len() + broken(&mid_flows.finish()).len();
    eprintln!(
        "fleet: rollout of b{new} {}: instances 2 and 3 switched, 1 behind{}; instance \
         {failing} (link down) failed after {:.1} ms: broken {broken_before} of \
         {ROLLOUT_FLOWS} opened before the change, {broken_mid} of {ROLLOUT_FLOWS} opened \
         between the phases; {total} in all once instance 1 switched too{}",
        if two_phase {
            "in two phases (learn on all)"
        } else {
            "rolling (no learn)"
        },
        if two_phase {
            format!(" (pending slots per instance {pending:?})")
        } else {
            String::new()
        },
        gone.duration_since(failed_at).as_secs_f64() * 1e3,
        without_note(&ROLLING_BROKEN, two_phase, "the learn"),
    );
    settle(&ROLLING_BROKEN, two_phase, total, "in a two-phase rollout")
}

/// What [`fail_and_count`] saw.
struct Failover {
    /// When the instance's router link went down.
    at: Instant,
    /// When the router dropped it.
    gone: Instant,
    /// Broken connections of each set of flows, before the link came back.
    broken: [usize; 2],
    /// When the router took it back.
    back: Instant,
}

/// Fails instance `failing` (its router link down) while `flows` run, waits for the
/// router to drop it and both sets of flows to move on, counts each set's broken
/// connections, then restores the link and waits for the router to take it back.
fn fail_and_count(
    bed: &mut FleetBed,
    failing: usize,
    before: &lb_tests::fleet::flows::LongFlows,
    mid: &lb_tests::fleet::flows::LongFlows,
) -> anyhow::Result<Failover> {
    let at = Instant::now();
    bed.fail(failing, Failure::RouterLinkDown)?;
    let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&failing) && !h.is_empty())?;
    before.wait_progress(gone, CONVERGE)?;
    mid.wait_progress(gone, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let broken = [
        broken(&before.snapshot()).len(),
        broken(&mid.snapshot()).len(),
    ];
    bed.restore(failing, Failure::RouterLinkDown)?;
    let back = bed.wait_router(vip4(), CONVERGE, |h| h.contains(&failing))?;
    Ok(Failover {
        at,
        gone,
        broken,
        back,
    })
}

/// With the remedy on (`remedied`), the count the run without it kept in `cell`, as
/// " (without WHAT: N)" ("not run" before it ran); nothing without the remedy.
fn without_note(cell: &AtomicUsize, remedied: bool, what: &str) -> String {
    if !remedied {
        return String::new();
    }
    let without = match cell.load(Ordering::Relaxed) {
        usize::MAX => "not run".to_owned(),
        n => n.to_string(),
    };
    format!(" (without {what}: {without})")
}

/// With the remedy on, fails unless no connection broke (`total`); without it, keeps
/// `total` in `cell` for the remedied run's note.
fn settle(cell: &AtomicUsize, remedied: bool, total: usize, what: &str) -> anyhow::Result<()> {
    if remedied {
        ensure!(total == 0, "{total} connections broke {what}");
    } else {
        cell.store(total, Ordering::Relaxed);
    }
    Ok(())
}

/// Broken connections of the dead-daemon scenario without the remedy (`usize::MAX`
/// until it ran), printed beside the count with it.
static DEAD_DAEMON_BROKEN: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Issue 31's row "one daemon dead (not reloaded), the change reaches the other two,
/// one of them fails", with the second chance on: instance 1's daemon is killed
/// (SIGKILL, not restarted), backend `new` is added on instances 2 and 3, connections
/// are opened, then instance 2's router port goes down. Nothing withdraws a dead
/// daemon's announcement (its routes stay in the kernel table BIRD exports; asserted),
/// and its pinned datapath forwards by the old table with clean slots: the connections
/// opened on a moved slot through 2 or 3 that the failure brings to instance 1 break
/// (printed), as behind a rolling change. With the operator's remedy (`remedy`),
/// `lb detach` takes instance 1 out (routes, then datapath) before the change: none
/// breaks (asserted). The bed is healed afterwards (daemon 1 started again, the
/// runtime change cleared) and checked back at its tables.
fn dead_daemon_then_failure(bed: &mut FleetBed, remedy: bool) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let before = bed.fingerprints(&vip)?;
    let result = dead_daemon_steps(bed, remedy);
    let healed = bed.heal().and_then(|()| {
        let after = bed.fingerprints(&vip)?;
        ensure!(
            after.iter().all(|f| *f == before[0]),
            "fingerprints after the heal: {after:?} (before {before:?})"
        );
        Ok(())
    });
    result.and(healed)
}

fn dead_daemon_steps(bed: &mut FleetBed, remedy: bool) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let (dead, failing) = (1, 2);
    let before_flows = bed.long_flows(ROLLOUT_FLOWS, false)?;
    kill_stays_announced(bed, dead, &before_flows)?;
    if remedy {
        bed.fail(dead, Failure::Detached)?;
        let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&dead) && !h.is_empty())?;
        bed.wait_router(VIP6.into(), CONVERGE, |h| !h.contains(&dead))?;
        before_flows.wait_progress(gone, CONVERGE)?;
    }
    let new = bed.add_backend()?;
    for j in (1..=bed.instances().len()).filter(|&j| j != dead) {
        bed.daemon(j).backend("add", &vip, new, None)?;
    }
    let mid_flows = bed.long_flows(ROLLOUT_FLOWS, false)?;
    let changed_at = Instant::now();
    before_flows.wait_progress(changed_at, CONVERGE)?;
    mid_flows.wait_progress(changed_at, CONVERGE)?;

    let failed = fail_and_count(bed, failing, &before_flows, &mid_flows)?;
    let (failed_at, gone, broken_before, broken_mid, back) = (
        failed.at,
        failed.gone,
        failed.broken[0],
        failed.broken[1],
        failed.back,
    );
    before_flows.wait_progress(back, CONVERGE)?;
    mid_flows.wait_progress(back, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let total = broken(&before_flows.finish()).len() + broken(&mid_flows.finish()).len();
    eprintln!(
        "fleet: with the second chance: instance {dead}'s daemon killed (still announced{}), \
         b{new} added on the other two, instance {failing} (link down) failed after {:.1} ms: \
         broken {broken_before} of {ROLLOUT_FLOWS} opened before the change, {broken_mid} of \
         {ROLLOUT_FLOWS} opened after it; {total} in all once instance {failing} rejoined{}",
        if remedy {
            ", then taken out with lb detach before the change"
        } else {
            ", its datapath forwarding by the old table"
        },
        gone.duration_since(failed_at).as_secs_f64() * 1e3,
        without_note(&DEAD_DAEMON_BROKEN, remedy, "the remedy"),
    );
    settle(
        &DEAD_DAEMON_BROKEN,
        remedy,
        total,
        "with the dead instance detached first",
    )
}

/// Kills instance `dead`'s daemon (SIGKILL, not restarted) and checks that nothing
/// withdraws it: the router still uses it 1.5 s later, and `flows` make progress.
fn kill_stays_announced(
    bed: &mut FleetBed,
    dead: usize,
    flows: &lb_tests::fleet::flows::LongFlows,
) -> anyhow::Result<()> {
    bed.kill_daemon(dead)?;
    // Long enough for a withdrawal to reach the router, had there been one.
    std::thread::sleep(Duration::from_millis(1500));
    for addr in [vip4(), VIP6.into()] {
        let hops = bed.router_nexthops(addr)?;
        ensure!(
            hops.contains(&dead),
            "{addr}: the router stopped using instance {dead} when its daemon died: {hops:?}"
        );
    }
    flows.wait_progress(Instant::now(), CONVERGE)
}

/// Issue 31's first row: "kill -9 of one daemon, then another instance's uplink down,
/// then both back", with no table change (the IPv4 TCP VIP as configured, no second
/// chance). Instance 1's daemon is killed (it stays announced, its pinned datapath
/// forwards), then instance 2's router port goes down: its connections move to 1 and
/// 3, miss conntrack there and are picked from the same table (the dead instance's
/// datapath does it with no daemon). Then the port comes up and daemon 1 starts again
/// (it adopts the datapath, the pins its datapath made included). No connection
/// breaks (asserted), and some of instance 2's reached the dead instance and were
/// pinned there to their old backend (asserted, else the case was not exercised).
fn dead_daemon_then_another_fails(bed: &mut FleetBed) -> anyhow::Result<()> {
    let vip = tcp_vip(false);
    let (dead, failing) = (1, 2);
    let flows = bed.long_flows(LONG_FLOWS, false)?;
    let locals = flows.locals();
    let carried = carriers(bed, &locals)?;
    let on_failing: Vec<usize> = (0..locals.len())
        .filter(|&i| carried[i].0 == failing)
        .collect();
    kill_stays_announced(bed, dead, &flows)?;
    let failed_at = Instant::now();
    bed.fail(failing, Failure::RouterLinkDown)?;
    let gone = bed.wait_router(vip4(), CONVERGE, |h| !h.contains(&failing) && !h.is_empty())?;
    flows.wait_progress(gone, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let broken_failover = broken(&flows.snapshot()).len();
    bed.restore(failing, Failure::RouterLinkDown)?;
    bed.start_daemon(dead)?;
    bed.wait_all_announced(CONVERGE)?;
    let back = Instant::now();
    flows.wait_progress(back, CONVERGE)?;
    std::thread::sleep(lb_tests::fleet::flows::ROUND * 3);
    let pins = bed.pins(&vip, &locals)?;
    let via_dead = on_failing
        .iter()
        .filter(|&&i| pins[i].contains(&(dead, carried[i].1.clone())))
        .count();
    let states = flows.finish();
    let broke = broken(&states);
    eprintln!(
        "fleet: instance {dead}'s daemon killed (still announced), then instance {failing} \
         (link down, carrying {} of {LONG_FLOWS}) failed after {:.1} ms: broken {broken_failover}; \
         {via_dead} of its connections pinned on the dead instance to their old backend; \
         both back (port up, daemon started): broken in all {}, longest stall {:.0} ms",
        on_failing.len(),
        gone.duration_since(failed_at).as_secs_f64() * 1e3,
        broke.len(),
        longest_stall(&states).as_secs_f64() * 1e3,
    );
    ensure!(
        broke.is_empty(),
        "{} connections broke: {:?}",
        broke.len(),
        &broke[..broke.len().min(10)]
    );
    ensure!(
        via_dead > 0,
        "none of instance {failing}'s {} connections reached the dead instance {dead}: the \
         test proves nothing",
        on_failing.len()
    );
    Ok(())
}
