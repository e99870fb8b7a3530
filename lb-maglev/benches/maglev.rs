//! Criterion benchmarks of the Maglev table builder, run by `cargo xtask bench`:
//! `MaglevTable::build` for the four (M, N) configurations of `common::CONFIGS`, with equal and
//! with unequal weights, the paper's pseudocode as a same-run yardstick, and the
//! fingerprint. `maglev_memory` prints medians and peak memory as one table.

use std::{hint::black_box, time::Duration};

use criterion::{BenchmarkId, Criterion};
use lb_maglev::MaglevTable;
use lb_maglev::defaults::MAGLEV_SEED;

#[path = "common/mod.rs"]
mod common;

fn build(c: &mut Criterion) {
    for (group_name, weighted) in [("maglev_build", false), ("maglev_build_weighted", true)] {
        let mut group = c.benchmark_group(group_name);
        for (size, n) in common::CONFIGS {
            let backends = common::backends(n, weighted);
            group.bench_with_input(
                BenchmarkId::new(format!("M={size}"), format!("N={n}")),
                &backends,
                |b, backends| {
                    b.iter(|| {
                        MaglevTable::build(black_box(backends), size, MAGLEV_SEED)
                            .expect("valid benchmark configuration")
                    });
                },
            );
        }
        group.finish();
    }
}

fn paper_reference(c: &mut Criterion) {
    let mut group = c.benchmark_group("paper_pseudocode");
    for (size, n) in common::CONFIGS {
        let backends = common::backends(n, false);
        let permutations = common::permutations(&backends, size);
        // Same input, same table: the yardstick computes what the builder computes.
        let table = MaglevTable::build(&backends, size, MAGLEV_SEED).expect("valid");
        let reference = common::paper_reference(size, &permutations);
        assert!(
            table
                .slots()
                .iter()
                .zip(&reference)
                .all(|(&a, &b)| i64::from(a) == i64::from(b)),
            "the builder and the paper's pseudocode disagree for M={size} N={n}"
        );
        group.bench_with_input(
            BenchmarkId::new(format!("M={size}"), format!("N={n}")),
            &permutations,
            |b, permutations| b.iter(|| common::paper_reference(size, black_box(permutations))),
        );
    }
    group.finish();
}

fn fingerprint(c: &mut Criterion) {
    let table = MaglevTable::build(&common::backends(100, false), 65_537, MAGLEV_SEED)
        .expect("valid benchmark configuration");
    c.bench_function("maglev_fingerprint/M=65537/N=100", |b| {
        b.iter(|| {
            // A fresh clone has no cached fingerprint.
            let fresh = black_box(&table).clone();
            fresh.fingerprint()
        });
    });
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    build(&mut criterion);
    paper_reference(&mut criterion);
    fingerprint(&mut criterion);
    criterion.final_summary();
}
