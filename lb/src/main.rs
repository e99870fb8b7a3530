//! `lb`: the load balancer's command-line entry point. Every verb returns its
//! [`Output`] or its error; this file prints them and decides the exit status:
//!
//! - 0: success (also when standard output is a closed pipe, as with `lb ... | head`);
//! - 1: `lb run` failed, the daemon could not be reached or refused the request, or
//!   `lb hash` could not write its plot;
//! - 2: an invalid argument (clap's own usage errors, `lb table`'s and `lb hash`'s);
//! - 3: `lb status` of a degraded datapath; `lb status`, `lb stats`, `lb flow` and `lb
//!   conn list` answered from the pinned datapath because no daemon runs (the answer is
//!   printed, and says so);
//! - 4: a change that got no answer.
//!
//! `lb config diff` exits as diff(1): 0 no change, 1 changes, 2 an error. `lb fleet`:
//! 0 the instances agree (every push applied), 1 they disagree (a push was refused), 2
//! bad arguments or fleet file, 3 an instance unreachable.

use std::{
    io::{self, Write as _},
    path::PathBuf,
};

use clap::{CommandFactory as _, Parser};
use lb::cli::{
    self, Output, agent, backend, config, conn, detach, docs, fleet, flow, hash, overrides, stats,
    status, table, trace, vip,
};

