//! Steady client traffic through a bed while the load balancer is restarted: long-lived
//! TCP connections that each send a line every [`SteadyOptions::period`] and must be
//! answered by the backend that answered their first line, plus new connections at a
//! steady rate that must be answered at all. Every outcome is counted in the phase that
//! was current when it happened ([`Steady::phase`]), so a test can say which restart
//! broke what.
//!
//! The VIP packets that reach the LB namespace's own IP stack (which happens only while
//! no XDP program runs on its interface) are counted by an nftables rule in that
//! namespace ([`HostStackCounter`]).

use std::{
    net::SocketAddr,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    thread::Scope,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    netns::NetNs,
    packets::{VIP4, VIP6},
    testbed::{TcpConn, TestBed, vip_tcp},
};

/// What to run.
#[derive(Clone, Debug)]
pub struct SteadyOptions {
    /// Long-lived connections (each on its own kernel-chosen port).
    pub long_lived: usize,
    /// Each long-lived connection sends a line this often.
    pub period: Duration,
    /// New connections per second (one line each, then closed).
    pub new_per_sec: u32,
}

/// Counts of one phase.
#[derive(Debug, Default)]
struct Counts {
    lines: AtomicU64,
    broken: AtomicU64,
    wrong_backend: AtomicU64,
    new_ok: AtomicU64,
    new_failed: AtomicU64,
}

/// The outcome of one phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseTally {
    /// The phase's name.
    pub name: String,
    /// Lines answered on long-lived connections.
    pub lines: u64,
    /// Long-lived connections that failed (error or timeout) in this phase.
    pub broken: u64,
    /// Replies on long-lived connections from another backend than their first.
    pub wrong_backend: u64,
    /// New connections answered.
    pub new_ok: u64,
    /// New connections that failed.
    pub new_failed: u64,
    /// Backends that answered new connections, with counts.
    pub new_backends: Vec<(String, u64)>,
}

/// One phase: its name, counts, and the backends that answered its new connections.
type Phase = (String, Counts, Mutex<Vec<(String, u64)>>);

/// Traffic running in scoped threads until [`Steady::stop`].
pub struct Steady {
    phases: Mutex<Vec<Phase>>,
    current: AtomicUsize,
    stop: AtomicBool,
}

