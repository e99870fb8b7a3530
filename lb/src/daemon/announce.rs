//! Announcing the VIP addresses this instance can serve, through BIRD ([`Announcer`]).
//!
//! Several instances with the same configuration build the same Maglev tables, so a
//! router that spreads a VIP's flows over them by ECMP sends every flow to the same
//! backend whichever instance it reaches. Each instance tells the routers, by BGP,
//! which VIP addresses it can take; BIRD speaks BGP, and the daemon talks only to the
//! kernel: it keeps one host route per announced address (`/32`, `/128`, type
//! `blackhole`) in the routing table `announce.table`, tagged with the route protocol
//! `announce.protocol` ([`lb_dataplane::routes`]). BIRD's kernel protocol learns that table
//! (`learn`) from netlink notifications as they happen, and its BGP protocol exports
//! what it learned; removing a route withdraws the address at the routers within tens
//! of milliseconds (`lb-bench --fleet-only` measures it; docs/src/guide/fleets.md has figures).
//!
//! # The rule
//! An address is announced while all of these hold:
//! - `announce.enabled`;
//! - the data plane is attached (the daemon sets this after attaching);
//! - the operator has not withdrawn it (`lb vip withdraw`);
//! - at least one of its VIPs has a usable backend: active, weight > 0, and not found
//!   unhealthy by its probes. A VIP whose backends are all unhealthy is not usable even
//!   when its policy fails open (`all_down = "open"` keeps balancing over them here, but
//!   another instance may reach them): the instance steps back and lets the routers
//!   prefer instances that can serve.
//!
//! One route serves every VIP of an address (80/tcp and 53/udp of 203.0.113.10), so
//! the address stays announced while any of its VIPs is usable: withdrawing it because
//! one port has no backend would take the other ports down with it on every instance.
//!
//! # When the daemon stops, and when the host dies
//! The routes are kernel state, not the process's: they stay when the daemon exits,
//! and BIRD keeps announcing them. So what happens at exit follows what happens to the
//! data plane ([`Announcer::exit`]): a daemon that detaches the XDP program removes its
//! routes first ([`DatapathAtExit::Detached`]); one that leaves a pinned data plane
//! forwarding keeps them ([`DatapathAtExit::KeepsForwarding`]), so traffic keeps
//! arriving where it is still served, and the next start reconciles the table (a
//! crashed daemon leaves both the same way). While no daemon runs, what was announced
//! stays announced: health checks and changes pause, so a backend that fails meanwhile
//! is not noticed; withdraw first (`lb vip withdraw`) before a long stop. A start with
//! `announce.enabled = false` removes what an earlier run left, once. `lb detach`,
//! which removes the data plane without a daemon, removes the routes first with
//! [`lb_dataplane::routes::flush`] (see [`lb_dataplane::pinned::detach`]). When BIRD stops or crashes, its BGP sessions close and the
//! routers withdraw at once. When the whole host dies, nothing is sent: the routers drop
//! its routes when the BGP hold timer expires (3 s with the fleets chapter's `hold time 3`), or
//! within BFD's detection time if BFD is configured.
//!
//! # The operator's withdrawals
//! `lb vip withdraw --vip ADDR` is kept in the daemon's memory: it survives reloads
//! (a maintenance withdrawal must not be undone by a configuration push) but not a
//! restart. To keep an instance out across restarts, set `announce.enabled = false`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    net::IpAddr,
    time::{Duration, Instant},
};

use tracing::{debug, info, warn};

use crate::{
    config::{Announce, BackendState, Vip},
    control::{
        AddressAnnouncement, AnnounceSummary, Status, VipAction, VipAnnouncement, VipChange,
    },
    controller::Controller,
};
use lb_dataplane::Dataplane;
use lb_dataplane::routes::{RouteError, RouteTable};

/// How often the table is read back even when nothing changed, to repair a route
/// removed or added behind the daemon's back.
pub const VERIFY_PERIOD: Duration = Duration::from_secs(5);

/// Whether a VIP can take new flows on this instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    /// This many usable backends (at least one).
    Usable(usize),
    /// None usable; why.
    NoUsableBackend(String),
}

