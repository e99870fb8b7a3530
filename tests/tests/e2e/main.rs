//! End-to-end tests with real TCP and UDP traffic through the real `lb run` daemon.
//! Privileged: each test builds its own test bed (client, LB and backend namespaces on
//! one bridge, [`lb_tests::testbed`]), starts `lb run` in the bed's LB namespace with a
//! generated configuration ([`lb_tests::daemon`]) and drives it only through its
//! configuration file, signals and the `lb` CLI. Beds are independent, so libtest runs
//! the tests in parallel.
//!
//! Needs the `lb` binary of the same profile: `cargo build -p lb --bin lb` (done by
//! `cargo xtask test`), then `cargo test -p lb-tests --test e2e`.
//!
//! | what is checked | test |
//! |---|---|
//! | 1,000 connections, 3 backends, shares within 15% of a third | [`distribution::three_equal_backends_share_1000_connections_evenly`] |
//! | weights 1:2:1 | [`distribution::weights_1_2_1_give_shares_of_25_50_25`] |
//! | the fast path: 100 connections kept through add, weight, drain, restart, an upgrade from layout 2, add, a health flap, remove and the cleaning (issue 30) | [`fastpath::fast_path_connections_survive_changes_a_restart_an_upgrade_a_flap_and_the_cleaning`] |
//! | established connections keep their backend through add, drain and reload | [`stickiness::live_connections_keep_their_backend_through_add_drain_and_reload`] |
//! | removing a backend resets only its connections (BR-13.T3) | [`removal::removing_a_backend_resets_only_its_connections_and_new_ones_avoid_it`] |
//! | UDP flows keep their backend | [`udp::udp_flows_keep_their_backend_across_datagrams_and_a_backend_addition`] |
//! | an IPv6 VIP | [`ipv6::ipv6_vip_serves_tcp_end_to_end`] |
//! | VIPs with `encap = "gue"` through backends that decapsulate GUE only (issue 31) | [`gue::gue_vips_serve_tcp_and_udp_through_gue_only_backends`] |
//! | `lb stats` agrees with the traffic | [`stats::lb_stats_counts_exactly_the_packets_the_clients_sent`] |
//! | a SYN retransmitted after a backend was added completes on its first backend | [`handshake::a_retransmitted_syn_after_a_backend_is_added_completes_on_its_first_backend`] |
//! | a 1 MB upload over a full-size path completes with the LB's ICMP answers, stalls without (issue 16) | [`pmtu::a_megabyte_upload_completes_thanks_to_the_generated_icmp_and_stalls_without`] |
//! | a router's "fragmentation needed" reaches the backend owning the flow (issue 16) | [`pmtu::a_routers_frag_needed_reaches_the_backend_that_owns_the_flow`] |
//! | fragments and ICMP errors reach the owner with no daemon and after a restart that adopts the datapath (issue 16 with 18) | [`adoption::the_rare_paths_run_without_a_daemon_and_after_an_adopting_restart`] |
//! | a source list narrowed or removed while no daemon ran is enforced by the adopting start | [`adoption::a_source_list_changed_while_no_daemon_runs_is_enforced_by_the_adopting_start`] |
//!
//! | `lb backend weight`; `drain --timeout` removes at the timeout or the last connection (issue 32) | [`lifecycle`] |
//! | a backend added to a checked VIP takes flows only after its first passed probe (issue 32) | [`lifecycle::a_backend_added_to_a_checked_vip_takes_flows_only_after_its_first_probe_passes`] |
//! | `lb status`, `stats`, `flow`, `conn list` answer from the pins with the daemon killed or stopped (issue 32) | [`nodaemon`] |
//! | `lb conn list` lists real connections of both families; its filters and `--limit` (issue 32) | [`conns`] |
//! | `lb config diff` says what a reload would change, exits 0/1/2 as diff(1) (issue 32) | [`reload`] |
//! | client affinity: a client's many new connections stay on its backend when a backend is added (issue 32) | [`affinity::a_clients_connections_stay_on_its_backend_when_a_backend_is_added`] |
//! | client affinity: a busy client's pin outlives the timeout through the conntrack walk (issue 32) | [`affinity::a_busy_clients_pin_outlives_the_timeout_and_keeps_its_new_connections`] |
//! | `lb table build --hash-fields --flow` predicts `lb status`'s fingerprint, `lb flow` and the answering backend (issue 32) | [`predict::table_build_with_the_hash_fields_predicts_lb_flow_the_fingerprint_and_the_backend`] |
//!
//! | issue 10 (health checks) | [`health`] |
//!
//! [`harness`] checks the harness itself: graceful stop, and cleanup on panic.

mod adoption;
mod affinity;
mod conns;
mod distribution;
mod fastpath;
mod gue;
mod handshake;
mod harness;
mod health;
mod ipv6;
mod lifecycle;
mod longlived;
mod nodaemon;
mod pmtu;
mod predict;
mod reload;
mod removal;
mod stats;
mod stickiness;
mod udp;

use lb::control::{Status, VipStatus};
use lb_tests::{
    daemon::{Daemon, DaemonConfig, vip_text},
    testbed::{TestBed, TestBedOptions, backend_name},
    traffic::{Tally, within},
};

/// Client addresses per family in every bed (enough spread of source addresses).
const CLIENTS: usize = 16;

/// A bed with `backends` backends and [`CLIENTS`] client addresses per family.
fn bed(backends: u8) -> TestBed {
    assert!(lb_tests::is_root(), "privileged test: run as root");
    TestBed::new(TestBedOptions {
        backends,
        clients: CLIENTS,
        ..TestBedOptions::default()
    })
    .expect("build the test bed")
}

/// `lb run` with `config` in `bed`.
fn daemon<'bed>(bed: &'bed TestBed, config: &DaemonConfig) -> Daemon<'bed> {
    let lb = Daemon::start(bed, config).unwrap_or_else(|e| panic!("start lb run: {e:#}"));
    eprintln!("lb run answered after {:?}", lb.startup_time());
    lb
}

/// The IPv4 TCP VIP's entry in `status`.
fn tcp_vip(status: &Status) -> &VipStatus {
    let vip = vip_text(false, true);
    status
        .vips
        .iter()
        .find(|v| v.vip == vip)
        .expect("the TCP VIP in lb status")
}

/// Asserts that backend `k`'s share of `tally` is within 15% (relative) of `ideal`.
fn assert_share(tally: &Tally, k: u8, ideal: f64) {
    let share = tally.share(&backend_name(k));
    assert!(
        within(share, ideal, 0.15),
        "b{k} has {:.2}% of the connections, outside 15% of the ideal {:.2}% \
         ([{:.2}%, {:.2}%]): {tally}",
        100.0 * share,
        100.0 * ideal,
        100.0 * ideal * 0.85,
        100.0 * ideal * 1.15,
    );
}
