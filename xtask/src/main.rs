//! `cargo xtask`: the project's automation entry points.
//!
//! - `setup`: install what a fresh machine lacks (idempotent);
//! - `test`: THE test command (setup if needed, fmt, clippy, unit and privileged tests);
//! - `demo`: the README's main job;
//! - `bench`: every benchmark;
//! - `package`: the Debian package (and `--check`: its inspection);
//! - `book`: the mdBook under docs/, built, and its internal links checked.

mod bench;
mod book;
mod cmd;
mod demo;
mod manpage;
mod package;
mod setup;
mod test;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    about = "Project automation for the XDP Maglev load balancer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Install what this machine lacks: Debian packages, nightly rust-src, bpf-linker,
    /// cargo-deb, mdbook.
    Setup,
    /// Run setup if needed, then fmt, clippy, unit tests and privileged tests.
    Test(test::TestArgs),
    /// Build and run the demo (needs root).
    Demo,
    /// Run the benchmarks (privileged ones need root).
    Bench(bench::BenchArgs),
    /// Build the Debian package (target/debian/lb_*.deb); --check inspects it.
    Package(package::PackageArgs),
    /// Build the book (docs/) into target/book and check every internal link.
    Book(book::BookArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup => setup::run(),
        Command::Test(args) => test::run(&args),
        Command::Demo => demo::run(),
        Command::Bench(args) => bench::run(&args),
        Command::Package(args) => package::run(&args),
        Command::Book(args) => book::run(&args),
    };
    if let Err(err) = result {
        eprintln!("xtask: error: {err:#}");
        std::process::exit(1);
    }
}
