//! Building the tables of a change ahead of its plan, on worker threads: a start or a
//! reload of many VIPs spends most of its time in the Maglev builds and the tables'
//! fingerprints (about 1 ms per VIP at M = 65,537), which are pure and independent.
//! [`Ahead`] hands the change's builds, in the order the planner will ask for them, to
//! `available_parallelism` workers, which build while the planner plans the VIPs
//! before them (ids, entries and operations stay sequential and deterministic). A
//! change of one table builds it on the calling thread.
//!
//! [`Builds`] adds the sharing: a table built once is kept for the other VIPs of the
//! change with the same inputs, until the last of them takes it. The planner and the
//! recovery of an adopted data plane (which checks recorded tables it cannot recognise
//! by their digest) both take their tables from it.
//!
//! Memory stays bounded: a worker takes the next build only once it has handed over
//! its last one, at most [`QUEUED`] finished builder tables (4 bytes per slot) wait in
//! the queue, and the planner keeps aside only those that finished before an earlier
//! one (builds of one change take about the same time, so few). A worker that panics
//! hands over nothing more: the planner drains the queue, builds the missing table
//! itself, and meets the same panic there.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
        mpsc::{Receiver, SyncSender, sync_channel},
    },
    thread::JoinHandle,
    time::Instant,
};

use super::{desired::VipSpec, table::TableFacts};
use crate::config::BackendState;
use lb_maglev::{Backend, MaglevError, MaglevTable};

/// What a table is built from: the active backends with their weights, and the size.
pub(super) type TableKey = (Vec<Backend>, u32);

/// Table-builder inputs: the backends with state active, with their weights, in key
/// order.
pub(super) fn table_inputs(spec: &VipSpec) -> Vec<Backend> {
    spec.backends
        .iter()
        .filter(|(_, b)| b.state == BackendState::Active)
        .map(|(k, b)| Backend::new(*k, b.weight))
        .collect()
}

/// What `spec`'s table is built from: its inputs and its size.
pub(super) fn table_key(spec: &VipSpec) -> TableKey {
    (table_inputs(spec), spec.table_size)
}

/// Finished builds that may wait for the planner.
pub(super) const QUEUED: usize = 32;

/// A built table, its facts (fingerprint included) and the build's time (ms).
pub(super) struct Built {
    pub(super) table: Arc<MaglevTable>,
    pub(super) facts: Arc<TableFacts>,
    pub(super) build_ms: f64,
}

/// A build's outcome, as a worker hands it over: the index of its key.
type Outcome = (usize, Result<Built, MaglevError>);

/// Builds the table of `key` with `seed`, and its facts.
pub(super) fn build_one(key: &TableKey, seed: u64) -> Result<Built, MaglevError> {
    let started = Instant::now();
    let table = MaglevTable::build(&key.0, key.1, seed)?;
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    let facts = Arc::new(TableFacts::of(&table));
    Ok(Built {
        table: Arc::new(table),
        facts,
        build_ms,
    })
}

/// The builds of a change, under way on worker threads in the order of their keys.
/// Dropping it stops the workers (each finishes the build it is in) and waits for them.
pub(super) struct Ahead {
    /// The index of each key in the workers' order.
    index: HashMap<TableKey, usize>,
    /// `None` once dropped, which tells the workers to stop.
    results: Option<Receiver<Outcome>>,
    /// Builds handed over before the planner asked for them.
    arrived: HashMap<usize, Result<Built, MaglevError>>,
    /// The worker threads, joined on drop.
    workers: Vec<JoinHandle<()>>,
}

impl Ahead {
    /// Nothing built ahead: every table is built when the planner asks for it.
    pub(super) fn none() -> Self {
        Self {
            index: HashMap::new(),
            results: None,
            arrived: HashMap::new(),
            workers: Vec::new(),
        }
    }

    /// Starts building every table of `keys` (distinct, in the order the planner will
    /// ask for them) with `seed`, on up to `available_parallelism` threads.
    pub(super) fn start(keys: Vec<TableKey>, seed: u64) -> Self {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self::start_on(keys, seed, threads)
    }

