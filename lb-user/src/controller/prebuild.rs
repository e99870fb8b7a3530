//! Building the tables of a change ahead of its plan, on several threads: a start or
//! a reload of many VIPs spends most of its time in the Maglev builds and the tables'
//! fingerprints (about 1 ms per VIP at M = 65,537), which are pure and independent, so
//! the planner hands a chunk of VIPs' builds to up to `available_parallelism` threads
//! before it plans them in order (ids, entries and operations stay sequential and
//! deterministic). A change of one table builds it on the calling thread.
//!
//! Chunks bound the memory: at most [`CHUNK`] builder tables (4 bytes per slot) are
//! alive at once before the planner converts them.

use std::{collections::HashMap, sync::Arc, time::Instant};

use super::table::TableFacts;
use crate::maglev::{Backend, MaglevError, MaglevTable};

/// What a table is built from: the active backends with their weights, and the size.
pub(super) type TableKey = (Vec<Backend>, u32);

/// VIPs whose builds are started together.
pub(super) const CHUNK: usize = 32;

/// A built table, its facts (fingerprint included) and the build's time (ms).
pub(super) struct Built {
    pub(super) table: Arc<MaglevTable>,
    pub(super) facts: Arc<TableFacts>,
    pub(super) build_ms: f64,
}

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

/// Builds every table of `keys` (distinct), spread over the available threads.
pub(super) fn build_all(
    keys: Vec<TableKey>,
    seed: u64,
) -> HashMap<TableKey, Result<Built, MaglevError>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(keys.len());
    if threads <= 1 {
        return keys
            .into_iter()
            .map(|key| {
                let built = build_one(&key, seed);
                (key, built)
            })
            .collect();
    }
    let mut shares: Vec<Vec<TableKey>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, key) in keys.into_iter().enumerate() {
        shares[i % threads].push(key);
    }
    std::thread::scope(|scope| {
        let workers: Vec<_> = shares
            .into_iter()
            .map(|share| {
                scope.spawn(move || {
                    share
                        .into_iter()
                        .map(|key| {
                            let built = build_one(&key, seed);
                            (key, built)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_build_what_one_builds() {
        let keys: Vec<TableKey> = (1..=5_u8)
            .map(|n| {
                let backends = (1..=n)
                    .map(|i| Backend::new(std::net::Ipv4Addr::new(198, 51, 100, i), 1))
                    .collect();
                (backends, 1_009)
            })
            .chain([(Vec::new(), 1_009), (Vec::new(), 8)])
            .collect();
        let built = build_all(keys.clone(), 7);
        assert_eq!(built.len(), keys.len());
        for key in &keys {
            match (&built[key], build_one(key, 7)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(*a.table, *b.table);
                    assert_eq!(a.facts, b.facts);
                }
                (Err(a), Err(b)) => assert_eq!(a, &b),
                _ => panic!("threads and one build disagree for {key:?}"),
            }
        }
    }
}