/// Each applied VIP's [`Serving`], from the controller's desired state and health.
pub fn serving<D: Dataplane>(controller: &Controller<D>) -> Vec<(Vip, Serving)> {
    let Some(desired) = controller.applied() else {
        return Vec::new();
    };
    desired
        .vips
        .iter()
        .map(|(vip, spec)| {
            let in_service: Vec<_> = spec
                .backends
                .iter()
                .filter(|(_, b)| b.state == BackendState::Active && b.weight > 0)
                .map(|(key, _)| key)
                .collect();
            let usable = in_service
                .iter()
                .filter(|key| !controller.is_unhealthy(vip, key))
                .count();
            let serving = match (usable, in_service.len()) {
                (0, 0) => Serving::NoUsableBackend(
                    "no usable backend: none in service (drained, down or weight 0)".to_owned(),
                ),
                (0, n) => Serving::NoUsableBackend(format!(
                    "no usable backend: all {n} in service are unhealthy"
                )),
                (n, _) => Serving::Usable(n),
            };
            (*vip, serving)
        })
        .collect()
}

/// What an exiting daemon leaves of the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatapathAtExit {
    /// The XDP program is detached: nothing serves the VIPs here any more, so the
    /// routes are removed before it goes.
    Detached,
    /// A pinned data plane keeps forwarding with its last state: the routes stay, and
    /// traffic keeps coming to it.
    KeepsForwarding,
}

/// The decision for one address.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decision {
    announce: bool,
    reason: String,
    vips: Vec<(Vip, Serving)>,
}

/// Why `lb vip` was refused.
#[derive(Debug, thiserror::Error)]
pub enum AnnounceError {
    /// `[announce]` is off.
    #[error("announcements are off (announce.enabled = false): nothing is announced or withdrawn")]
    Off,
    /// No VIP has this address.
    #[error("{0} is not the address of any configured VIP")]
    UnknownAddress(IpAddr),
}

/// The announcements of one daemon: the rule of the module documentation applied to
/// the VIPs after every change, and the routes kept equal to its answer.
pub struct Announcer {
    config: Announce,
    routes: Box<dyn RouteTable>,
    attached: bool,
    /// Withdrawn with `lb vip withdraw`.
    withdrawn: BTreeSet<IpAddr>,
    /// The decisions of the last [`Self::sync`], by address.
    decisions: BTreeMap<IpAddr, Decision>,
    /// The routes in the table, as last written and read back, and where.
    published: BTreeSet<IpAddr>,
    published_in: (u32, u8),
    /// When each address's state (announced or not) last changed.
    since: BTreeMap<IpAddr, (bool, Instant)>,
    last_read: Option<Instant>,
    /// Whether an instance that is off has looked once for routes an earlier run left.
    swept: bool,
    route_changes: u64,
    last_error: Option<String>,
}

impl Announcer {
    /// An announcer with `config`, writing through `routes`; it touches nothing until
    /// the data plane is attached ([`Self::set_attached`]) and [`Self::sync`] runs.
    pub fn new(config: Announce, routes: Box<dyn RouteTable>) -> Self {
        Self {
            config,
            routes,
            attached: false,
            withdrawn: BTreeSet::new(),
            decisions: BTreeMap::new(),
            published: BTreeSet::new(),
            published_in: (config.table, config.protocol),
            since: BTreeMap::new(),
            last_read: None,
            swept: false,
            route_changes: 0,
            last_error: None,
        }
    }

    /// Takes a reloaded `[announce]`; the next [`Self::sync`] moves or removes the
    /// routes accordingly.
    pub fn configure(&mut self, config: Announce) {
        self.config = config;
    }

    /// Records whether the data plane is attached.
    pub fn set_attached(&mut self, attached: bool) {
        self.attached = attached;
    }