impl Steady {
    /// A harness in phase `first` (call [`Self::run`] to start the traffic).
    pub fn new(first: &str) -> Self {
        Self {
            phases: Mutex::new(vec![(
                first.to_owned(),
                Counts::default(),
                Mutex::default(),
            )]),
            current: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// Starts a new phase.
    pub fn phase(&self, name: &str) {
        let mut phases = self.phases.lock().expect("phases");
        phases.push((name.to_owned(), Counts::default(), Mutex::default()));
        self.current.store(phases.len() - 1, Ordering::SeqCst);
    }

    fn count(&self, f: impl FnOnce(&Counts)) {
        let phases = self.phases.lock().expect("phases");
        f(&phases[self.current.load(Ordering::SeqCst)].1);
    }

    fn new_backend(&self, name: &str) {
        let phases = self.phases.lock().expect("phases");
        let mut seen = phases[self.current.load(Ordering::SeqCst)]
            .2
            .lock()
            .expect("backends");
        match seen.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => seen.push((name.to_owned(), 1)),
        }
    }

    /// Opens the long-lived connections (each greeted once), then spawns their threads
    /// and the new-connection thread into `scope`.
    ///
    /// # Errors
    /// When a long-lived connection cannot be opened.
    pub fn run<'scope, 'env>(
        &'env self,
        scope: &'scope Scope<'scope, 'env>,
        bed: &'env TestBed,
        options: &SteadyOptions,
    ) -> anyhow::Result<()> {
        let dst = vip_tcp(false);
        let mut conns = Vec::new();
        for j in 0..options.long_lived {
            let src = SocketAddr::new(bed.client_addr(j % bed.client_count(), false), 0);
            let mut conn = bed
                .tcp_connect(src, dst)
                .with_context(|| format!("long-lived connection {j}"))?;
            let backend = conn.exchange("hello").context("first line")?;
            conns.push((conn, backend));
        }
        // Ten connections per thread.
        let mut groups: Vec<Vec<(TcpConn, String)>> = Vec::new();
        for (i, c) in conns.into_iter().enumerate() {
            if i % 10 == 0 {
                groups.push(Vec::new());
            }
            groups.last_mut().expect("group").push(c);
        }
        let period = options.period;
        for group in groups {
            scope.spawn(move || self.long_lived(group, period));
        }
        let gap = Duration::from_secs_f64(1.0 / f64::from(options.new_per_sec.max(1)));
        scope.spawn(move || self.new_connections(bed, dst, gap));
        Ok(())
    }

    fn long_lived(&self, mut group: Vec<(TcpConn, String)>, period: Duration) {
        let mut next = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            group.retain_mut(|(conn, backend)| match conn.exchange("line") {
                Ok(reply) if reply == *backend => {
                    self.count(|c| {
                        c.lines.fetch_add(1, Ordering::Relaxed);
                    });
                    true
                }
                Ok(_) => {
                    self.count(|c| {
                        c.wrong_backend.fetch_add(1, Ordering::Relaxed);
                    });
                    true
                }
                Err(_) => {
                    self.count(|c| {
                        c.broken.fetch_add(1, Ordering::Relaxed);
                    });
                    false
                }
            });
            next += period;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            } else {
                next = Instant::now();
            }
        }
    }

    fn new_connections(&self, bed: &TestBed, dst: SocketAddr, gap: Duration) {
        let mut next = Instant::now();
        let mut i = 0usize;
        while !self.stop.load(Ordering::SeqCst) {
            let src = SocketAddr::new(bed.client_addr(i % bed.client_count(), false), 0);
            i += 1;
            match bed.tcp_exchange(src, dst, "new") {
                Ok(name) => {
                    self.count(|c| {
                        c.new_ok.fetch_add(1, Ordering::Relaxed);
                    });
                    self.new_backend(&name);
                }
                Err(_) => self.count(|c| {
                    c.new_failed.fetch_add(1, Ordering::Relaxed);
                }),
            }
            next += gap;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            } else {
                next = Instant::now();
            }
        }
    }

    /// Stops the threads (they end with the scope) and returns every phase's tally.
    pub fn stop(&self) -> Vec<PhaseTally> {
        self.stop.store(true, Ordering::SeqCst);
        // Let in-flight exchanges finish into the last phase.
        std::thread::sleep(Duration::from_millis(50));
        let phases = self.phases.lock().expect("phases");
        phases
            .iter()
            .map(|(name, c, seen)| PhaseTally {
                name: name.clone(),
                lines: c.lines.load(Ordering::SeqCst),
                broken: c.broken.load(Ordering::SeqCst),
                wrong_backend: c.wrong_backend.load(Ordering::SeqCst),
                new_ok: c.new_ok.load(Ordering::SeqCst),
                new_failed: c.new_failed.load(Ordering::SeqCst),
                new_backends: seen.lock().expect("backends").clone(),
            })
            .collect()
    }
}

/// An nftables counter of the VIP packets that reach a namespace's own IP stack
/// (prerouting, before any routing decision); removed with the namespace.
pub struct HostStackCounter<'ns> {
    ns: &'ns NetNs,
}

impl<'ns> HostStackCounter<'ns> {
    /// Installs the table `lbt_host_stack` with one counter rule per VIP family in `ns`.
    ///
    /// # Errors
    /// When `nft` fails.
    pub fn install(ns: &'ns NetNs) -> anyhow::Result<Self> {
        let rules = format!(
            "table inet lbt_host_stack {{\n chain pre {{\n  type filter hook prerouting priority -500; policy accept;\n  ip daddr {VIP4} counter\n  ip6 daddr {VIP6} counter\n }}\n}}\n"
        );
        let path =
            std::env::temp_dir().join(format!("lbt-nft-{}-{}.nft", std::process::id(), ns.name()));
        std::fs::write(&path, rules)?;
        let out = ns.exec("nft", &["-f", path.to_str().context("path")?])?;
        let _ = std::fs::remove_file(&path);
        if !out.status.success() {
            bail!("nft: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(Self { ns })
    }

    /// VIP packets counted so far.
    ///
    /// # Errors
    /// When `nft` fails or prints something unexpected.
    pub fn packets(&self) -> anyhow::Result<u64> {
        let out = self
            .ns
            .exec("nft", &["-j", "list", "table", "inet", "lbt_host_stack"])?;
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("nft -j output")?;
        let mut total = 0;
        for item in json["nftables"].as_array().context("nftables")? {
            if let Some(exprs) = item["rule"]["expr"].as_array() {
                for e in exprs {
                    total += e["counter"]["packets"].as_u64().unwrap_or(0);
                }
            }
        }
        Ok(total)
    }
}
