//! The health-check part of a [`super::Config`]: the checker's own settings
//! ([`HealthChecker`], `[health]`) and each VIP's probes ([`VipProbes`], `[vip.health]`
//! and the backends' `[vip.backend.health]` overrides), as validated by
//! `validate::health`. The probes themselves are `lb_health`'s types.

use std::{collections::BTreeMap, time::Duration};

use lb_health::{
    policy::FailurePolicy, scheduler::SchedulerConfig, settings::ProbeSettings, validate::VipHealth,
};
use lb_maglev::BackendKey;

/// `[health]`: how the daemon runs every probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthChecker {
    /// Transitions within this window become one table change per VIP.
    pub coalesce_window: Duration,
    /// Most probes in flight at once.
    pub max_concurrent: usize,
}

impl HealthChecker {
    /// The scheduler's settings.
    pub fn scheduler(&self) -> SchedulerConfig {
        SchedulerConfig {
            max_concurrent: self.max_concurrent,
            coalesce_window: self.coalesce_window,
        }
    }
}

impl Default for HealthChecker {
    fn default() -> Self {
        Self {
            coalesce_window: Duration::from_millis(u64::from(crate::defaults::HEALTH_COALESCE_MS)),
            max_concurrent: crate::defaults::HEALTH_MAX_CONCURRENT_PROBES as usize,
        }
    }
}

/// A VIP's health checks: the probe its backends inherit, its multi-failure policy and
/// damping, and the backends that override the probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipProbes {
    /// The VIP's validated `[vip.health]` table (default: nothing probed).
    pub vip: VipHealth,
    /// Backends with a `[vip.backend.health]` table: their own probe (`None`: not
    /// probed, `kind = "none"`).
    pub overrides: BTreeMap<BackendKey, Option<ProbeSettings>>,
}

impl VipProbes {
    /// The probe of `backend` (a backend added at run time has the VIP's); `None`: not
    /// probed, always healthy.
    pub fn probe_of(&self, backend: &BackendKey) -> Option<&ProbeSettings> {
        match self.overrides.get(backend) {
            Some(own) => own.as_ref(),
            None => self.vip.probe.as_ref(),
        }
    }

    /// The VIP's multi-failure policy.
    pub fn policy(&self) -> FailurePolicy {
        self.vip.policy
    }
}
