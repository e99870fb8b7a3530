//! `lb hash`: the consistent-hashing lab ([`lb_hashlab`]) offline, for operators
//! sizing tables and engineers checking claims (no root, no daemon, no maps):
//!
//! ```text
//! lb hash [--servers N|LIST] [--keys N | --key-file FILE | --key-list LIST] [--zipf S]
//!         [--hash NAME] [--space S] [--positions NAME=P,P...]...
//!         [--schemes LIST] [--vnodes LIST] [--epsilon E] [--event EVENT]...
//!         [--peer N|LIST] [--hot K] [--replicas RF [--zones NAME=ZONE,...]]
//!         [--hot-key F] [--fail NAME] [--explain KEY]
//!         [--json]
//!         [--plot FILE.svg|FILE.png]
//! lb hash tour
//! ```
//!
//! `--explain KEY` prints the whole decision for one key in each scheme instead of the
//! report ([`lb_hashlab::explain`]); `lb hash tour` runs the consistent-hashing
//! tutorial's experiments in order ([`lb_hashlab::tour`]).
//!
//! It places the same keys with mod-N, the ring, rendezvous, jump, Maglev and bounded
//! load and prints, per scheme, the balance of keys (and requests) per server, the memory
//! and the measured lookup time; per `--event`, the keys that move and where; the ring at
//! every `--vnodes` value; hot keys; and the keys a peer with another server list places
//! differently. [`run`] returns the report (text, or JSON with `--json`) and writes the
//! `--plot` file; `main.rs` prints it and decides the exit status (2 for an invalid
//! argument, named in the message; 1 when the plot cannot be written).

