//! `[health]` (the checker's settings) and each VIP's `[vip.health]` table with its
//! backends' `[vip.backend.health]` overrides. The probe keys are checked by
//! `lb_health::validate`, whose errors already name their key paths
//! (`vip[0].backend[2].health.timeout_ms`); they are reported here as they are.

use std::time::Duration;

use super::{Report, in_range, uint};
use crate::{
    config::{
        HealthChecker, Vip, VipProbes,
        file::{HealthCheckerFile, VipFile},
    },
    defaults,
};
use lb_health::validate::{FieldError, VipHealth};
use lb_maglev::BackendKey;

/// `health.coalesce_ms`: 1 ms to 10 s.
const COALESCE_MS_RANGE: (u32, u32) = (1, 10_000);
/// `health.max_concurrent_probes`: 1 to 65,536.
const MAX_CONCURRENT_RANGE: (u32, u32) = (1, 65_536);

/// `[health]`.
pub(super) fn checker(file: &HealthCheckerFile, r: &mut Report) -> HealthChecker {
    let coalesce_ms = in_range(
        r,
        "health.coalesce_ms",
        uint(file.coalesce_ms, defaults::HEALTH_COALESCE_MS),
        COALESCE_MS_RANGE,
    );
    let max_concurrent = in_range(
        r,
        "health.max_concurrent_probes",
        uint(
            file.max_concurrent_probes,
            defaults::HEALTH_MAX_CONCURRENT_PROBES,
        ),
        MAX_CONCURRENT_RANGE,
    );
    HealthChecker {
        coalesce_window: Duration::from_millis(u64::from(coalesce_ms)),
        max_concurrent: usize::try_from(max_concurrent).unwrap_or(usize::MAX),
    }
}

/// The health checks of `vip`, written at `path` (`vip[i]`) as `v`. The backends'
/// tables are checked only when the VIP's own table is valid (their keys merge over
/// it).
pub(super) fn vip_probes(path: &str, v: &VipFile, vip: Vip, r: &mut Report) -> VipProbes {
    let report = |r: &mut Report, errors: Vec<FieldError>| {
        for e in errors {
            r.error(e.path, e.message);
        }
    };
    let health = match VipHealth::from_file(&format!("{path}.health"), v.health.as_ref(), vip.port)
    {
        Ok(h) => h,
        Err(errors) => {
            report(r, errors);
            return VipProbes::default();
        }
    };
    let mut probes = VipProbes {
        vip: health,
        overrides: std::collections::BTreeMap::new(),
    };
    for (j, b) in v.backends.iter().enumerate() {
        let (Some(file), Ok(key)) = (&b.health, b.address.parse::<BackendKey>()) else {
            continue;
        };
        let prefix = format!("{path}.backend[{j}].health");
        match probes.vip.backend(&prefix, Some(file), key.port()) {
            Ok(probe) => {
                probes.overrides.insert(key, probe);
            }
            Err(errors) => report(r, errors),
        }
    }
    probes
}

#[cfg(test)]
mod tests;
