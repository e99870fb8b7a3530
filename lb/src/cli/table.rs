//! `lb table`: build and compare Maglev tables offline, for operators (no root, no
//! daemon, no maps):
//!
//! - `lb table build [--size M] [--seed S] [--json] [VIP OPTIONS] BACKEND...` prints
//!   each backend's slot count and share, min/max/mean slots, the max/avg ratio, the
//!   fingerprint (the VIP's: with `--hash-fields`, as `lb status` shows it) and the
//!   build time, and with `--flow` the slot and backend of each flow ([`predict`]);
//! - `lb table diff [--size M] [--seed S] [--json] --old LIST --new LIST` prints how many
//!   slots change owner between the tables of two backend sets, how many of those move
//!   between backends present in both, and how many go to added backends.
//!
//! `BACKEND` is `ADDR`, `ADDR:PORT` or `[V6ADDR]:PORT`, optionally followed by `=WEIGHT`
//! (default 1, 0 = drained); `LIST` is a comma-separated list of them. Errors name the
//! offending argument (`lb` exits with status 2 for them); warnings (e.g. a table
//! smaller than 100 x the backends) go to stderr, or into the `warnings` field with
//! `--json`.

use std::{
    fmt::Write as _,
    str::FromStr,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::Output;
use crate::defaults;
use lb_common::hash_fields::{Fields, HashFields};
use lb_maglev::{
    Backend, FINGERPRINT_VERSION, MaglevError, MaglevTable, TableDiff, parse_backend_list,
    validate_table_size,
};

pub mod predict;

pub use predict::{FlowPrediction, VipArgs};

/// How many backend keys the text output of `diff` lists before summarising.
const KEYS_LISTED: usize = 10;

/// `lb table`: offline Maglev table tools.
#[derive(Debug, clap::Args)]
pub struct TableArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TableCommand,
}

/// The `lb table` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum TableCommand {
    /// Build a table: per-backend slots and shares, balance, fingerprint, build time.
    Build(BuildArgs),
    /// Compare the tables of two backend sets: slots that change owner, and why.
    Diff(DiffArgs),
}

/// Options shared by `build` and `diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct TableOptions {
    /// Table size M: a prime from 2 to 4000037 (slots in the lookup table).
    #[arg(long, value_name = "M", default_value_t = defaults::TABLE_SIZE, value_parser = parse_table_size)]
    pub size: u32,
    /// Seed of the backend hash (decimal, or hexadecimal with 0x); every instance
    /// must use the same one.
    #[arg(long, value_name = "S", default_value_t = defaults::MAGLEV_SEED, value_parser = parse_seed)]
    pub seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `lb table build`.
#[derive(Debug, Clone, clap::Args)]
pub struct BuildArgs {
    /// Size, seed and output format.
    #[command(flatten)]
    pub options: TableOptions,
    /// The VIP: its hash fields and the flows to predict.
    #[command(flatten)]
    pub vip: VipArgs,
    /// The backends, in the `BACKEND` form of the module documentation.
    #[arg(
        value_name = "BACKEND",
        help = "Backends: ADDR, ADDR:PORT or [V6ADDR]:PORT, each optionally followed by \
                =WEIGHT (default 1; 0 = drained)"
    )]
    pub backends: Vec<Backend>,
}

/// Arguments of `lb table diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct DiffArgs {
    /// Size, seed and output format.
    #[command(flatten)]
    pub options: TableOptions,
    /// The old backend set: comma-separated BACKENDs (may be empty: "").
    #[arg(long, value_name = "LIST")]
    pub old: BackendList,
    /// The new backend set: comma-separated BACKENDs (may be empty: "").
    #[arg(long, value_name = "LIST")]
    pub new: BackendList,
}

/// A comma-separated backend list argument (see [`parse_backend_list`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendList(pub Vec<Backend>);

impl FromStr for BackendList {
    type Err = MaglevError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_backend_list(text).map(Self)
    }
}

/// Parses and validates `--size` (a prime in `[2, MAX_TABLE_SIZE]`).
///
/// # Errors
/// The text is not a `u32`, or [`validate_table_size`] rejects it.
pub fn parse_table_size(text: &str) -> Result<u32, String> {
    let size: u32 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a table size (an integer from 2 to 4000037)"))?;
    validate_table_size(size).map_err(|err| err.to_string())?;
    Ok(size)
}

