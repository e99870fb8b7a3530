//! Keeping next-hop neighbours resolved for the FIB next-hop mode.
//!
//! `bpf_fib_lookup` only reads the neighbour table: a next hop the host never talked to
//! has no entry, and its packets are dropped (`drop_fib_no_neigh`). The daemon therefore
//! asks the kernel to manage an entry for every backend's next hop (the backend itself
//! when on-link, else its gateway): `ip neigh add NEXTHOP dev IFACE managed`, where
//! *managed* (Linux 5.16+, `NTF_MANAGED`) makes the kernel resolve the entry and keep it
//! resolved without traffic. Existing entries (static or learned) are left as they are.
//! iproute2's `ip` does the netlink work.
//!
//! An interface that goes down takes its entries with it: the daemon calls [`manage`]
//! again when an interface comes up or a route is added (`super::link_events`).

use std::{collections::BTreeSet, net::IpAddr, process::Command};

use tracing::{debug, warn};

/// The next hop of `addr` and its device, from `ip -j route get`.
fn next_hop(addr: IpAddr) -> Option<(IpAddr, String)> {
    let out = Command::new("ip")
        .args(["-j", "route", "get", &addr.to_string()])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let routes: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let route = routes.get(0)?;
    let dev = route.get("dev")?.as_str()?.to_owned();
    let hop = route
        .get("gateway")
        .and_then(|g| g.as_str())
        .and_then(|g| g.parse().ok())
        .unwrap_or(addr);
    Some((hop, dev))
}

/// Makes sure every backend's next hop has a neighbour entry the kernel keeps resolved;
/// warns about backends not reachable through `iface`.
pub(super) fn manage(iface: &str, backends: impl IntoIterator<Item = IpAddr>) {
    let mut done = BTreeSet::new();
    for backend in backends {
        let Some((hop, dev)) = next_hop(backend) else {
            warn!("no route to backend {backend}: its packets will be dropped (drop_fib_fail)");
            continue;
        };
        if dev != iface {
            warn!(
                "backend {backend} is routed via {dev}, not {iface}: its packets are redirected there"
            );
        }
        if !done.insert((hop, dev.clone())) {
            continue;
        }
        match Command::new("ip")
            .args(["neigh", "add", &hop.to_string(), "dev", &dev, "managed"])
            .output()
        {
            Ok(out) if out.status.success() => {
                debug!("managing the neighbour {hop} on {dev} (next hop of {backend})");
            }
            // An entry exists already (static, or learned): leave it.
            Ok(_) => {}
            Err(e) => warn!("cannot run ip to manage the neighbour {hop}: {e}"),
        }
    }
}
