//! The announcement rule and its routes, against an in-memory routing table.

use std::sync::{Arc, Mutex};

use super::*;
use crate::{
    config::Config,
    controller::{Controller, Desired},
    daemon::test_fixture::{FILE, MAC},
};
use lb_dataplane::FakeDataplane;

/// Routes by (table, protocol), shared with the test; counts every call and can be
/// made to fail.
#[derive(Clone, Default)]
struct FakeRoutes {
    inner: Arc<Mutex<FakeInner>>,
}

#[derive(Default)]
struct FakeInner {
    routes: BTreeMap<(u32, u8), BTreeSet<IpAddr>>,
    calls: usize,
    failing: bool,
}

impl FakeRoutes {
    fn table(&self, table: u32, protocol: u8) -> BTreeSet<IpAddr> {
        let inner = self.inner.lock().unwrap();
        inner
            .routes
            .get(&(table, protocol))
            .cloned()
            .unwrap_or_default()
    }

    fn calls(&self) -> usize {
        self.inner.lock().unwrap().calls
    }

    fn set_failing(&self, failing: bool) {
        self.inner.lock().unwrap().failing = failing;
    }

    fn remove_behind_the_daemons_back(&self, table: u32, protocol: u8, a: IpAddr) {
        let mut inner = self.inner.lock().unwrap();
        inner
            .routes
            .entry((table, protocol))
            .or_default()
            .remove(&a);
    }
}

impl RouteTable for FakeRoutes {
    fn list(&mut self, table: u32, protocol: u8) -> Result<BTreeSet<IpAddr>, RouteError> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls += 1;
        Ok(inner
            .routes
            .get(&(table, protocol))
            .cloned()
            .unwrap_or_default())
    }

    fn write(
        &mut self,
        table: u32,
        protocol: u8,
        add: &[IpAddr],
        remove: &[IpAddr],
    ) -> Result<(), RouteError> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls += 1;
        if inner.failing {
            return Err(RouteError::Ip(
                "RTNETLINK answers: Operation not permitted".into(),
            ));
        }
        let routes = inner.routes.entry((table, protocol)).or_default();
        routes.extend(add);
        for a in remove {
            routes.remove(a);
        }
        Ok(())
    }
}

const ON: Announce = Announce {
    enabled: true,
    table: 100,
    protocol: 76,
};