/// Parses `--seed`: a decimal `u64`, or hexadecimal with a `0x` prefix.
///
/// # Errors
/// The text is neither.
pub fn parse_seed(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| {
        format!("{text:?} is not a seed (a 64-bit integer, decimal or 0x-hexadecimal)")
    })
}

/// Why `lb table` failed: an argument the table builder (or the VIP's hash fields)
/// rejected. The text names it.
#[derive(Debug, thiserror::Error)]
#[error("invalid {argument}: {problem}")]
pub struct TableCliError {
    /// The argument, e.g. `--size 7`, `--old list` or `--hash-source-prefix`.
    pub argument: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Runs `lb table`: the report as text (warnings apart) or as one JSON object
/// (warnings inside).
///
/// # Errors
/// [`TableCliError`] naming the argument the builder rejected.
pub fn run(args: &TableArgs) -> Result<Output, TableCliError> {
    match &args.command {
        TableCommand::Build(build) => run_build(build),
        TableCommand::Diff(diff) => run_diff(diff),
    }
}

fn run_build(args: &BuildArgs) -> Result<Output, TableCliError> {
    let options = &args.options;
    let fields = args.vip.hash_fields()?;
    let started = Instant::now();
    let table = MaglevTable::build(&args.backends, options.size, options.seed)
        .map_err(|problem| argument_error(problem, options.size, "BACKEND list"))?;
    let build_time = started.elapsed();
    let flows = args.vip.predict(&table, fields)?;
    let report = BuildReport::new(&table, build_time, fields).with_flows(flows);
    Ok(if options.json {
        Output::text(to_json(&report))
    } else {
        Output {
            text: report.to_text(),
            warnings: report.warnings,
        }
    })
}

fn run_diff(args: &DiffArgs) -> Result<Output, TableCliError> {
    let options = &args.options;
    let old = MaglevTable::build(&args.old.0, options.size, options.seed)
        .map_err(|problem| argument_error(problem, options.size, "--old list"))?;
    let new = MaglevTable::build(&args.new.0, options.size, options.seed)
        .map_err(|problem| argument_error(problem, options.size, "--new list"))?;
    let report = DiffReport::new(&old, &new);
    Ok(if options.json {
        Output::text(to_json(&report))
    } else {
        Output {
            text: report.to_text(),
            warnings: report.warnings,
        }
    })
}

/// Attributes a builder error to `--size` or to the backend list argument `list`.
fn argument_error(problem: MaglevError, size: u32, list: &str) -> TableCliError {
    let argument = match problem {
        MaglevError::TableSizeTooSmall { .. }
        | MaglevError::TableSizeTooLarge { .. }
        | MaglevError::TableSizeNotPrime { .. }
        | MaglevError::TableSizeBelowBackendCount { .. } => format!("--size {size}"),
        _ => list.to_owned(),
    };
    TableCliError {
        argument,
        problem: problem.to_string(),
    }
}

/// Pretty JSON of a report and a line break (serialising these plain structs cannot
/// fail).
fn to_json(report: &impl Serialize) -> String {
    serde_json::to_string_pretty(report).expect("reports serialise to JSON") + "\n"
}

/// What `lb table build` prints; `--json` prints it as an object with these fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BuildReport {
    /// Table size M.
    pub size: u32,
    /// Hash seed.
    pub seed: u64,
    /// SHA-256 fingerprint, 64 hex digits: the VIP's (covering its hash fields unless
    /// they are the 5-tuple), as `lb status` shows it.
    pub fingerprint: String,
    /// Version of the fingerprint encoding.
    pub fingerprint_version: u32,
    /// The VIP's hash fields (`--hash-fields`; lb.toml's `vip.hash`).
    pub hash_fields: String,
    /// The client address prefix hashed (`--hash-source-prefix`), 0: the whole address.
    pub hash_source_prefix: u8,
    /// Build time in milliseconds (wall clock, this process).
    pub build_ms: f64,
    /// Every backend in table order.
    pub backends: Vec<BackendReport>,
    /// Backends with weight > 0.
    pub active_backends: usize,
    /// Fewest slots of a backend with weight > 0 (`null` for an empty table).
    pub min_slots: Option<u32>,
    /// Most slots of a backend with weight > 0.
    pub max_slots: Option<u32>,
    /// M / backends with weight > 0.
    pub mean_slots: Option<f64>,
    /// `max_slots / mean_slots`: 1.0 is perfect balance (meaningful for equal weights).
    pub max_avg_ratio: Option<f64>,
    /// The table's warnings.
    pub warnings: Vec<String>,
    /// The slot and backend of each `--flow`, in order (empty without `--flow`).
    pub flows: Vec<FlowPrediction>,
}