    /// Decides every address of `vips` and makes the table hold exactly the announced
    /// ones. The kernel is only asked when the answer changed or [`VERIFY_PERIOD`]
    /// passed; a failure is logged once, kept for `lb status`, and retried next time.
    pub fn sync(&mut self, vips: &[(Vip, Serving)]) {
        self.withdrawn
            .retain(|a| vips.iter().any(|(v, _)| v.addr == *a));
        self.decisions = decide(&self.config, self.attached, &self.withdrawn, vips);
        let desired: BTreeSet<IpAddr> = self
            .decisions
            .iter()
            .filter(|(_, d)| d.announce)
            .map(|(a, _)| *a)
            .collect();
        let here = (self.config.table, self.config.protocol);
        if self.published.is_empty() {
            // Nothing to move out of the previous table.
            self.published_in = here;
        }
        let moved = here != self.published_in;
        // Enabled but not attached yet: a table left by an earlier run stays as it is
        // until this run can serve. Off: the table is read once after attaching, since
        // an earlier run that was on and stopped with its datapath forwarding left its
        // routes (the next run may have been turned off meanwhile); then never again.
        let sweep = !self.config.enabled && self.attached && !self.swept;
        let involved =
            (self.config.enabled && self.attached) || !self.published.is_empty() || sweep;
        let due = self.last_read.is_none_or(|t| t.elapsed() >= VERIFY_PERIOD);
        if (involved || moved) && (moved || due || sweep || desired != self.published) {
            let quiet = sweep && self.published.is_empty();
            let result = self.reconcile(&desired, moved);
            if quiet {
                // Off: a failure here (no iproute2, say) is not this host's concern.
                if let Err(e) = result {
                    debug!(
                        "announce: off; cannot check table {}: {e}",
                        self.config.table
                    );
                }
            } else {
                self.record(result);
            }
        }
        if sweep {
            self.swept = true;
        }
        self.note_states();
    }

    /// Makes the table hold `desired` (none when off); `moved`: the table or protocol
    /// changed, so the routes in the old one go first.
    fn reconcile(&mut self, desired: &BTreeSet<IpAddr>, moved: bool) -> Result<(), RouteError> {
        if moved {
            let (table, protocol) = self.published_in;
            let old = self.routes.list(table, protocol)?;
            let old: Vec<IpAddr> = old.into_iter().collect();
            let written = self.routes.write(table, protocol, &[], &old);
            let left = self.routes.list(table, protocol)?;
            self.route_changes += old.len().saturating_sub(left.len()) as u64;
            if !left.is_empty() {
                written?;
                return Err(RouteError::Ip(format!(
                    "{} routes remain in the previous table {table}",
                    left.len()
                )));
            }
            self.published.clear();
            self.published_in = (self.config.table, self.config.protocol);
        }
        let (table, protocol) = self.published_in;
        let present = self.routes.list(table, protocol)?;
        self.last_read = Some(Instant::now());
        let add: Vec<IpAddr> = desired.difference(&present).copied().collect();
        let remove: Vec<IpAddr> = present.difference(desired).copied().collect();
        if add.is_empty() && remove.is_empty() {
            self.published = present;
            return Ok(());
        }
        let written = self.routes.write(table, protocol, &add, &remove);
        let now = self.routes.list(table, protocol)?;
        self.route_changes += now.symmetric_difference(&present).count() as u64;
        for a in &add {
            if now.contains(a) {
                info!("announce: {a} announced (route in table {table})");
            }
        }
        for a in &remove {
            if !now.contains(a) {
                info!("announce: {a} withdrawn (route removed from table {table})");
            }
        }
        self.published = now;
        if self.published == *desired {
            Ok(())
        } else {
            written?;
            Err(RouteError::Ip(format!(
                "table {table} holds {} of the {} routes wanted",
                self.published.intersection(desired).count(),
                desired.len()
            )))
        }
    }

    fn record(&mut self, result: Result<(), RouteError>) {
        match result {
            Ok(()) => {
                if self.last_error.take().is_some() {
                    info!("announce: the routing table is in order again");
                }
            }
            Err(e) => {
                let message = e.to_string();
                if self.last_error.as_deref() != Some(message.as_str()) {
                    warn!("announce: {message} (retrying)");
                }
                self.last_error = Some(message);
            }
        }
    }

