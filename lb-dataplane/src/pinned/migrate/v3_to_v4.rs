//! Layout 3 to layout 4 (the fast path's exceptions map).
//!
//! What changed (the objects of the two builds compared map by map, see the tests):
//! - `EXCEPTIONS` (the fast path's pins that the miss rule does not give again, a hash
//!   map that never evicts, sized by `conntrack.exceptions_capacity`) is new: created
//!   empty. The layout-3 program kept every pin in the conntrack maps, which are kept
//!   as pinned; the new program reads a dirty slot's exception first and its conntrack
//!   pin next, so every pin the old program made still decides.

use lb_common::maps::EXCEPTIONS;

use super::Step;

/// The maps new in layout 4, created empty.
const CREATED: [&str; 1] = [EXCEPTIONS];

/// The step.
pub(super) const STEP: Step = Step::creating(3, &CREATED);

/// Test support: removes what this step adds that no older rewind knows: the pins of
/// the maps new in layout 4.
#[cfg(feature = "test-harness")]
pub(super) fn strip(dir: &crate::pinned::PinDir) -> std::io::Result<()> {
    super::remove_pins(dir, &CREATED)
}

/// Test support: turns the maps this build pinned at `dir` back into what the layout-3
/// build pinned (`old`: that build's layout), the inverse of [`STEP`]: no `EXCEPTIONS`,
/// and `meta` naming layout 3 and its digest.
#[cfg(feature = "test-harness")]
pub(super) fn rewind(dir: &crate::pinned::PinDir, old: &super::Layout) -> std::io::Result<()> {
    strip(dir)?;
    super::name_layout(dir, 3, old)
}