use std::{
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use super::{
    Output,
    fields::HashFieldArgs,
    table::{parse_seed, parse_table_size},
};
use crate::defaults;
use lb_common::hash_fields::HashFields;
use lb_hashlab::{
    Event, Input, KeyHash, KeySet, LabInput, Params, SchemeKind, Server,
    hashes::{DEFAULT_FLOW_VIP, HASH_NAMES},
    keys::MAX_KEYS,
    plot,
    replicas::Replication,
};

/// The name of the key `--hot-key` adds (the tutorial's live score of a cricket final).
pub const HOT_KEY: &str = "live-score";

/// Arguments of `lb hash`.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct HashArgs {
    /// `lb hash tour`: the tutorial's experiments in order.
    #[command(subcommand)]
    pub command: Option<HashCommand>,
    /// Servers: a count N (named S0..S(N-1)) or a comma-separated list of NAME[=WEIGHT]
    /// (a name may be an address; list order numbers the buckets of modn and jump).
    /// Default: 5, or the servers of --positions in their order.
    #[arg(long, value_name = "N|LIST")]
    pub servers: Option<ServerList>,
    /// Generated keys: N distinct client endpoints in 198.18.0.0/15 (seeded SplitMix64).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = parse_key_count,
          conflicts_with = "key_file")]
    pub keys: usize,
    /// Keys from a file: one per line, `KEY` or `KEY COUNT` (a repeated key adds its count).
    #[arg(long, value_name = "FILE", conflicts_with = "key_list")]
    pub key_file: Option<PathBuf>,
    /// Keys on the command line, comma-separated (with --hash value: HASH or NAME=HASH).
    #[arg(long, value_name = "LIST")]
    pub key_list: Option<String>,
    /// Seed of the key generator (a 32-bit seed for `--key-gen users`).
    #[arg(long, value_name = "S", default_value_t = 1, value_parser = parse_seed)]
    pub key_seed: u64,
    /// The generated keys: `endpoints` (client endpoints, SplitMix64) or `users`
    /// (`user:N` drawn with mulberry32 as the consistent-hashing tutorial does; a
    /// repeated draw is one more request for its key). `--keys` counts draws.
    #[arg(
        long,
        value_name = "KIND",
        default_value = "endpoints",
        value_enum,
        conflicts_with = "key_file"
    )]
    pub key_gen: KeyGen,
    /// Give the keys a Zipf(S) popularity (S > 0) over --requests requests, by key order.
    #[arg(long, value_name = "S", value_parser = parse_positive)]
    pub zipf: Option<f64>,
    /// Requests spread by --zipf.
    #[arg(long, value_name = "R", default_value_t = 1_000_000, requires = "zipf")]
    pub requests: u64,
    /// Add the tutorial's hot key, `live-score`, with F times the average server load of
    /// the other requests (F > 0; 5 in the tutorial), placed after them. Keys with
    /// request counts (a KEY COUNT file, --zipf, --hot-key) add the report's bounded
    /// load on requests: by epsilon, and the hottest key's server before and after.
    #[arg(long, value_name = "F", value_parser = parse_positive)]
    pub hot_key: Option<f64>,
    /// Key hash: fnv1a32-fmix32, flow (the data plane's flow hash), xxh3, or value (a key
    /// HASH or NAME=HASH is its own hash, for worked examples).
    #[arg(long, value_name = "NAME", default_value = "xxh3", value_parser = parse_hash_name)]
    pub hash: String,
    /// Seed of the key hash (flow: 32 bits, the data plane's hash_seed; fnv: unused).
    #[arg(long, value_name = "S", default_value_t = 0, value_parser = parse_seed)]
    pub seed: u64,
    /// VIP that `--hash flow` connects endpoint keys to (TCP).
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_FLOW_VIP)]
    pub vip: SocketAddr,
    /// With `--hash flow`: the VIP's hash fields; an endpoint key then hashes as the
    /// data plane picks its slot.
    #[command(flatten)]
    pub fields: HashFieldArgs,
    /// A small hash space 0..S for worked examples: key hashes and ring positions are
    /// taken mod S (rendezvous scores are not).
    #[arg(long, value_name = "S", value_parser = parse_space)]
    pub space: Option<u64>,
    /// Explicit ring points, one NAME=P[,P...] per server (e.g. A=105,930 B=290,610):
    /// those servers get exactly these points whatever V and their weight.
    #[arg(long, value_name = "NAME=P,P", num_args = 1.., value_parser = parse_positions)]
    pub positions: Vec<(String, Vec<u64>)>,
    /// Schemes, comma-separated: modn, ring, rendezvous, jump, maglev, bounded, and the
    /// rings libketama (ketama) and nginx's hash consistent (nginx) place.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "modn,ring,rendezvous,jump,maglev,bounded"
    )]
    pub schemes: Vec<SchemeKind>,
    /// Ring points per unit of weight, comma-separated for a sweep (1,10,100,1000); the
    /// last value is the V of the ring and bounded rows.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "100",
          value_parser = parse_vnodes)]
    pub vnodes: Vec<u32>,
    /// Bounded load: each server holds at most ceil((1 + E) * keys / servers) keys (E > 0);
    /// comma-separated for a sweep (0.05,0.1,0.25,0.5,1), the last value the bounded row's.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "0.25",
          value_parser = parse_positive)]
    pub epsilon: Vec<f64>,
    /// Maglev table size M: a prime from 2 to 4000037.
    #[arg(long, value_name = "M", default_value_t = defaults::TABLE_SIZE, value_parser = parse_table_size)]
    pub table_size: u32,
    /// Seed of Maglev's backend hash (the controller's by default).
    #[arg(long, value_name = "S", default_value_t = defaults::MAGLEV_SEED, value_parser = parse_seed)]
    pub maglev_seed: u64,
    /// A change to compare (repeatable): add:NAME[=W], remove:NAME, grow:K, shrink:K,
    /// weight:NAME=W.
    #[arg(long, value_name = "EVENT")]
    pub event: Vec<Event>,
    /// A second client's server list (N or LIST): report the keys it places differently.
    #[arg(long, value_name = "N|LIST")]
    pub peer: Option<ServerList>,
    /// Hottest keys to spread over --replicas servers in the hot-key table.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub hot: usize,
    /// Replication factor RF: adds every key's preference list on the ring (the first RF
    /// distinct servers clockwise, Dynamo's) and the balance of primaries and replicas
    /// per server; also the servers each hot key is spread over in the hot-key table
    /// (default 3).
    #[arg(long, value_name = "RF")]
    pub replicas: Option<usize>,
    /// Zones of the servers for --replicas, NAME=ZONE,... (every server one zone): a
    /// preference list skips a server whose zone is already in it, until the zones run
    /// out.
    #[arg(long, value_name = "LIST", requires = "replicas")]
    pub zones: Option<ZoneMap>,
    /// Report a failure of server NAME: how many servers take its keys and how many
    /// each, for the ring with V = 1 and V = 100, rendezvous, Maglev and jump (defined
    /// only for the last server), beside the theory.
    #[arg(long, value_name = "NAME")]
    pub fail: Option<String>,
    /// Explain one key instead of the report: mod-N's division, the ring's binary
    /// search and wrap-around, every rendezvous score (raw and 0-1), jump's jumps,
    /// Maglev's slot and permutation entry, bounded load's walk past full servers.
    #[arg(long, value_name = "KEY")]
    pub explain: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the charts (keys per server, keys moved, sd/avg against V): SVG, or PNG
    /// when the name ends in .png.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub plot: Option<PathBuf>,
}