    /// Records when each address's published state changed.
    fn note_states(&mut self) {
        let now = Instant::now();
        self.since.retain(|a, _| self.decisions.contains_key(a));
        for address in self.decisions.keys() {
            let announced = self.published.contains(address);
            match self.since.get(address) {
                Some((was, _)) if *was == announced => {}
                _ => {
                    self.since.insert(*address, (announced, now));
                }
            }
        }
    }

    /// `lb vip ACTION --vip ADDR`: records the operator's choice and applies it at once
    /// with `vips` (as [`Self::sync`]); returns what happened.
    ///
    /// # Errors
    /// Announcements are off, or no VIP has the address.
    pub fn request(
        &mut self,
        action: VipAction,
        address: IpAddr,
        vips: &[(Vip, Serving)],
    ) -> Result<VipChange, AnnounceError> {
        let address = address.to_canonical();
        if !self.config.enabled {
            return Err(AnnounceError::Off);
        }
        if !vips.iter().any(|(v, _)| v.addr == address) {
            return Err(AnnounceError::UnknownAddress(address));
        }
        let changed = match action {
            VipAction::Withdraw => self.withdrawn.insert(address),
            VipAction::Announce => self.withdrawn.remove(&address),
        };
        self.sync(vips);
        let table = self.config.table;
        let announced = self.published.contains(&address);
        let reason = self
            .decisions
            .get(&address)
            .map_or_else(String::new, |d| d.reason.clone());
        let mut lines = Vec::new();
        match (action, changed) {
            (VipAction::Withdraw, false) => {
                lines.push(format!("{address}: already withdrawn by the operator"));
            }
            (VipAction::Withdraw, true) => lines.push(format!(
                "{address}: withdrawn by the operator (route removed from table {table}; BGP \
                 withdraws it; packets that still arrive are served)"
            )),
            (VipAction::Announce, false) => {
                lines.push(format!("{address}: was not withdrawn by the operator"));
            }
            (VipAction::Announce, true) => {
                lines.push(format!("{address}: no longer withdrawn by the operator"));
            }
        }
        if action == VipAction::Announce {
            lines.push(if announced {
                format!("{address}: announced (route in table {table})")
            } else {
                format!("{address}: not announced: {reason}")
            });
        }
        if let Some(e) = &self.last_error {
            lines.push(format!(
                "warning: the routing table could not be written: {e}"
            ));
        }
        Ok(VipChange {
            action,
            address: address.to_string(),
            changed,
            withdrawn_by_operator: self.withdrawn.contains(&address),
            announced,
            reason,
            table,
            lines,
        })
    }

    /// Leaves the table as the data plane is left (see the module documentation).
    pub fn exit(&mut self, datapath: DatapathAtExit) {
        if self.published.is_empty() {
            return;
        }
        match datapath {
            DatapathAtExit::KeepsForwarding => info!(
                "announce: {} routes kept in table {}: the data plane keeps forwarding",
                self.published.len(),
                self.published_in.0
            ),
            DatapathAtExit::Detached => {
                self.attached = false;
                let (table, protocol) = self.published_in;
                let present: Vec<IpAddr> = self.published.iter().copied().collect();
                let written = self.routes.write(table, protocol, &[], &present);
                match self.routes.list(table, protocol) {
                    Ok(left) if left.is_empty() => {
                        info!(
                            "announce: withdrew {} routes from table {table} before detaching",
                            present.len()
                        );
                        self.published.clear();
                    }
                    Ok(left) => warn!(
                        "announce: {} routes remain in table {table} after exit ({})",
                        left.len(),
                        written.err().map(|e| e.to_string()).unwrap_or_default()
                    ),
                    Err(e) => warn!("announce: cannot check table {table} at exit: {e}"),
                }
            }
        }
    }

