//! Long-lived TCP connections kept busy while a test fails and restores LB instances
//! ([`LongFlows`]): each connection exchanges a line about every [`ROUND`], and records
//! its longest exchange (the stall a user would see while TCP retransmits towards an
//! instance that is gone) and whether it broke (a reset, a timeout, or an answer from
//! another backend than its first). The connections can be held idle (no packet at
//! all) for a while and resumed ([`LongFlows::pause`]).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{netns::NetNs, testbed::TcpConn, testbed::client};

/// The pause between two exchanges of one connection.
pub const ROUND: Duration = Duration::from_millis(100);
/// Worker threads sharing the connections.
const WORKERS: usize = 6;

/// What one connection did.
#[derive(Clone, Debug)]
pub struct FlowState {
    /// Its client address and port.
    pub local: SocketAddr,
    /// The backend that answered its first line (`b<k>`).
    pub backend: String,
    /// Exchanges completed.
    pub exchanges: u64,
    /// The longest exchange (send to reply).
    pub max_stall: Duration,
    /// When the last completed exchange started.
    pub last_ok_start: Instant,
    /// Why it broke, if it did.
    pub broken: Option<String>,
}

/// The connections and the workers exchanging on them; stopped by [`Self::finish`] or
/// on drop.
pub struct LongFlows {
    states: Arc<Vec<Mutex<FlowState>>>,
    stop: Arc<AtomicBool>,
    pause: Arc<Pause>,
    workers: Vec<JoinHandle<()>>,
}

/// The workers' pause: asked by [`LongFlows::pause`], and how many workers have
/// finished their round and rest.
#[derive(Default)]
struct Pause {
    asked: AtomicBool,
    resting: AtomicUsize,
}

impl LongFlows {
    /// Opens one connection from each of `sources` to `dst` in the client namespace
    /// `client` (one at a time, each answered before the next), then starts exchanging
    /// on all of them. `timeout` bounds every connect and exchange.
    ///
    /// # Errors
    /// A connection that cannot be opened or is not answered.
    pub fn open(
        client: &NetNs,
        sources: &[SocketAddr],
        dst: SocketAddr,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let conns: Vec<(TcpConn, String)> = client
            .enter(|| {
                sources
                    .iter()
                    .enumerate()
                    .map(|(j, &src)| {
                        let mut conn = client::tcp_connect(src, dst, timeout)
                            .with_context(|| format!("connection {j} from {src} to {dst}"))?;
                        let backend = conn.exchange("hello").with_context(|| {
                            format!("first exchange of connection {j} from {src}")
                        })?;
                        Ok((conn, backend))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()
            })?
            .context("opening the long-lived connections")?;
        let now = Instant::now();
        let mut states = Vec::new();
        let mut chunks: Vec<Vec<(usize, TcpConn)>> = (0..WORKERS).map(|_| Vec::new()).collect();
        for (i, (conn, backend)) in conns.into_iter().enumerate() {
            states.push(Mutex::new(FlowState {
                local: conn.local_addr()?,
                backend,
                exchanges: 1,
                max_stall: Duration::ZERO,
                last_ok_start: now,
                broken: None,
            }));
            chunks[i % WORKERS].push((i, conn));
        }
        let states = Arc::new(states);
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new(Pause::default());
        let workers = chunks
            .into_iter()
            .enumerate()
            .map(|(w, chunk)| {
                let states = Arc::clone(&states);
                let stop = Arc::clone(&stop);
                let pause = Arc::clone(&pause);
                std::thread::Builder::new()
                    .name(format!("fleet-flows-{w}"))
                    .spawn(move || work(chunk, &states, &stop, &pause))
            })
            .collect::<Result<Vec<_>, _>>()
            .context("starting the traffic workers")?;
        Ok(Self {
            states,
            stop,
            pause,
            workers,
        })
    }

    /// Holds every connection idle: returns once no worker exchanges any more, so no
    /// packet of these connections is sent until [`Self::resume`]. `timeout` bounds
    /// the wait for the exchanges under way.
    ///
    /// # Errors
    /// When a worker does not finish its round within `timeout`.
    pub fn pause(&self, timeout: Duration) -> anyhow::Result<()> {
        self.pause.asked.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.pause.resting.load(Ordering::SeqCst) < self.workers.len() {
            if Instant::now() > deadline {
                bail!("the traffic workers did not pause within {timeout:?}");
            }
            std::thread::sleep(ROUND / 10);
        }
        Ok(())
    }

    /// Lets the connections exchange again after [`Self::pause`].
    pub fn resume(&self) {
        self.pause.asked.store(false, Ordering::SeqCst);
    }

    /// Every connection's state now, in opening order.
    pub fn snapshot(&self) -> Vec<FlowState> {
        self.states
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect()
    }

    /// Their client addresses, in opening order.
    pub fn locals(&self) -> Vec<SocketAddr> {
        self.snapshot().iter().map(|s| s.local).collect()
    }

    /// Waits until every connection has either broken or completed an exchange that
    /// started after `after` (so traffic flows again after a change), at most
    /// `timeout`.
    ///
    /// # Errors
    /// On timeout, naming how many connections have not made progress.
    pub fn wait_progress(&self, after: Instant, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let waiting = self
                .snapshot()
                .iter()
                .filter(|s| s.broken.is_none() && s.last_ok_start <= after)
                .count();
            if waiting == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{waiting} connections made no progress within {timeout:?}");
            }
            std::thread::sleep(ROUND / 2);
        }
    }

    /// Stops the workers and returns every connection's final state (the connections
    /// are closed).
    pub fn finish(mut self) -> Vec<FlowState> {
        self.stop_workers();
        self.snapshot()
    }

    fn stop_workers(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for LongFlows {
    fn drop(&mut self) {
        self.stop_workers();
    }
}

/// One worker: an exchange on each of its live connections, then a pause, until told
/// to stop; while a pause is asked, no exchange.
fn work(
    mut conns: Vec<(usize, TcpConn)>,
    states: &[Mutex<FlowState>],
    stop: &AtomicBool,
    pause: &Pause,
) {
    let mut resting = false;
    while !stop.load(Ordering::Relaxed) {
        if pause.asked.load(Ordering::SeqCst) {
            if !resting {
                resting = true;
                pause.resting.fetch_add(1, Ordering::SeqCst);
            }
            std::thread::sleep(ROUND / 10);
            continue;
        }
        if resting {
            resting = false;
            pause.resting.fetch_sub(1, Ordering::SeqCst);
        }
        let round = Instant::now();
        conns.retain_mut(|(i, conn)| {
            let started = Instant::now();
            let answer = conn.exchange("ping");
            let took = started.elapsed();
            let mut state = states[*i].lock().unwrap_or_else(PoisonError::into_inner);
            state.max_stall = state.max_stall.max(took);
            match answer {
                Ok(name) if name == state.backend => {
                    state.exchanges += 1;
                    state.last_ok_start = started;
                    true
                }
                Ok(name) => {
                    state.broken = Some(format!("answered by {name} instead of {}", state.backend));
                    false
                }
                Err(e) => {
                    state.broken = Some(format!("{} after {took:?}", e.kind()));
                    false
                }
            }
        });
        if let Some(rest) = ROUND.checked_sub(round.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}