/// The subcommands of `lb hash`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum HashCommand {
    /// The consistent-hashing tutorial as a program: its sections in order, each
    /// experiment run with its parameters, the command that reruns it and a two-line
    /// explanation; `lb hash --explain` and `--plot FILE.png` take any experiment further.
    Tour(TourArgs),
}

/// Arguments of `lb hash tour`.
#[derive(Debug, Clone, clap::Args)]
pub struct TourArgs {
    /// Also write each experiment's charts into this directory, as SVG and PNG.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
}

/// Why `lb hash` failed. The text names the option at fault.
#[derive(Debug, thiserror::Error)]
pub enum HashCliError {
    /// An option's value cannot be used.
    #[error("{option}: {problem}")]
    Argument {
        /// The option, e.g. `--key-file`.
        option: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The plot could not be drawn or written.
    #[error("--plot: {0}")]
    Plot(String),
}

impl HashCliError {
    fn argument(option: &'static str, problem: impl Into<String>) -> Self {
        Self::Argument {
            option,
            problem: problem.into(),
        }
    }
}

/// Runs `lb hash`: returns the report (text or JSON) and writes the `--plot` file.
///
/// # Errors
/// [`HashCliError::Argument`] naming the option (an unreadable or empty key file, a seed
/// too wide for the flow hash, `--zipf` with counted keys, a server list or event the
/// schemes cannot use); [`HashCliError::Plot`] when the SVG cannot be written.
pub fn run(args: &HashArgs) -> Result<Output, HashCliError> {
    if let Some(HashCommand::Tour(tour)) = &args.command {
        return run_tour(tour);
    }
    let input = lab_input(args)?;
    if let Some(key) = &args.explain {
        return explain(&input, key, args.json);
    }
    let report = lb_hashlab::run(&input).map_err(|error| {
        let option = match error.input {
            Input::Servers => "--servers",
            Input::Peer => "--peer",
            Input::Event(_) => "--event",
            Input::Vnodes => "--vnodes",
            Input::Epsilon => "--epsilon",
            Input::TableSize => "--table-size",
            Input::Schemes => "--schemes",
            Input::Replicas => "--replicas",
            Input::Zones => "--zones",
            Input::Fail => "--fail",
        };
        HashCliError::argument(option, error.problem)
    })?;
    let mut output = if args.json {
        let mut json = serde_json::to_string_pretty(&report).expect("reports serialise to JSON");
        json.push('\n');
        json
    } else {
        report.to_text()
    };
    if let Some(path) = &args.plot {
        let charts = write_plot(&report, path)?;
        if !args.json {
            output.push_str(&format!("\nplot: {} ({charts} charts)\n", path.display()));
            for why in plot::omitted(&report) {
                output.push_str(&format!("  {why}\n"));
            }
        }
    }
    Ok(Output::text(output))
}

/// Writes the charts of `report` to `path`: PNG when the name ends in `.png`, SVG
/// otherwise. Returns the number of charts.
fn write_plot(report: &lb_hashlab::LabReport, path: &Path) -> Result<usize, HashCliError> {
    let is_png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let bytes = if is_png {
        plot::png(report).map_err(HashCliError::Plot)?
    } else {
        plot::svg(report).map_err(HashCliError::Plot)?.into_bytes()
    };
    fs::write(path, bytes)
        .map_err(|e| HashCliError::Plot(format!("writing {}: {e}", path.display())))?;
    Ok(plot::charts(report).len())
}

/// `lb hash tour`.
fn run_tour(args: &TourArgs) -> Result<Output, HashCliError> {
    let tour = lb_hashlab::tour::tour().map_err(|e| HashCliError::argument("tour", e.problem))?;
    let mut text = tour.to_text();
    if let Some(dir) = &args.plots {
        fs::create_dir_all(dir)
            .map_err(|e| HashCliError::Plot(format!("creating {}: {e}", dir.display())))?;
        text.push_str("pictures:\n");
        for section in &tour.sections {
            for (name, report) in &section.reports {
                for ext in ["svg", "png"] {
                    let path = dir.join(format!("{name}.{ext}"));
                    let charts = write_plot(report, &path)?;
                    text.push_str(&format!("  {} ({charts} charts)\n", path.display()));
                }
            }
        }
    }
    text.truncate(text.trim_end().len());
    text.push('\n');
    Ok(Output::text(text))
}

/// `--explain KEY`: the key's decision in every scheme.
fn explain(input: &LabInput, key: &str, json: bool) -> Result<Output, HashCliError> {
    check_value_key(&input.params.hash, key, "--explain")?;
    let keys = input.keys.keys();
    let hashes: Vec<u64> = keys.iter().map(|k| input.params.key_hash(k)).collect();
    let explanation = lb_hashlab::explain::explain(
        key,
        &input.servers,
        &input.schemes,
        &input.params,
        keys,
        &hashes,
    )
    .map_err(|(kind, error)| HashCliError::argument("--servers", format!("{kind}: {error}")))?;
    Ok(Output::text(if json {
        let mut text =
            serde_json::to_string_pretty(&explanation).expect("explanations serialise to JSON");
        text.push('\n');
        text
    } else {
        explanation.to_text()
    }))
}

/// With `--hash value`, a key must be `HASH` or `NAME=HASH`.
fn check_value_key(hash: &KeyHash, key: &str, option: &'static str) -> Result<(), HashCliError> {
    if *hash == KeyHash::Value && lb_hashlab::hashes::given_value(key).is_none() {
        return Err(HashCliError::argument(
            option,
            format!("key {key:?} is not HASH or NAME=HASH (--hash value), HASH below 2^32"),
        ));
    }
    Ok(())
}

/// What `--key-gen` generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyGen {
    /// Distinct client endpoints in 198.18.0.0/15 (seeded SplitMix64).
    Endpoints,
    /// The tutorial's `user:N` keys from mulberry32 (repeats kept as requests).
    Users,
}

