//! Operator command-line verbs of the `lb` binary, one module per verb group. Each
//! module owns its clap arguments, its run function (writing to any `io::Write`, so
//! tests need no process) and its error type, whose text names the offending argument.
//!
//! - [`table`]: `lb table build` / `lb table diff`, offline Maglev table inspection;
//! - [`hash`]: `lb hash`, the offline consistent-hashing lab;
//! - [`docs`]: `lb completions` / `lb manpage`, generated from the clap definition;
//! - [`ops`]: `lb status`, `lb stats`, `lb backend`, `lb flow`, through the daemon's
//!   control socket.

pub mod docs;
pub mod hash;
pub mod ops;
pub mod table;
