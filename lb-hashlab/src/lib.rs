//! The consistent-hashing lab behind `lb hash`: the classic schemes side by side on the
//! same keys, pure (no I/O; the only clock read is the lookup timing of [`lab`]).
//!
//! One module per scheme, each documented with its source:
//! - [`modn`]: `hash mod N`, the baseline;
//! - [`ring`]: the ring with virtual nodes (Karger et al. 1997; ketama);
//! - [`rendezvous`]: highest random weight (Thaler and Ravishankar 1998);
//! - [`jump`]: jump consistent hash (Lamping and Veach 2014);
//! - [`maglev`]: the project's own Maglev builder ([`lb_maglev`]), `table[hash mod M]`;
//! - [`bounded`]: consistent hashing with bounded loads on the ring (Mirrokni, Thorup
//!   and Zadimoghaddam 2016), on keys or on requests.
//!
//! Around them: [`hashes`] (the three key hashes), [`servers`] and [`keys`] (inputs),
//! [`events`] (membership changes), [`scheme`] (one interface over the six), [`stats`]
//! (balance), [`theory`] (the expected values), [`lab`] (the runs), [`report`] (what
//! is printed, text and JSON) and [`plot`] (the SVG charts). Analyses of their own:
//! [`request_bound`] (bounded load on requests and the hot key before and after) and
//! [`replicas`] (preference lists, zone-aware, and the balance of copies), [`failure`]
//! (who takes a failed server's keys).

pub mod bounded;
pub mod events;
pub mod explain;
pub mod failure;
pub mod hashes;
pub mod jump;
pub mod ketama;
pub mod keys;
pub mod lab;
pub mod maglev;
pub mod modn;
pub mod nginx;
pub mod plot;
pub mod rendezvous;
pub mod replicas;
pub mod report;
pub mod request_bound;
pub mod ring;
pub mod scheme;
pub mod servers;
pub mod slots;
pub mod stats;
pub mod theory;
pub mod tour;

pub use events::Event;
pub use hashes::KeyHash;
pub use keys::KeySet;
pub use lab::{Input, LabError, LabInput, run};
pub use report::LabReport;
pub use scheme::{Params, Scheme, SchemeKind};
pub use servers::{Server, parse_servers};