    /// [`Self::start`] on up to `threads` threads. One thread or one key: nothing is
    /// built ahead, the planner's thread builds it.
    fn start_on(keys: Vec<TableKey>, seed: u64, threads: usize) -> Self {
        let threads = threads.min(keys.len());
        if threads <= 1 {
            return Self::none();
        }
        let index = keys
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, k)| (k, i))
            .collect();
        let keys: Arc<[TableKey]> = keys.into();
        let next = Arc::new(AtomicUsize::new(0));
        let (sender, results) = sync_channel(QUEUED);
        let workers = (0..threads)
            .map(|_| {
                let (keys, next, sender) = (Arc::clone(&keys), Arc::clone(&next), sender.clone());
                std::thread::spawn(move || work(&keys, &next, &sender, seed))
            })
            .collect();
        Self {
            index,
            results: Some(results),
            arrived: HashMap::new(),
            workers,
        }
    }

    /// The build of `key`: waits for it when it is under way; `None` when `key` was not
    /// given to [`Self::start`] or its worker died (the caller then builds it).
    pub(super) fn take(&mut self, key: &TableKey) -> Option<Result<Built, MaglevError>> {
        let wanted = *self.index.get(key)?;
        if let Some(built) = self.arrived.remove(&wanted) {
            return Some(built);
        }
        let results = self.results.as_ref()?;
        while let Ok((i, built)) = results.recv() {
            if i == wanted {
                return Some(built);
            }
            self.arrived.insert(i, built);
        }
        None
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.results = None;
        for worker in self.workers.drain(..) {
            if let Err(panic) = worker.join()
                && !std::thread::panicking()
            {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// A table taken from [`Builds`].
pub(super) struct Taken {
    pub(super) table: Arc<MaglevTable>,
    pub(super) facts: Arc<TableFacts>,
    /// The build's time (ms); 0 for a table another VIP's build gave.
    pub(super) build_ms: f64,
    /// Whether this take built the table (it is not another VIP's build).
    pub(super) fresh: bool,
}

/// A build kept for the other VIPs that have its inputs.
struct Shared {
    table: Arc<MaglevTable>,
    facts: Arc<TableFacts>,
    /// VIPs that may still take it.
    uses: usize,
}

/// The table builds of a change: under way ahead on workers ([`Ahead`]), each built
/// once per distinct key and kept for the other VIPs that want it (BR-10: many
/// services on the same backends cost one build, not one each). A kept build goes once
/// no other VIP can use it, so many distinct VIPs keep no builder table beyond the one
/// being converted.
pub(super) struct Builds {
    ahead: Ahead,
    /// How many VIPs want each key.
    wanted: HashMap<TableKey, usize>,
    shared: HashMap<TableKey, Shared>,
    seed: u64,
}

impl Builds {
    /// Starts building `ahead` (distinct keys, in the order they will be taken) with
    /// `seed`; `wanted` counts the VIPs that will take each key (a key may be taken
    /// without being built ahead, or wanted, and is then built when taken).
    pub(super) fn start(ahead: Vec<TableKey>, wanted: HashMap<TableKey, usize>, seed: u64) -> Self {
        Self {
            ahead: Ahead::start(ahead, seed),
            wanted,
            shared: HashMap::new(),
            seed,
        }
    }

    /// No build ahead and none wanted: each take builds its table.
    pub(super) fn none(seed: u64) -> Self {
        Self::start(Vec::new(), HashMap::new(), seed)
    }

    /// The table of `key`: another VIP's build of it, the workers' build, or one made
    /// now on the caller's thread.
    ///
    /// # Errors
    /// The builder's error for `key`.
    pub(super) fn take(&mut self, key: &TableKey) -> Result<Taken, MaglevError> {
        if let Some(shared) = self.shared.get_mut(key) {
            let found = Taken {
                table: Arc::clone(&shared.table),
                facts: Arc::clone(&shared.facts),
                build_ms: 0.0,
                fresh: false,
            };
            shared.uses -= 1;
            if shared.uses == 0 {
                self.shared.remove(key);
            }
            return Ok(found);
        }
        let Built {
            table,
            facts,
            build_ms,
        } = match self.ahead.take(key) {
            Some(built) => built?,
            None => build_one(key, self.seed)?,
        };
        let others = self.wanted.get(key).map_or(0, |n| n.saturating_sub(1));
        if others > 0 {
            self.wanted.insert(key.clone(), 0);
            self.shared.insert(
                key.clone(),
                Shared {
                    table: Arc::clone(&table),
                    facts: Arc::clone(&facts),
                    uses: others,
                },
            );
        }
        Ok(Taken {
            table,
            facts,
            build_ms,
            fresh: true,
        })
    }
}

/// A worker: builds the next key not yet taken until none is left or the planner has
/// gone.
fn work(keys: &[TableKey], next: &AtomicUsize, results: &SyncSender<Outcome>, seed: u64) {
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(key) = keys.get(i) else {
            return;
        };
        if results.send((i, build_one(key, seed))).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<TableKey> {
        (1..=5_u8)
            .map(|n| {
                let backends = (1..=n)
                    .map(|i| Backend::new(std::net::Ipv4Addr::new(198, 51, 100, i), 1))
                    .collect();
                (backends, 1_009)
            })
            .chain([(Vec::new(), 1_009), (Vec::new(), 8)])
            .collect()
    }

    fn assert_same(key: &TableKey, ahead: Result<Built, MaglevError>) {
        match (ahead, build_one(key, 7)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(*a.table, *b.table);
                assert_eq!(a.facts, b.facts);
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            _ => panic!("the workers and one build disagree for {key:?}"),
        }
    }

    #[test]
    fn workers_build_what_one_builds_whatever_order_the_planner_asks() {
        let keys = keys();
        let mut ahead = Ahead::start_on(keys.clone(), 7, 3);
        // Out of the workers' order: the last first, then the rest.
        let (last, rest) = keys.split_last().expect("keys");
        assert_same(last, ahead.take(last).expect("built ahead"));
        for key in rest {
            assert_same(key, ahead.take(key).expect("built ahead"));
        }
        assert!(ahead.take(last).is_none(), "a build is handed over once");
        let other = (
            vec![Backend::new(std::net::Ipv4Addr::new(192, 0, 2, 1), 1)],
            13,
        );
        assert!(ahead.take(&other).is_none(), "a key not given is not built");
    }

    #[test]
    fn a_build_is_shared_by_the_vips_that_want_it_and_built_again_beyond_them() {
        let keys = keys();
        let wanted = HashMap::from([(keys[2].clone(), 2), (keys[3].clone(), 1)]);
        let mut builds = Builds::start(vec![keys[2].clone(), keys[3].clone()], wanted, 7);
        let first = builds.take(&keys[2]).expect("build");
        let second = builds.take(&keys[2]).expect("build");
        assert!(first.fresh && !second.fresh);
        assert!(Arc::ptr_eq(&first.table, &second.table) && second.build_ms == 0.0);
        // Wanted twice: a third take builds it once more, on this thread.
        let third = builds.take(&keys[2]).expect("build");
        assert!(third.fresh && !Arc::ptr_eq(&first.table, &third.table));
        assert_eq!(*third.table, *first.table);
        // A key neither built ahead nor wanted is built when taken.
        let other = builds.take(&keys[0]).expect("build");
        assert!(other.fresh);
        assert_same(
            &keys[0],
            Ok(Built {
                table: other.table,
                facts: other.facts,
                build_ms: 0.0,
            }),
        );
        assert!(builds.take(&keys[3]).expect("build").fresh);
    }

    #[test]
    fn dropping_stops_the_workers_with_builds_still_queued() {
        let many: Vec<TableKey> = (1..=200_u8)
            .map(|i| {
                (
                    vec![Backend::new(std::net::Ipv4Addr::new(198, 51, 100, i), 1)],
                    1_009,
                )
            })
            .collect();
        let mut ahead = Ahead::start_on(many.clone(), 7, 3);
        assert_same(&many[0], ahead.take(&many[0]).expect("built ahead"));
        // The queue fills up and the workers block; dropping must still end them.
        drop(ahead);
    }
}
