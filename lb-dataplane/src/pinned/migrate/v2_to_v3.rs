//! Layout 2 to layout 3 (the fast path's give-up counters).
//!
//! What changed (the objects of the two builds compared map by map, see the tests):
//! - `VIP_STATS` (per CPU): `VipStats` grew from 80 bytes by the fast path's give-up
//!   counters (`fp_give_ups`, residuals R1-R3 of the fast path's chapter) and any
//!   counters appended after them: each CPU's 80 bytes are copied as the prefix of
//!   the new value, the new counters start at 0 ([`grow::per_cpu`]).

use lb_common::maps::VIP_STATS;

use super::{Context, MapMigration, Step, grow};
use crate::pinned::PinError;

/// The step.
pub(super) const STEP: Step = Step {
    from: 2,
    maps: &[VIP_STATS],
    run,
};

fn run(ctx: &Context<'_>) -> Result<Vec<MapMigration>, PinError> {
    Ok(vec![grow::per_cpu(ctx, VIP_STATS)?])
}

/// Test support: removes what this step adds that no older rewind knows (the maps new
/// in layout 3: none yet besides the grown `VIP_STATS`, which the older rewinds shrink).
#[cfg(feature = "test-harness")]
pub(super) fn strip(_dir: &crate::pinned::PinDir) -> std::io::Result<()> {
    Ok(())
}

/// Test support: turns the maps this build pinned at `dir` back into what the layout-2
/// build pinned (`old`: that build's layout), the inverse of [`run`]: the shorter
/// `VIP_STATS`, and `meta` naming layout 2 and its digest.
#[cfg(feature = "test-harness")]
pub(super) fn rewind(dir: &crate::pinned::PinDir, old: &super::Layout) -> std::io::Result<()> {
    strip(dir)?;
    grow::rewind(dir, old, VIP_STATS)?;
    let mut meta = crate::pinned::MetaMap::open(&dir.meta())?
        .ok_or_else(|| std::io::Error::other("no meta pinned"))?;
    meta.update(|m| {
        m.layout_version = 2;
        m.digest = old.digest;
    })
}