fn addr(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn vip(text: &str) -> Vip {
    text.parse().unwrap()
}

fn v4() -> IpAddr {
    addr("203.0.113.10")
}

fn v6() -> IpAddr {
    addr("2001:db8:f::10")
}

/// Two VIPs on the IPv4 address, one on the IPv6 address, all usable.
fn usable() -> Vec<(Vip, Serving)> {
    vec![
        (vip("203.0.113.10:80/tcp"), Serving::Usable(3)),
        (vip("203.0.113.10:53/udp"), Serving::Usable(3)),
        (vip("[2001:db8:f::10]:80/tcp"), Serving::Usable(2)),
    ]
}

fn announcer(config: Announce) -> (Announcer, FakeRoutes) {
    let routes = FakeRoutes::default();
    (Announcer::new(config, Box::new(routes.clone())), routes)
}

fn set(addrs: &[IpAddr]) -> BTreeSet<IpAddr> {
    addrs.iter().copied().collect()
}

fn status_of(a: &Announcer, vips: &[&str]) -> Status {
    let mut status = Status {
        interface: "eth0".into(),
        mode: "native".into(),
        config_file: "lb.toml".into(),
        differs_from_file: false,
        changes: 0,
        table_builds: 0,
        vips: vips
            .iter()
            .map(|v| crate::control::VipStatus {
                vip: (*v).to_owned(),
                id: 0,
                table_size: 1009,
                generation: 1,
                fingerprint: String::new(),
                allowed_sources: Vec::new(),
                backends: Vec::new(),
                policy: None,
                announce: None,
                slot_states: None,
                entry_cached: None,
                give_ups: Vec::new(),
                affinity_pins: None,
                pending_rollout: None,
                owners_given_up: 0,
            })
            .collect(),
        health: crate::control::HealthSummary::default(),
        announce: AnnounceSummary::default(),
        conntrack: None,
        cleaning: None,
        overrides: Vec::new(),
        pin_dir: None,
        layout: None,
        migration: None,
        datapath: crate::control::DatapathHealth::default(),
        recent_changes: Vec::new(),
    };
    a.annotate(&mut status);
    status
}

#[test]
fn off_publishes_nothing_and_only_sweeps_what_an_earlier_run_left_once() {
    let (mut a, routes) = announcer(Announce::default());
    // An earlier run that was on stopped with its datapath forwarding: its route stayed.
    routes.clone().write(100, 76, &[v4()], &[]).unwrap();
    a.sync(&usable());
    assert_eq!(
        routes.table(100, 76),
        set(&[v4()]),
        "untouched before attaching"
    );
    a.set_attached(true);
    a.sync(&usable());
    assert!(
        routes.table(100, 76).is_empty(),
        "the earlier run's route is gone"
    );
    let calls = routes.calls();
    a.sync(&usable());
    a.sync(&usable());
    assert_eq!(
        routes.calls(),
        calls,
        "off: the table is read once, then never again"
    );
    assert_eq!(status_of(&a, &[]).announce.last_error, None);
    let s = status_of(&a, &["203.0.113.10:80/tcp"]);
    assert!(!s.announce.enabled);
    assert!(s.announce.addresses.iter().all(|x| !x.announced));
    let v = s.vips[0].announce.as_ref().unwrap();
    assert!(!v.announced && !v.servable);
    assert_eq!(v.reason, "announcements are off (announce.enabled = false)");
    assert!(matches!(
        a.request(VipAction::Withdraw, v4(), &usable()),
        Err(AnnounceError::Off)
    ));
}

#[test]
fn nothing_is_announced_or_removed_before_the_data_plane_is_attached() {
    let (mut a, routes) = announcer(ON);
    // A route left by an earlier run stays until this run can serve.
    routes
        .clone()
        .write(100, 76, &[addr("203.0.113.99")], &[])
        .unwrap();
    let before = routes.calls();
    a.sync(&usable());
    assert_eq!(routes.calls(), before);
    let s = status_of(&a, &["203.0.113.10:80/tcp"]);
    assert_eq!(
        s.vips[0].announce.as_ref().unwrap().reason,
        "the data plane is not attached"
    );
    a.set_attached(true);
    a.sync(&usable());
    // The stale route is gone, every servable address is in.
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
    let s = status_of(&a, &["203.0.113.10:80/tcp", "[2001:db8:f::10]:80/tcp"]);
    assert!(s.announce.attached);
    assert_eq!(s.announce.route_changes, 3);
    for v in &s.vips {
        let ann = v.announce.as_ref().unwrap();
        assert!(ann.announced && ann.servable, "{ann:?}");
    }
    assert_eq!(
        s.vips[0].announce.as_ref().unwrap().reason,
        "3 usable backends"
    );
    let a4 = &s.announce.addresses[0];
    assert_eq!(a4.prefix, "203.0.113.10/32");
    assert_eq!(a4.vips, ["203.0.113.10:53/udp", "203.0.113.10:80/tcp"]);
    assert_eq!(s.announce.addresses[1].prefix, "2001:db8:f::10/128");
}

#[test]
fn an_address_stays_while_any_of_its_vips_is_usable_and_goes_with_the_last() {
    let (mut a, routes) = announcer(ON);
    a.set_attached(true);
    let mut vips = usable();
    vips[0].1 =
        Serving::NoUsableBackend("no usable backend: all 3 in service are unhealthy".into());
    a.sync(&vips);
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
    let s = status_of(&a, &["203.0.113.10:80/tcp", "203.0.113.10:53/udp"]);
    let tcp = s.vips[0].announce.as_ref().unwrap();
    assert!(tcp.announced && !tcp.servable);
    assert_eq!(
        tcp.reason,
        "no usable backend: all 3 in service are unhealthy (its address stays announced for another VIP of it)"
    );
    vips[1].1 = Serving::NoUsableBackend(
        "no usable backend: none in service (drained, down or weight 0)".into(),
    );
    a.sync(&vips);
    assert_eq!(routes.table(100, 76), set(&[v6()]));
    let s = status_of(&a, &["203.0.113.10:80/tcp"]);
    let tcp = s.vips[0].announce.as_ref().unwrap();
    assert!(!tcp.announced);
    assert_eq!(
        tcp.reason,
        "no usable backend: all 3 in service are unhealthy"
    );
    assert_eq!(
        s.announce.addresses[0].reason,
        "no VIP of this address has a usable backend"
    );
    a.sync(&usable());
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
}

#[test]
fn the_operators_withdrawal_holds_until_undone_and_survives_a_reload() {
    let (mut a, routes) = announcer(ON);
    a.set_attached(true);
    a.sync(&usable());
    let lines = a.request(VipAction::Withdraw, v4(), &usable()).unwrap();
    assert_eq!(
        lines.lines,
        [
            "203.0.113.10: withdrawn by the operator (route removed from table 100; BGP withdraws it; packets that still arrive are served)"
        ]
    );
    assert_eq!(routes.table(100, 76), set(&[v6()]));
    let lines = a.request(VipAction::Withdraw, v4(), &usable()).unwrap();
    assert_eq!(
        lines.lines,
        ["203.0.113.10: already withdrawn by the operator"]
    );
    assert!(!lines.changed && lines.withdrawn_by_operator && !lines.announced);
    // Health or configuration changes do not bring it back.
    a.configure(ON);
    a.sync(&usable());
    assert_eq!(routes.table(100, 76), set(&[v6()]));
    let s = status_of(&a, &["203.0.113.10:80/tcp"]);
    assert!(s.announce.addresses[0].withdrawn_by_operator);
    assert_eq!(
        s.vips[0].announce.as_ref().unwrap().reason,
        "withdrawn by the operator (lb vip withdraw)"
    );
    // An IPv4-mapped form names the same address.
    let lines = a
        .request(VipAction::Announce, addr("::ffff:203.0.113.10"), &usable())
        .unwrap();
    assert!(lines.changed && !lines.withdrawn_by_operator && lines.announced);
    assert_eq!(lines.address, "203.0.113.10");
    assert_eq!(
        lines.lines,
        [
            "203.0.113.10: no longer withdrawn by the operator",
            "203.0.113.10: announced (route in table 100)"
        ]
    );
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
    assert!(matches!(
        a.request(VipAction::Withdraw, addr("203.0.113.99"), &usable()),
        Err(AnnounceError::UnknownAddress(_))
    ));
}

#[test]
fn announcing_an_address_without_a_usable_backend_says_why_it_stays_out() {
    let (mut a, _routes) = announcer(ON);
    a.set_attached(true);
    let vips = vec![(
        vip("203.0.113.10:80/tcp"),
        Serving::NoUsableBackend("no usable backend: all 2 in service are unhealthy".into()),
    )];
    a.request(VipAction::Withdraw, v4(), &vips).unwrap();
    let lines = a.request(VipAction::Announce, v4(), &vips).unwrap();
    assert_eq!(lines.reason, "no VIP of this address has a usable backend");
    assert_eq!(
        lines.lines[1],
        "203.0.113.10: not announced: no VIP of this address has a usable backend"
    );
}

#[test]
fn a_removed_address_forgets_its_withdrawal() {
    let (mut a, routes) = announcer(ON);
    a.set_attached(true);
    a.sync(&usable());
    a.request(VipAction::Withdraw, v6(), &usable()).unwrap();
    let without_v6: Vec<_> = usable().into_iter().take(2).collect();
    a.sync(&without_v6);
    a.sync(&usable());
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
}

#[test]
fn exit_removes_the_routes_when_detaching_and_keeps_them_for_a_forwarding_data_plane() {
    let (mut a, routes) = announcer(ON);
    a.set_attached(true);
    a.sync(&usable());
    a.exit(DatapathAtExit::KeepsForwarding);
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
    a.exit(DatapathAtExit::Detached);
    assert!(routes.table(100, 76).is_empty());
    // Nothing comes back after the detach.
    a.sync(&usable());
    assert!(routes.table(100, 76).is_empty());
}

#[test]
fn a_reload_that_moves_the_table_moves_the_routes_and_off_removes_them() {
    let (mut a, routes) = announcer(ON);
    a.set_attached(true);
    a.sync(&usable());
    a.configure(Announce { table: 200, ..ON });
    a.sync(&usable());
    assert!(routes.table(100, 76).is_empty());
    assert_eq!(routes.table(200, 76), set(&[v4(), v6()]));
    a.configure(Announce {
        enabled: false,
        table: 200,
        ..ON
    });
    a.sync(&usable());
    assert!(routes.table(200, 76).is_empty());
    let calls = routes.calls();
    a.sync(&usable());
    assert_eq!(
        routes.calls(),
        calls,
        "off with nothing published: untouched"
    );
}

#[test]
fn a_failed_write_is_reported_and_retried_and_outside_changes_are_repaired() {
    let (mut a, routes) = announcer(ON);
    a.set_attached(true);
    routes.set_failing(true);
    a.sync(&usable());
    let s = status_of(&a, &[]);
    assert!(
        s.announce
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("Operation not permitted")),
        "{s:?}"
    );
    assert!(s.announce.addresses.iter().all(|x| !x.announced));
    routes.set_failing(false);
    a.sync(&usable());
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
    assert_eq!(status_of(&a, &[]).announce.last_error, None);
    // Someone deletes a route: the next verification puts it back.
    routes.remove_behind_the_daemons_back(100, 76, v4());
    a.last_read = None;
    a.sync(&usable());
    assert_eq!(routes.table(100, 76), set(&[v4(), v6()]));
}