/// XDP layer-4 load balancer with Maglev hashing.
#[derive(Debug, Parser)]
#[command(name = "lb", version = lb::version())]
struct Cli {
    /// Log lines as text (default) or as JSON objects, one per line (also `LB_LOG_FORMAT`).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "LB_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines (standard error) are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// `2026-12-01T10:00:00Z  INFO lb::daemon: ...`.
    Text,
    /// `{"timestamp":...,"level":"INFO","fields":{"message":...},"target":...}`
    /// (tracing-subscriber's JSON format).
    Json,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run the load balancer daemon (needs root).
    Run {
        /// Configuration file (TOML; see lb.example.toml).
        #[arg(long)]
        config: PathBuf,
        /// Accepted for uniformity: the daemon prints nothing on standard output; its
        /// log lines are JSON with `--log-format json`.
        #[arg(long)]
        json: bool,
        /// Discard the pinned datapath of the interface (its connection tracking
        /// included) and start fresh; says what it discarded.
        #[arg(long)]
        reset: bool,
        /// Load the XDP object from this file instead of the embedded one (upgrade
        /// tests: a build whose program differs with the same maps).
        #[arg(long, hide = true)]
        object: Option<PathBuf>,
    },
    /// The backend agent: decapsulate the load balancer's IP-in-IP and GUE packets on a
    /// backend and follow second-chance candidates (`lb agent run`), or show its
    /// counters (`lb agent stats`).
    Agent(agent::AgentArgs),
    /// Detach the XDP program from an interface and remove its pinned datapath (no
    /// daemon needed; refused while one controls the interface).
    Detach(detach::DetachArgs),
    /// List the runtime changes in force (kept across reloads and restarts), or clear them.
    Overrides(overrides::OverridesArgs),
    /// Show the running VIPs, backends and tables.
    Status(cli::PinnedReadArgs),
    /// Show counters and rates.
    Stats(cli::PinnedReadArgs),
    /// Add, remove, drain or undrain a backend of a running VIP.
    Backend(backend::BackendArgs),
    /// Show where a client's flow to a VIP goes.
    Flow(flow::FlowArgs),
    /// List the connections in conntrack (and the SYN cache's held SYNs).
    Conn(conn::ConnArgs),
    /// Withdraw a VIP address's BGP announcement from this instance, or announce it again.
    Vip(vip::VipArgs),
    /// Stream the XDP program's decision for each matching VIP packet.
    Trace(trace::TraceArgs),
    /// Build and compare Maglev tables offline (no root needed).
    Table(table::TableArgs),
    /// Compare consistent-hashing schemes on the same keys offline (no root needed).
    ///
    /// Per scheme the balance of keys and requests, memory and lookup time; per --event
    /// the keys that move and where; the ring at every --vnodes; hot keys and bounded
    /// load on requests (--zipf, KEY COUNT files, --hot-key); every key's preference list
    /// and the balance of replicas (--replicas, --zones); who takes a failed server's keys
    /// (--fail); one key's whole decision (--explain); the tutorial as a program (tour).
    Hash(Box<hash::HashArgs>),
    /// Check a configuration file without root or a daemon (exit status 1 on any
    /// problem, each named with its key path and line), or show what a reload of one
    /// would change in the running daemon (`lb config diff`).
    Config(config::ConfigArgs),
    /// Reload the daemon's configuration file now, as SIGHUP does (also with
    /// `reload = "signal"`), and print what the reload changes.
    Reload(config::ReloadArgs),
    /// Several daemons at once through their remote APIs: whether they agree, or push a
    /// configuration to all.
    Fleet(fleet::FleetArgs),
    /// Print facts about the embedded XDP object (size in bytes).
    Object {
        /// Print `{"bytes": N}`.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(docs::CompletionsArgs),
    /// Print the manual page lb(8), or write every page (lb.8, lb-run.8, ...) into a directory.
    Manpage(docs::ManpageArgs),
}

/// Why a verb failed: the message for standard error and the exit status.
struct Failure {
    message: String,
    status: i32,
}

impl Failure {
    fn new(message: impl std::fmt::Display, status: i32) -> Self {
        Self {
            message: message.to_string(),
            status,
        }
    }
}

fn run(command: Command) -> Result<Output, Failure> {
    // 4: a change that got no answer (its outcome is unknown until `lb status`).
    let daemon = |e: lb::control::ClientError| {
        let status = if matches!(e, lb::control::ClientError::NoAnswer { .. }) {
            4
        } else {
            1
        };
        Failure::new(format!("lb: {e}"), status)
    };
    match command {
        Command::Run {
            config,
            reset,
            object,
            ..
        } => lb::daemon::run(&lb::daemon::RunOptions {
            config,
            reset,
            object,
        })
        .map(|()| Output::default())
        .map_err(|e| Failure::new(format!("lb: {e:#}"), 1)),
        Command::Agent(args) => match args.action {
            agent::AgentAction::Run(run) => agent::run(&run)
                .map(|()| Output::default())
                .map_err(|e| Failure::new(format!("lb agent run: {e:#}"), 1)),
            agent::AgentAction::Stats(stats) => {
                agent::stats(&stats).map_err(|e| Failure::new(format!("lb agent stats: {e:#}"), 1))
            }
        },
        Command::Detach(args) => {
            detach::detach(&args).map_err(|e| Failure::new(format!("lb: {e}"), 1))
        }
        Command::Overrides(args) => overrides::overrides(&args).map_err(daemon),
        Command::Status(args) => answered(status::status(&args).map_err(daemon)?),
        Command::Stats(args) => answered(stats::stats(&args).map_err(daemon)?),
        Command::Backend(args) => backend::backend(&args).map_err(daemon),
        Command::Flow(args) => answered(flow::flow(&args).map_err(daemon)?),
        Command::Conn(args) => answered(conn::run(&args).map_err(daemon)?),
        Command::Vip(args) => vip::run(&args).map_err(daemon),
        Command::Trace(args) => trace::run(&args).map_err(daemon),
        Command::Table(args) => {
            table::run(&args).map_err(|e| Failure::new(format!("lb table: error: {e}"), 2))
        }
        Command::Hash(args) => hash::run(&args).map_err(|e| {
            let status = match e {
                hash::HashCliError::Argument { .. } => 2,
                hash::HashCliError::Plot(_) => 1,
            };
            Failure::new(format!("lb hash: error: {e}"), status)
        }),
        Command::Config(args) => match args.action {
            config::ConfigAction::Check { file, json } => {
                let checked = config::run(&file, json);
                if checked.valid {
                    Ok(checked.output)
                } else {
                    print(&checked.output)?;
                    Err(Failure::new("lb config check: the file has problems", 1))
                }
            }
            config::ConfigAction::Diff { file, socket, json } => {
                match config::diff(file.as_deref(), &socket, json) {
                    Ok((output, false)) => Ok(output),
                    // As diff(1): 1 when there are changes, without a message.
                    Ok((output, true)) => {
                        print(&output)?;
                        Err(Failure::new("", 1))
                    }
                    Err(e) => Err(Failure::new(format!("lb config diff: {e}"), 2)),
                }
            }
        },
        Command::Reload(args) => config::reload(&args).map_err(daemon),
        Command::Fleet(args) => {
            let outcome = match &args.verb {
                fleet::FleetVerb::Status(a) => fleet::status(a),
                fleet::FleetVerb::Apply(a) => fleet::apply(a),
            }
            .map_err(|e| Failure::new(format!("lb fleet: {e}"), 2))?;
            if outcome.exit_status == 0 {
                Ok(outcome.output)
            } else {
                print(&outcome.output)?;
                Err(Failure::new("", outcome.exit_status))
            }
        }
        Command::Object { json } => Ok(cli::object(json)),
        Command::Completions(args) => Ok(Output::text(docs::completions(&args, Cli::command()))),
        Command::Manpage(args) => docs::manpage(&args, Cli::command())
            .map(Output::text)
            .map_err(|e| Failure::new(format!("lb manpage: error: {e}"), 1)),
    }
}

/// A reading verb's answer: its output, or, with a non-zero exit (a degraded datapath,
/// no daemon running), the output printed and the failure.
fn answered(a: cli::offline::Answer) -> Result<Output, Failure> {
    if a.exit == 0 {
        return Ok(a.output);
    }
    print(&a.output)?;
    Err(Failure::new(a.message, a.exit))
}

/// Prints `output`: its text on stdout (a closed pipe is not an error), its warnings on
/// stderr.
fn print(output: &Output) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(output.text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(Failure::new(format!("lb: writing the output: {e}"), 1)),
    }
    for warning in &output.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// Sends log lines to standard error in `format` (level from `RUST_LOG`, default info).
fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
            .init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Writes why the verb failed on standard error: as text, or under `--log-format json`
/// as an ERROR log line like the daemon's others (a JSON object even when `RUST_LOG`
/// turns logging off).
fn report_failure(format: LogFormat, failure: &Failure) {
    if failure.message.is_empty() {
        return;
    }
    match format {
        LogFormat::Text => eprintln!("{}", failure.message),
        LogFormat::Json if tracing::enabled!(target: "lb", tracing::Level::ERROR) => {
            tracing::error!(target: "lb", exit_status = failure.status, "{}", failure.message);
        }
        LogFormat::Json => eprintln!(
            "{}",
            serde_json::json!({
                "level": "ERROR",
                "fields": { "message": failure.message, "exit_status": failure.status },
                "target": "lb",
            })
        ),
    }
}

fn main() {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    if let Err(failure) = run(cli.command).and_then(|output| print(&output)) {
        report_failure(cli.log_format, &failure);
        std::process::exit(failure.status);
    }
}
