//! The router with a resilient next-hop group (`ip nexthop ... type resilient`) for the
//! IPv4 VIP address, beside BIRD's plain multipath route.
//!
//! BIRD 2 (the bed's 2.0.12) installs a multipath route with its next hops inline
//! (`RTA_MULTIPATH`), which the kernel spreads by hash-threshold: removing one next hop
//! re-partitions the hash space and moves some of the others' flows too. It cannot
//! install next-hop objects or groups (its kernel protocol has no such option), so the
//! group is static, as an operator would configure it: a next-hop object per instance
//! (id `k`, via 10.0.k.2 dev `rk`), a resilient group of them (id [`GROUP_ID`]), and a
//! route to the VIP address through the group with a metric ([`ROUTE_METRIC`]) below
//! BIRD's, so the kernel forwards by it while BIRD's route stays as the fallback.
//!
//! When a port goes down the kernel deletes the next-hop objects on it and takes them
//! out of the group: that next hop's buckets move to the others at once, the others'
//! buckets stay. When it comes up nothing returns by itself: [`FleetBed::set_router_link`]
//! adds the next hop back and replaces the group (what the operator's tooling must do),
//! and the group hands the instance buckets as they fall idle (`idle_timer`) or once it
//! has been unbalanced for `unbalanced_timer`. A failure the port does not see (BGP
//! down, a withdrawal) needs the tooling to replace the group without the next hop; the
//! bed only fails instances by their port with the group on.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::{FleetBed, instance4, router_iface};
use crate::packets::VIP4;

/// The group's next-hop id (the instances' next hops are ids 1 to n).
pub const GROUP_ID: u32 = 100;
/// The metric of the static route through the group: below the 32 that BIRD's kernel
/// protocol gives its routes by default, so the kernel forwards by the group.
pub const ROUTE_METRIC: u32 = 1;
/// How long a next hop added back after its port came up may be refused (the port's
/// connected route is not there yet).
const REJOIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts to add a next hop back.
const REJOIN_RETRY: Duration = Duration::from_millis(20);

/// A resilient group's parameters (`ip nexthop replace id G group ... type resilient
/// buckets N idle_timer S unbalanced_timer S`; see ip-nexthop(8) and the kernel's
/// Documentation/networking/nexthop-group-resilient.rst).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResilientGroup {
    /// Hash buckets (the kernel's default is 128): each maps a share of the flow hashes
    /// to one next hop, so more buckets balance more finely.
    pub buckets: u16,
    /// Seconds a bucket must carry no packet before it may move to another next hop
    /// (the kernel's default is 120).
    pub idle_timer: u32,
    /// Seconds the group may stay unbalanced before busy buckets move too; 0 never
    /// (the kernel's default).
    pub unbalanced_timer: u32,
}

impl ResilientGroup {
    /// What the book recommends (docs/src/guide/fleets.md, "Resilient next-hop groups")
    /// and the bed runs.
    pub const RECOMMENDED: Self = Self {
        buckets: 512,
        idle_timer: 120,
        unbalanced_timer: 600,
    };

    /// `ip` arguments that create or replace the group with the next hops `members`.
    fn replace(&self, members: &[usize]) -> Vec<String> {
        let group = members
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("/");
        [
            "nexthop",
            "replace",
            "id",
            &GROUP_ID.to_string(),
            "group",
            &group,
            "type",
            "resilient",
            "buckets",
            &self.buckets.to_string(),
            "idle_timer",
            &self.idle_timer.to_string(),
            "unbalanced_timer",
            &self.unbalanced_timer.to_string(),
        ]
        .map(str::to_owned)
        .to_vec()
    }
}

impl FleetBed {
    /// The router's resilient group, when on.
    pub fn resilient(&self) -> Option<ResilientGroup> {
        self.resilient
    }

    /// Turns the router's resilient group for the IPv4 VIP address on (`Some`: every
    /// instance's next hop, the group, the route through it) or off (`None`: the route,
    /// the group and the next hops removed; BIRD's route forwards again).
    ///
    /// # Errors
    /// When `ip` fails.
    pub fn set_resilient(&mut self, group: Option<ResilientGroup>) -> anyhow::Result<()> {
        self.resilient = group;
        let route = |verb: &str| {
            [
                "-4",
                "route",
                verb,
                &format!("{VIP4}/32"),
                "nhid",
                &GROUP_ID.to_string(),
                "metric",
                &ROUTE_METRIC.to_string(),
            ]
            .map(str::to_owned)
        };
        let Some(group) = group else {
            // Deleting the group deletes the route through it too; the route first
            // keeps the order readable.
            let _ = self.router.exec("ip", &ref_args(&route("del")));
            return self.router.ip(&["nexthop", "flush"]);
        };
        let all: Vec<usize> = (1..=self.instances.len()).collect();
        for &k in &all {
            self.add_hop(k)?;
        }
        self.router.ip(&ref_args(&group.replace(&all)))?;
        self.router.ip(&ref_args(&route("replace")))
    }

    /// Instance `k`'s next-hop object (id `k`), created or replaced.
    fn add_hop(&self, k: usize) -> anyhow::Result<()> {
        self.router.ip(&[
            "nexthop",
            "replace",
            "id",
            &k.to_string(),
            "via",
            &instance4(k).to_string(),
            "dev",
            &router_iface(k),
        ])
    }

    /// The instances whose next-hop objects exist.
    fn hops(&self) -> anyhow::Result<Vec<usize>> {
        let out = self.router.exec("ip", &["-j", "nexthop", "show"])?;
        let shown: Vec<serde_json::Value> =
            serde_json::from_slice(&out.stdout).context("parsing ip -j nexthop show")?;
        Ok(shown
            .iter()
            .filter_map(|h| h.get("id")?.as_u64())
            .filter_map(|id| usize::try_from(id).ok())
            .filter(|k| (1..=self.instances.len()).contains(k))
            .collect())
    }

    /// After instance `k`'s port came up: its next hop added back (unless it is still
    /// there) and the group
    /// replaced with every next hop there is (the others keep their buckets).
    pub(super) fn rejoin_group(&self, group: ResilientGroup, k: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + REJOIN_TIMEOUT;
        while !self.hops()?.contains(&k)
            && let Err(e) = self.add_hop(k)
        {
            if Instant::now() > deadline {
                bail!("instance {k}'s next hop, its port up for {REJOIN_TIMEOUT:?}: {e:#}");
            }
            std::thread::sleep(REJOIN_RETRY);
        }
        self.router.ip(&ref_args(&group.replace(&self.hops()?)))
    }
}

fn ref_args(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Runs `scenario` with the router forwarding the IPv4 VIP address by the resilient
/// group `group`, then back to BIRD's multipath route, also when the scenario fails.
///
/// # Errors
/// The scenario's error, or `ip` failing.
pub fn with_resilient(
    bed: &mut FleetBed,
    group: ResilientGroup,
    scenario: impl FnOnce(&mut FleetBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let result = bed.set_resilient(Some(group)).and_then(|()| scenario(bed));
    let off = bed.set_resilient(None);
    result.and(off)
}