#[test]
fn unchanged_decisions_do_not_ask_the_kernel() {
    let (mut a, routes) = announcer(ON);
    a.set_attached(true);
    a.sync(&usable());
    let calls = routes.calls();
    for _ in 0..10 {
        a.sync(&usable());
    }
    assert_eq!(routes.calls(), calls);
}

#[test]
fn serving_counts_active_healthy_backends_with_weight() {
    // The fixture's VIP with a draining third backend, and a UDP VIP.
    let file = format!(
        "{FILE}{}",
        r#"[[vip.backend]]
address = "198.51.100.13"
state = "drain"
[[vip]]
address = "203.0.113.10"
port = 53
protocol = "udp"
table_size = 1009
[[vip.backend]]
address = "198.51.100.11"
weight = 0
"#
    );
    let config = Config::from_toml(&file).unwrap().config;
    let mut c = Controller::new(FakeDataplane::new());
    c.apply(&Desired::from_config(&config, MAC)).unwrap();
    let tcp = vip("203.0.113.10:80/tcp");
    let udp = vip("203.0.113.10:53/udp");
    let by = |c: &Controller<FakeDataplane>| serving(c).into_iter().collect::<BTreeMap<_, _>>();
    assert_eq!(by(&c)[&tcp], Serving::Usable(2));
    assert_eq!(
        by(&c)[&udp],
        Serving::NoUsableBackend(
            "no usable backend: none in service (drained, down or weight 0)".into()
        )
    );
    let key = |a: &str| a.parse().unwrap();
    c.set_health([(tcp, key("198.51.100.11"), false)]).unwrap();
    assert_eq!(by(&c)[&tcp], Serving::Usable(1));
    c.set_health([(tcp, key("198.51.100.12"), false)]).unwrap();
    assert_eq!(
        by(&c)[&tcp],
        Serving::NoUsableBackend("no usable backend: all 2 in service are unhealthy".into())
    );
}
