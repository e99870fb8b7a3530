//! `lb`: the load balancer's command-line entry point.

use clap::Parser;

/// XDP layer-4 load balancer with Maglev hashing.
#[derive(Debug, Parser)]
#[command(name = "lb", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print facts about the embedded XDP object (size in bytes).
    Object,
    /// Build and compare Maglev tables offline (no root needed).
    Table(lb_user::cli::table::TableArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Object => {
            println!("embedded eBPF object: {} bytes", lb_user::EBPF_OBJECT.len());
        }
        Command::Table(args) => {
            let status = lb_user::cli::table::main(&args);
            if status != 0 {
                std::process::exit(status);
            }
        }
    }
    Ok(())
}