/// One backend's line of [`BuildReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendReport {
    /// Canonical key.
    pub key: String,
    /// Weight as given.
    pub weight: u32,
    /// Slots owned.
    pub slots: u32,
    /// `slots / M`, a fraction in [0, 1].
    pub share: f64,
    /// `weight / sum(weights)`, the share the weights ask for.
    pub ideal_share: f64,
}

impl BuildReport {
    /// The report of `table`, built in `build_time`, for a VIP hashing `fields`.
    #[must_use]
    pub fn new(table: &MaglevTable, build_time: Duration, fields: HashFields) -> Self {
        let size = f64::from(table.size());
        let backends = table
            .backends()
            .iter()
            .zip(table.slot_counts())
            .enumerate()
            .map(|(index, (backend, &slots))| BackendReport {
                key: backend.key.to_string(),
                weight: backend.weight,
                slots,
                share: f64::from(slots) / size,
                ideal_share: table.ideal_slots(index) / size,
            })
            .collect();
        let active = table.active_backends();
        let (min_slots, max_slots) = table.min_max_slots().unzip();
        let mean_slots = (active > 0).then(|| size / active as f64);
        let max_avg_ratio = max_slots
            .zip(mean_slots)
            .map(|(max, mean)| f64::from(max) / mean);
        Self {
            size: table.size(),
            seed: table.seed(),
            fingerprint: table.fingerprint().with_hash_fields(fields).to_string(),
            fingerprint_version: FINGERPRINT_VERSION,
            hash_fields: fields.fields.name().to_owned(),
            hash_source_prefix: fields.prefix,
            build_ms: build_time.as_secs_f64() * 1e3,
            backends,
            active_backends: active,
            min_slots,
            max_slots,
            mean_slots,
            max_avg_ratio,
            warnings: table.warnings().to_vec(),
            flows: Vec::new(),
        }
    }

    /// This report with the predictions `flows`.
    #[must_use]
    pub fn with_flows(mut self, flows: Vec<FlowPrediction>) -> Self {
        self.flows = flows;
        self
    }

    /// The text form (warnings excluded: they go to stderr).
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "table_size {}, seed {}, {} backends ({} with weight > 0)",
            self.size,
            self.seed,
            self.backends.len(),
            self.active_backends
        );
        if !self.backends.is_empty() {
            let width = self
                .backends
                .iter()
                .map(|b| b.key.len())
                .max()
                .unwrap_or(0)
                .max(7);
            let _ = writeln!(
                text,
                "\n{:<width$}  {:>10}  {:>7}  {:>8}  {:>8}",
                "BACKEND", "WEIGHT", "SLOTS", "SHARE", "IDEAL"
            );
            for b in &self.backends {
                let _ = writeln!(
                    text,
                    "{:<width$}  {:>10}  {:>7}  {:>7.3}%  {:>7.3}%",
                    b.key,
                    b.weight,
                    b.slots,
                    b.share * 100.0,
                    b.ideal_share * 100.0
                );
            }
            text.push('\n');
        }
        match (
            self.min_slots,
            self.max_slots,
            self.mean_slots,
            self.max_avg_ratio,
        ) {
            (Some(min), Some(max), Some(mean), Some(ratio)) => {
                let _ = writeln!(
                    text,
                    "slots per backend with weight > 0: min {min}, max {max}, mean {mean:.2}, \
                     max/avg {ratio:.4}"
                );
            }
            _ => text.push_str("empty table: no backend with weight > 0, new flows are dropped\n"),
        }
        let _ = writeln!(
            text,
            "fingerprint {} (v{})",
            self.fingerprint, self.fingerprint_version
        );
        if self.hash_fields != Fields::FiveTuple.name() {
            let prefix = match self.hash_source_prefix {
                0 => String::new(),
                p => format!(", source prefix /{p}"),
            };
            let _ = writeln!(
                text,
                "hash fields {}{prefix} (covered by the fingerprint)",
                self.hash_fields
            );
        }
        let _ = writeln!(text, "build time {:.3} ms", self.build_ms);
        for f in &self.flows {
            let _ = writeln!(
                text,
                "flow {}: slot {}, backend {}",
                f.client,
                f.slot,
                f.backend
                    .as_deref()
                    .unwrap_or("none (empty table: dropped)")
            );
        }
        text
    }
}

