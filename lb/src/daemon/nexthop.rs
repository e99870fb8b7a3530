//! Next hops of the backends in FIB next-hop mode, watched so that a backend whose
//! packets cannot leave (no route, or a neighbour that does not resolve: a mistyped
//! address) is reported when it is added — a warning, its `nexthop` in `lb status`, a
//! counter — and not only by the data plane's `drop_fib_fail` / `drop_fib_no_neigh`
//! counters once its share of new flows is already being dropped.
//!
//! A thread (`lb-nexthop`) asks the kernel with iproute2, as `neighbours` does: `ip -j
//! route get ADDR` for the next hop and device, then `ip -j neigh show to HOP dev DEV`
//! for its neighbour entry (which the daemon has the kernel manage). A new backend is
//! checked at once, one whose neighbour is still being resolved every
//! [`PENDING_PERIOD`], every other one every [`PERIOD`]. States:
//! - `resolved`: a usable neighbour (REACHABLE, STALE, DELAY, PROBE, PERMANENT, NOARP),
//!   or an address of the host itself;
//! - `resolving`: INCOMPLETE (or no entry yet) for less than [`RESOLVE_GRACE`];
//! - `no neighbour`: FAILED, or still unresolved after the grace time;
//! - `no route`: the kernel has no route to the backend.
//!
//! Each change to an unresolved state is logged once as a warning and counted
//! (`nexthop_unresolved_total`); a recovery is logged too. With health checks the
//! backend also fails its probes (host unreachable) and leaves the table.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    process::Command,
    sync::{Arc, Mutex, PoisonError, mpsc},
    time::{Duration, Instant},
};

use tracing::{info, warn};

use crate::control::NexthopStatus;

/// How often a resolved (or failed) next hop is looked up again.
pub const PERIOD: Duration = Duration::from_secs(10);
/// How often a next hop still being resolved is looked up again.
pub const PENDING_PERIOD: Duration = Duration::from_millis(500);
/// How long a neighbour may stay unresolved before it counts as missing: ARP and ND
/// give up after three probes a second apart (`ucast_solicit`, `retrans_time_ms`).
pub const RESOLVE_GRACE: Duration = Duration::from_secs(4);

/// One watched backend address.
struct Watched {
    /// The VIPs it serves (for the log).
    vips: Vec<String>,
    first_seen: Instant,
    checked: Option<Instant>,
    status: Option<NexthopStatus>,
}

#[derive(Default)]
struct Shared {
    watched: BTreeMap<IpAddr, Watched>,
    unresolved_total: u64,
}

