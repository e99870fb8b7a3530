//! Changes applied to every instance of a [`FleetBed`] and waited for: a configuration
//! written and reloaded everywhere ([`change_everywhere`]), one instance's reload
//! ([`switch`]: a rollout's phase 2), and the IPv4 TCP VIP's second chance on or off
//! ([`with_second_chance`]). The fleet tests and the failover benchmark share them.

use std::time::Duration;

use crate::{
    daemon::DaemonConfig,
    fleet::{FleetBed, tcp_vip},
};

/// How long a daemon may take to apply a reload.
const APPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `scenario` with the IPv4 TCP VIP sent GUE with the second chance on every
/// instance (`encap = "gue"`, `second_chance = true`: issue 31, stage 3; the
/// backends' agents follow the candidates), then turns it off again, also when the
/// scenario fails.
///
/// # Errors
/// The scenario's error, or a configuration not applied in time.
pub fn with_second_chance(
    bed: &mut FleetBed,
    scenario: impl FnOnce(&mut FleetBed) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    set_second_chance(bed, true)?;
    let result = scenario(bed);
    let off = set_second_chance(bed, false);
    result.and(off)
}

/// Writes every instance's configuration with the IPv4 TCP VIP's second chance on or
/// off and waits until each daemon applied it.
///
/// # Errors
/// A configuration not written or not applied in time.
pub fn set_second_chance(bed: &mut FleetBed, on: bool) -> anyhow::Result<()> {
    change_everywhere(bed, |c| second_chance_keys(c, on))
}

/// The IPv4 TCP VIP's keys in `config`: sent GUE with the second chance (`on`), or
/// none (IP-in-IP, the default).
pub fn second_chance_keys(config: &mut DaemonConfig, on: bool) {
    let vip = tcp_vip(false);
    config.vip_keys.retain(|(v, _)| *v != vip);
    if on {
        config
            .vip_keys
            .push((vip, "encap = \"gue\"\nsecond_chance = true".into()));
    }
}

/// Writes every instance's configuration with `change` applied and waits until each
/// daemon applied it (`lb reload`, then its count of applied changes moves: `change`
/// must change the data plane).
///
/// # Errors
/// A configuration not written or not applied in time.
pub fn change_everywhere(
    bed: &mut FleetBed,
    change: impl Fn(&mut DaemonConfig),
) -> anyhow::Result<()> {
    let before = applied_changes(bed)?;
    bed.reconfigure(change, |_| true)?;
    for k in 1..=bed.instances().len() {
        switch(bed, k, before[k - 1])?;
    }
    Ok(())
}

/// Each instance's count of applied changes (`lb status`), to pass to [`switch`].
///
/// # Errors
/// When a daemon does not answer.
pub fn applied_changes(bed: &FleetBed) -> anyhow::Result<Vec<u64>> {
    (1..=bed.instances().len())
        .map(|k| Ok(bed.daemon(k).status()?.changes))
        .collect()
}

/// `lb reload` on instance `k` (phase 2 of a rollout, or a plain reload), then waits
/// until its count of applied changes is past `before`.
///
/// # Errors
/// When the reload fails or is not applied in time.
pub fn switch(bed: &FleetBed, k: usize, before: u64) -> anyhow::Result<()> {
    let daemon = bed.daemon(k);
    daemon.cli(&["reload"])?;
    daemon.wait_status("the reload", APPLY_TIMEOUT, |s| s.changes > before)?;
    Ok(())
}
