//! `lb`: the load balancer's command-line entry point.

use std::path::PathBuf;

use clap::{CommandFactory as _, Parser};
use lb_user::cli::{docs, hash, ops, table};

/// XDP layer-4 load balancer with Maglev hashing.
#[derive(Debug, Parser)]
#[command(name = "lb", version = lb_user::VERSION)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run the load balancer daemon (needs root).
    Run {
        /// Configuration file (TOML; see lb.example.toml).
        #[arg(long)]
        config: PathBuf,
    },
    /// Show the running VIPs, backends and tables.
    Status(ops::ReadArgs),
    /// Show counters and rates.
    Stats(ops::ReadArgs),
    /// Add, remove, drain or undrain a backend of a running VIP.
    Backend(ops::BackendArgs),
    /// Show where a client's flow to a VIP goes.
    Flow(ops::FlowArgs),
    /// Build and compare Maglev tables offline (no root needed).
    Table(table::TableArgs),
    /// Compare consistent-hashing schemes on the same keys offline (no root needed).
    Hash(Box<hash::HashArgs>),
    /// Print facts about the embedded XDP object (size in bytes).
    Object,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(docs::CompletionsArgs),
    /// Print the manual page lb(8), or write every page (lb.8, lb-run.8, ...) into a directory.
    Manpage(docs::ManpageArgs),
}

fn print_or_exit(result: Result<String, lb_user::control::ClientError>) {
    match result {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("lb: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config } => {
            if let Err(e) = lb_user::daemon::run(&config) {
                eprintln!("lb: {e:#}");
                std::process::exit(1);
            }
        }
        Command::Status(args) => print_or_exit(ops::status(&args)),
        Command::Stats(args) => print_or_exit(ops::stats(&args)),
        Command::Backend(args) => print_or_exit(ops::backend(&args)),
        Command::Flow(args) => print_or_exit(ops::flow(&args)),
        Command::Table(args) => {
            let status = table::main(&args);
            if status != 0 {
                std::process::exit(status);
            }
        }
        Command::Hash(args) => match hash::run(&args) {
            Ok(text) => {
                // A closed pipe (`lb hash | head`) is not worth a message.
                let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
            }
            Err(e) => {
                eprintln!("lb hash: error: {e}");
                std::process::exit(e.exit_code());
            }
        },
        Command::Object => {
            println!("embedded eBPF object: {} bytes", lb_user::EBPF_OBJECT.len());
        }
        Command::Completions(args) => {
            let text = docs::completions(&args, Cli::command());
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
        }
        Command::Manpage(args) => match docs::manpage(&args, Cli::command()) {
            Ok(text) => {
                let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
            }
            Err(e) => {
                eprintln!("lb manpage: error: {e}");
                std::process::exit(1);
            }
        },
    }
}