    /// Fills the announcement parts of `status` from the last [`Self::sync`].
    pub fn annotate(&self, status: &mut Status) {
        let ms = |t: &Instant| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
        status.announce = AnnounceSummary {
            enabled: self.config.enabled,
            table: self.config.table,
            protocol: self.config.protocol,
            attached: self.attached,
            addresses: self
                .decisions
                .iter()
                .map(|(address, d)| AddressAnnouncement {
                    address: address.to_string(),
                    prefix: format!("{address}/{}", if address.is_ipv4() { 32 } else { 128 }),
                    announced: self.published.contains(address),
                    reason: d.reason.clone(),
                    withdrawn_by_operator: self.withdrawn.contains(address),
                    vips: d.vips.iter().map(|(v, _)| v.to_string()).collect(),
                    since_ms: self.since.get(address).map_or(0, |(_, t)| ms(t)),
                })
                .collect(),
            route_changes: self.route_changes,
            last_error: self.last_error.clone(),
        };
        for v in &mut status.vips {
            let Ok(vip) = v.vip.parse::<Vip>() else {
                continue;
            };
            let Some(d) = self.decisions.get(&vip.addr) else {
                continue;
            };
            let own = d.vips.iter().find(|(x, _)| *x == vip).map(|(_, s)| s);
            let mut a = vip_announcement(
                &self.config,
                self.attached,
                self.withdrawn.contains(&vip.addr),
                self.published.contains(&vip.addr),
                own,
            );
            if a.servable && !a.announced {
                let _ = write!(
                    a.reason,
                    ", but its route is not in table {}{}",
                    self.published_in.0,
                    self.last_error
                        .as_ref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                );
            }
            v.announce = Some(a);
        }
    }
}

/// What `lb status` says about one VIP.
fn vip_announcement(
    config: &Announce,
    attached: bool,
    withdrawn: bool,
    announced: bool,
    own: Option<&Serving>,
) -> VipAnnouncement {
    let (servable, reason) = match own {
        _ if !config.enabled => (false, OFF.to_owned()),
        _ if !attached => (false, NOT_ATTACHED.to_owned()),
        _ if withdrawn => (false, OPERATOR.to_owned()),
        Some(Serving::Usable(n)) => (true, usable_text(*n)),
        Some(Serving::NoUsableBackend(why)) => (
            false,
            if announced {
                format!("{why} (its address stays announced for another VIP of it)")
            } else {
                why.clone()
            },
        ),
        None => (false, "not applied".to_owned()),
    };
    VipAnnouncement {
        announced,
        servable,
        reason,
    }
}

const OFF: &str = "announcements are off (announce.enabled = false)";
const NOT_ATTACHED: &str = "the data plane is not attached";
const OPERATOR: &str = "withdrawn by the operator (lb vip withdraw)";

fn usable_text(n: usize) -> String {
    format!("{n} usable backend{}", if n == 1 { "" } else { "s" })
}

/// The rule of the module documentation, for every address of `vips`.
fn decide(
    config: &Announce,
    attached: bool,
    withdrawn: &BTreeSet<IpAddr>,
    vips: &[(Vip, Serving)],
) -> BTreeMap<IpAddr, Decision> {
    let mut by_address: BTreeMap<IpAddr, Vec<(Vip, Serving)>> = BTreeMap::new();
    for (vip, serving) in vips {
        by_address
            .entry(vip.addr)
            .or_default()
            .push((*vip, serving.clone()));
    }
    by_address
        .into_iter()
        .map(|(address, mut vips)| {
            vips.sort_by_key(|(v, _)| *v);
            let usable: Vec<String> = vips
                .iter()
                .filter_map(|(v, s)| match s {
                    Serving::Usable(n) => Some(format!("{v}: {}", usable_text(*n))),
                    Serving::NoUsableBackend(_) => None,
                })
                .collect();
            let (announce, reason) = if !config.enabled {
                (false, OFF.to_owned())
            } else if !attached {
                (false, NOT_ATTACHED.to_owned())
            } else if withdrawn.contains(&address) {
                (false, OPERATOR.to_owned())
            } else if usable.is_empty() {
                (
                    false,
                    "no VIP of this address has a usable backend".to_owned(),
                )
            } else {
                (true, usable.join(", "))
            };
            (
                address,
                Decision {
                    announce,
                    reason,
                    vips,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