/// The generated keys of `args` and their description.
fn generated_keys(args: &HashArgs) -> Result<(KeySet, String), HashCliError> {
    let keys = match args.key_gen {
        KeyGen::Endpoints => KeySet::generate(args.keys, args.key_seed),
        KeyGen::Users => {
            let seed = u32::try_from(args.key_seed).map_err(|_| {
                HashCliError::argument("--key-seed", "--key-gen users takes a 32-bit seed")
            })?;
            KeySet::mulberry32_users(args.keys, seed)
        }
    }
    .map_err(|problem| HashCliError::argument("--keys", problem))?;
    let source = match args.key_gen {
        KeyGen::Endpoints => format!("generated, seed {}", args.key_seed),
        KeyGen::Users => format!("mulberry32 user:N, seed {}", args.key_seed),
    };
    Ok((keys, source))
}

/// The lab's input from the arguments (reads `--key-file`).
fn lab_input(args: &HashArgs) -> Result<LabInput, HashCliError> {
    let (mut keys, key_source) = match &args.key_file {
        None if args.key_list.is_some() => {
            let list = args.key_list.as_deref().unwrap_or_default();
            let keys = KeySet::parse(
                &list
                    .split(',')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
            .map_err(|problem| HashCliError::argument("--key-list", problem))?;
            (keys, "--key-list".to_owned())
        }
        Some(path) => {
            let text = fs::read_to_string(path).map_err(|e| {
                HashCliError::argument("--key-file", format!("reading {}: {e}", path.display()))
            })?;
            let keys = KeySet::parse(&text).map_err(|problem| {
                HashCliError::argument("--key-file", format!("{}: {problem}", path.display()))
            })?;
            (keys, path.display().to_string())
        }
        None => generated_keys(args)?,
    };
    if let Some(s) = args.zipf {
        if keys.is_counted() {
            return Err(HashCliError::argument(
                "--zipf",
                "the key file already gives request counts",
            ));
        }
        keys.apply_zipf(s, args.requests);
    }
    let servers = lab_servers(args)?;
    if let Some(factor) = args.hot_key {
        let active = servers.iter().filter(|s| s.weight > 0).count();
        keys.add_hot_key(HOT_KEY, factor, active)
            .map_err(|problem| HashCliError::argument("--hot-key", problem))?;
    }
    let hash = match args.hash.as_str() {
        "fnv1a32-fmix32" => KeyHash::Fnv1a32Fmix32,
        "flow" => KeyHash::Flow {
            seed: u32::try_from(args.seed).map_err(|_| {
                HashCliError::argument(
                    "--seed",
                    format!("{} is wider than the flow hash's 32-bit seed", args.seed),
                )
            })?,
            vip: args.vip,
            fields: flow_fields(args)?,
        },
        "value" => KeyHash::Value,
        _ => KeyHash::Xxh3 { seed: args.seed },
    };
    for (n, key) in keys.keys().iter().enumerate() {
        check_value_key(
            &hash,
            key,
            if args.key_list.is_some() {
                "--key-list"
            } else {
                "--key-file"
            },
        )
        .map_err(|e| match e {
            HashCliError::Argument { option, problem } => HashCliError::Argument {
                option,
                problem: format!("key {}: {problem}", n + 1),
            },
            other => other,
        })?;
    }
    Ok(LabInput {
        servers,
        keys,
        key_source,
        schemes: {
            let mut kinds = args.schemes.clone();
            kinds.sort_unstable();
            kinds.dedup();
            kinds
        },
        params: Params {
            hash,
            vnodes: args.vnodes.last().copied().unwrap_or(100),
            epsilon: args.epsilon.last().copied().unwrap_or(0.25),
            table_size: args.table_size,
            maglev_seed: args.maglev_seed,
            space: args.space,
            positions: args.positions.clone(),
        },
        vnodes_sweep: args.vnodes.clone(),
        epsilon_sweep: args.epsilon.clone(),
        events: args.event.clone(),
        peer: args.peer.as_ref().map(|list| list.0.clone()),
        hot: args.hot,
        replicas: args.replicas.unwrap_or(3),
        replication: args.replicas.map(|rf| Replication {
            rf,
            zones: args.zones.clone().map(|z| z.0).unwrap_or_default(),
        }),
        fail: args.fail.clone(),
    })
}

/// The servers of `--servers`, or of `--positions` in their order, or 5.
fn lab_servers(args: &HashArgs) -> Result<Vec<Server>, HashCliError> {
    Ok(match (&args.servers, args.positions.is_empty()) {
        (Some(list), _) => list.0.clone(),
        (None, true) => lb_hashlab::parse_servers("5").expect("5 servers parse"),
        (None, false) => {
            let list: Vec<Server> = args
                .positions
                .iter()
                .map(|(name, _)| Server::new(name.clone(), 1))
                .collect();
            lb_hashlab::servers::check_set(&list)
                .map_err(|problem| HashCliError::argument("--positions", problem))?;
            list
        }
    })
}

/// A `--zones` value: `NAME=ZONE,...` (see [`lb_hashlab::replicas::parse_zones`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneMap(pub Vec<(String, String)>);

impl std::str::FromStr for ZoneMap {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        lb_hashlab::replicas::parse_zones(text).map(Self)
    }
}