/// What `lb table diff` prints; `--json` prints it as an object with these fields.
/// Fractions are of `size`, in [0, 1]; see [`TableDiff`] for the definitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    /// Table size M.
    pub size: u32,
    /// Hash seed.
    pub seed: u64,
    /// Fingerprint of the old table.
    pub old_fingerprint: String,
    /// Fingerprint of the new table.
    pub new_fingerprint: String,
    /// Backends with weight > 0 in the old set.
    pub old_backends: usize,
    /// Backends with weight > 0 in the new set.
    pub new_backends: usize,
    /// Keys present only in the new set.
    pub added: Vec<String>,
    /// Keys present only in the old set (drained ones included).
    pub removed: Vec<String>,
    /// Slots whose owner changed.
    pub changed: u32,
    /// `changed / size`.
    pub changed_fraction: f64,
    /// Changed slots moving between backends present in both sets.
    pub changed_between_common: u32,
    /// `changed_between_common / size`.
    pub changed_between_common_fraction: f64,
    /// Changed slots now owned by added backends.
    pub gained_by_added: u32,
    /// `gained_by_added / size`.
    pub gained_by_added_fraction: f64,
    /// Changed slots previously owned by removed backends.
    pub lost_by_removed: u32,
    /// `lost_by_removed / size`.
    pub lost_by_removed_fraction: f64,
    /// Warnings of the two tables, prefixed `old: ` / `new: `.
    pub warnings: Vec<String>,
}

impl DiffReport {
    /// The report of moving from `old` to `new` (same size and seed).
    #[must_use]
    pub fn new(old: &MaglevTable, new: &MaglevTable) -> Self {
        let diff = TableDiff::between(old, new);
        let keys = |keys: &[lb_maglev::BackendKey]| keys.iter().map(ToString::to_string).collect();
        let warnings = old
            .warnings()
            .iter()
            .map(|w| format!("old: {w}"))
            .chain(new.warnings().iter().map(|w| format!("new: {w}")))
            .collect();
        Self {
            size: new.size(),
            seed: new.seed(),
            old_fingerprint: old.fingerprint().to_string(),
            new_fingerprint: new.fingerprint().to_string(),
            old_backends: old.active_backends(),
            new_backends: new.active_backends(),
            added: keys(&diff.added),
            removed: keys(&diff.removed),
            changed: diff.changed,
            changed_fraction: diff.changed_fraction(),
            changed_between_common: diff.changed_between_common,
            changed_between_common_fraction: diff.changed_between_common_fraction(),
            gained_by_added: diff.gained_by_added,
            gained_by_added_fraction: diff.gained_by_added_fraction(),
            lost_by_removed: diff.lost_by_removed,
            lost_by_removed_fraction: diff.lost_by_removed_fraction(),
            warnings,
        }
    }

    /// The text form (warnings excluded: they go to stderr).
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(text, "table_size {}, seed {}", self.size, self.seed);
        let _ = writeln!(
            text,
            "old: {} backends with weight > 0, fingerprint {}",
            self.old_backends, self.old_fingerprint
        );
        let _ = writeln!(
            text,
            "new: {} backends with weight > 0, fingerprint {}",
            self.new_backends, self.new_fingerprint
        );
        let _ = writeln!(
            text,
            "removed ({}): {}",
            self.removed.len(),
            list(&self.removed)
        );
        let _ = writeln!(text, "added ({}): {}", self.added.len(), list(&self.added));
        let percent = |fraction: f64| format!("{:.3}%", fraction * 100.0);
        let _ = writeln!(
            text,
            "\nslots changed: {} of {} ({})",
            self.changed,
            self.size,
            percent(self.changed_fraction)
        );
        for (label, count, fraction) in [
            (
                "moved between backends in both sets",
                self.changed_between_common,
                self.changed_between_common_fraction,
            ),
            (
                "gained by added backends",
                self.gained_by_added,
                self.gained_by_added_fraction,
            ),
            (
                "lost by removed backends",
                self.lost_by_removed,
                self.lost_by_removed_fraction,
            ),
        ] {
            let _ = writeln!(text, "  {label}: {count} ({})", percent(fraction));
        }
        text
    }
}

/// `a, b, c`, at most [`KEYS_LISTED`] keys then `and N more`; `-` when empty.
fn list(keys: &[String]) -> String {
    if keys.is_empty() {
        return "-".to_owned();
    }
    let mut text = keys
        .iter()
        .take(KEYS_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if keys.len() > KEYS_LISTED {
        let _ = write!(text, ", and {} more", keys.len() - KEYS_LISTED);
    }
    text
}

#[cfg(test)]
mod tests;