/// The watcher; its thread ends when it is dropped.
pub struct NexthopMonitor {
    shared: Arc<Mutex<Shared>>,
    wake: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NexthopMonitor {
    /// Starts the thread `lb-nexthop`, watching nothing yet.
    ///
    /// # Errors
    /// When the thread cannot be created.
    pub fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (wake, woken) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("lb-nexthop".to_owned())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared, &woken)
            })?;
        Ok(Self {
            shared,
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    /// Watches exactly `backends` (address and the VIP it serves); new addresses are
    /// looked up at once. An empty list (gateway next-hop mode) watches nothing.
    pub fn watch(&self, backends: impl IntoIterator<Item = (String, IpAddr)>) {
        let mut vips: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
        for (vip, addr) in backends {
            vips.entry(addr).or_default().push(vip);
        }
        {
            let mut shared = lock(&self.shared);
            shared.watched.retain(|addr, _| vips.contains_key(addr));
            for (addr, vips) in vips {
                shared
                    .watched
                    .entry(addr)
                    .and_modify(|w| w.vips.clone_from(&vips))
                    .or_insert_with(|| Watched {
                        vips,
                        first_seen: Instant::now(),
                        checked: None,
                        status: None,
                    });
            }
        }
        if let Some(wake) = &self.wake {
            let _ = wake.send(());
        }
    }

    /// The next hop of `addr`, once looked up.
    pub fn status(&self, addr: IpAddr) -> Option<NexthopStatus> {
        lock(&self.shared)
            .watched
            .get(&addr)
            .and_then(|w| w.status.clone())
    }

    /// (Backends unresolved now, times a backend became unresolved since start.)
    pub fn counts(&self) -> (usize, u64) {
        let shared = lock(&self.shared);
        let now = shared
            .watched
            .values()
            .filter(|w| w.status.as_ref().is_some_and(|s| !s.is_ok()))
            .count();
        (now, shared.unresolved_total)
    }
}

impl Drop for NexthopMonitor {
    fn drop(&mut self) {
        // Closing the channel ends the thread's wait.
        self.wake.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The thread: looks up what is due, then waits for a change or the next due time.
fn run(shared: &Mutex<Shared>, woken: &mpsc::Receiver<()>) {
    loop {
        let due: Vec<(IpAddr, Instant)> = {
            let shared = lock(shared);
            let now = Instant::now();
            shared
                .watched
                .iter()
                .filter(|(_, w)| {
                    let period = match &w.status {
                        Some(s) if s.state != "resolving" => PERIOD,
                        _ => PENDING_PERIOD,
                    };
                    w.checked.is_none_or(|t| now.duration_since(t) >= period)
                })
                .map(|(addr, w)| (*addr, w.first_seen))
                .collect()
        };
        for (addr, first_seen) in due {
            let status = lookup(addr, first_seen.elapsed());
            record(shared, addr, status);
        }
        match woken.recv_timeout(PENDING_PERIOD) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Stores a lookup's result, logging and counting a change to or from unresolved.
fn record(shared: &Mutex<Shared>, addr: IpAddr, status: NexthopStatus) {
    let mut shared = lock(shared);
    let Some(w) = shared.watched.get_mut(&addr) else {
        return;
    };
    let was_bad = w.status.as_ref().is_some_and(|s| !s.is_ok());
    let is_bad = !status.is_ok();
    let vips = w.vips.join(", ");
    w.checked = Some(Instant::now());
    w.status = Some(status.clone());
    if is_bad && !was_bad {
        shared.unresolved_total += 1;
        warn!(
            backend = %addr,
            "next hop not resolved ({}{}): packets to this backend are dropped \
             (drop_fib_fail / drop_fib_no_neigh), so is its share of new flows of {vips}; \
             check its address",
            status.state,
            status.detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
        );
    } else if was_bad && !is_bad {
        info!(
            backend = %addr,
            "next hop {} ({})",
            status.state,
            status.via.as_deref().unwrap_or("")
        );
    }
}

/// The next hop of `addr` now, `age` after it was first seen.
fn lookup(addr: IpAddr, age: Duration) -> NexthopStatus {
    let route = ip_json(&["route", "get", &addr.to_string()]);
    let route = match route {
        Ok(r) => r,
        Err(e) => {
            return NexthopStatus {
                state: "no route".to_owned(),
                via: None,
                detail: Some(e),
            };
        }
    };
    let Some(dev) = route[0]["dev"].as_str() else {
        return NexthopStatus {
            state: "no route".to_owned(),
            via: None,
            detail: Some(format!("route without a device: {route}")),
        };
    };
    if route[0]["type"].as_str() == Some("local") {
        return NexthopStatus {
            state: "resolved".to_owned(),
            via: Some(format!("local dev {dev}")),
            detail: Some("a local address".to_owned()),
        };
    }
    let hop = route[0]["gateway"]
        .as_str()
        .and_then(|g| g.parse().ok())
        .unwrap_or(addr);
    let via = Some(format!("{hop} dev {dev}"));
    let neigh = ip_json(&["neigh", "show", "to", &hop.to_string(), "dev", dev]);
    let states: Vec<String> = neigh
        .ok()
        .and_then(|n| {
            n[0]["state"].as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
        })
        .unwrap_or_default();
    let usable = ["REACHABLE", "STALE", "DELAY", "PROBE", "PERMANENT", "NOARP"];
    let state = if states.iter().any(|s| usable.contains(&s.as_str())) {
        "resolved"
    } else if states.iter().any(|s| s == "FAILED") || age >= RESOLVE_GRACE {
        "no neighbour"
    } else {
        "resolving"
    };
    NexthopStatus {
        state: state.to_owned(),
        via,
        detail: Some(if states.is_empty() {
            "no neighbour entry".to_owned()
        } else {
            format!("neighbour {}", states.join(","))
        }),
    }
}

/// `ip -j ARGS...` parsed, or `ip`'s error text.
fn ip_json(args: &[&str]) -> Result<serde_json::Value, String> {
    let out = Command::new("ip")
        .arg("-j")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("ip -j {}: {e}", args.join(" ")))
}