/// A `--servers` / `--peer` value: a count or a list (see [`lb_hashlab::parse_servers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerList(pub Vec<Server>);

impl std::str::FromStr for ServerList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        lb_hashlab::parse_servers(text).map(Self)
    }
}

fn parse_key_count(text: &str) -> Result<usize, String> {
    text.parse::<usize>()
        .ok()
        .filter(|&n| (1..=MAX_KEYS).contains(&n))
        .ok_or_else(|| format!("{text:?} is not a key count (1 to {MAX_KEYS})"))
}

fn parse_space(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .ok()
        .filter(|&s| s >= 1)
        .ok_or_else(|| format!("{text:?} is not a hash space size (1 or more)"))
}

fn parse_positions(text: &str) -> Result<(String, Vec<u64>), String> {
    lb_hashlab::ring::parse_positions(text)
}

fn parse_positive(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| format!("{text:?} is not a number > 0"))
}

/// The VIP's hash fields for `--hash flow` ([`HashFieldArgs::resolve`]).
fn flow_fields(args: &HashArgs) -> Result<HashFields, HashCliError> {
    args.fields
        .resolve(args.vip.ip())
        .map_err(|why| HashCliError::argument(HashFieldArgs::PREFIX_OPTION, why))
}

fn parse_hash_name(text: &str) -> Result<String, String> {
    if HASH_NAMES.contains(&text) {
        Ok(text.to_owned())
    } else {
        Err(format!("unknown hash {text:?}: {}", HASH_NAMES.join(", ")))
    }
}

/// One `--vnodes` value: a `u32` >= 1.
fn parse_vnodes(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err("0 virtual nodes: V must be 1 or more".to_owned()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!(
            "{text:?} is not a number of virtual nodes (1 or more)"
        )),
    }
}
