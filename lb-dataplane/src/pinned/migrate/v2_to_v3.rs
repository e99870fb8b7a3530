//! Layout 2 to layout 3 (the fast path's give-up counters).
//!
//! What changed (the objects of the two builds compared map by map, see the tests):
//! - `VIP_STATS` (per CPU): `VipStats` grew from 80 bytes by the fast path's give-up
//!   counters (`fp_give_ups`, residuals R1-R3 of the fast path's chapter) and any
//!   counters appended after them: each CPU's 80 bytes are copied as the prefix of
//!   the new value, the new counters start at 0 ([`grow::per_cpu`]).
//! - `AFFINITY` (client affinity's pins, LRU hash, sized by
//!   `conntrack.persistence_capacity`) and `AFFINITY_TIMEOUT` (VIP id → timeout) are
//!   new: created empty. No VIP of layout 2 has affinity (its `VIPS` entries have no
//!   `VIP_AFFINITY` bit), so nothing reads them until a VIP is given a timeout.

use lb_common::maps::{AFFINITY, AFFINITY_TIMEOUT, VIP_STATS};

use super::{Context, MapMigration, Step, create_empty, grow};
use crate::pinned::PinError;

/// The maps new in layout 3, created empty.
const CREATED: [&str; 2] = [AFFINITY, AFFINITY_TIMEOUT];

/// The step.
pub(super) const STEP: Step = Step {
    from: 2,
    maps: &[VIP_STATS, AFFINITY, AFFINITY_TIMEOUT],
    convert: Some(run),
};

fn run(ctx: &Context<'_>) -> Result<Vec<MapMigration>, PinError> {
    let mut maps = vec![grow::per_cpu(ctx, VIP_STATS)?];
    for name in CREATED {
        maps.push(create_empty(ctx, name)?);
    }
    Ok(maps)
}

/// Test support: removes what this step adds that no older rewind knows: the pins of
/// the maps new in layout 3 (the grown `VIP_STATS` the older rewinds shrink).
#[cfg(feature = "test-harness")]
pub(super) fn strip(dir: &crate::pinned::PinDir) -> std::io::Result<()> {
    super::remove_pins(dir, &CREATED)
}

/// Test support: turns the maps this build pinned at `dir` back into what the layout-2
/// build pinned (`old`: that build's layout), the inverse of [`run`]: the shorter
/// `VIP_STATS`, and `meta` naming layout 2 and its digest.
#[cfg(feature = "test-harness")]
pub(super) fn rewind(dir: &crate::pinned::PinDir, old: &super::Layout) -> std::io::Result<()> {
    strip(dir)?;
    grow::rewind(dir, old, VIP_STATS)?;
    super::name_layout(dir, 2, old)
}
