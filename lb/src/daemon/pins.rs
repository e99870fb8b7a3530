//! Watching the pinned datapath while the daemon runs (issue 29): every
//! [`CHECK_PERIOD`] the pins and the XDP link are checked and mended
//! ([`lb_dataplane::KernelDataplane::check_pins`]); what was lost, what was mended and
//! what could not be goes to the log and to the service's [`DatapathHealth`], which
//! `lb status` (text, JSON and its exit status) and the metrics
//! (`lb_datapath_degraded`, `lb_pins_lost_total`) show.

use std::time::Duration;

use lb_dataplane::{KernelDataplane, PinCheck};
use tracing::{error, info, warn};

use super::service::Service;
use crate::control::DatapathHealth;

/// How often the pins and the XDP link are checked.
pub(super) const CHECK_PERIOD: Duration = Duration::from_secs(1);

/// Records what `check` found in `health`: the counters, the problems left, and a
/// sentence for the last loss.
pub(super) fn record(health: &mut DatapathHealth, check: &PinCheck) {
    let lost = check.pins.lost.len() as u64;
    health.pins_lost_total += lost;
    health.pins_restored_total += check.pins.repinned.len() as u64;
    health.reattached_total += u64::from(check.reattached);
    health.problems.clone_from(&check.problems);
    health.degraded = !health.problems.is_empty();
    if check.found_loss() {
        health.last_loss = Some(describe(check));
    }
}

/// One sentence for a loss: what went and what was done.
pub(super) fn describe(check: &PinCheck) -> String {
    let mut parts = Vec::new();
    if !check.pins.lost.is_empty() {
        parts.push(format!(
            "{} pins lost{} ({} pinned again from the daemon's descriptors)",
            check.pins.lost.len(),
            if check.pins.dir_lost {
                ", the pin directory with them"
            } else {
                ""
            },
            check.pins.repinned.len()
        ));
    }
    if check.detached {
        parts.push(if check.reattached {
            "the XDP program was detached (attached again)".to_owned()
        } else {
            "the XDP program was detached (NOT attached again)".to_owned()
        });
    }
    parts.join("; ")
}

/// Checks and mends the datapath of `service` and records the outcome; logs a loss
/// (warning), what could not be mended (error), and a datapath whole again (info).
pub(super) fn check(service: &mut Service<KernelDataplane>) {
    let iface = service.interface().to_owned();
    let check = service.controller_mut().dataplane_mut().check_pins(&iface);
    let was_degraded = service.datapath_health_mut().degraded;
    if check.found_loss() {
        warn!(
            "the pinned datapath of {iface} was damaged: {}",
            describe(&check)
        );
        if !check.pins.lost.is_empty() {
            warn!("pins lost: {}", check.pins.lost.join(", "));
        }
    }
    for problem in &check.problems {
        error!("datapath of {iface} degraded: {problem}");
    }
    let health = service.datapath_health_mut();
    record(health, &check);
    if was_degraded && !health.degraded {
        info!("the datapath of {iface} is whole again");
    }
}

/// What a stop says of the datapath it leaves: `None` when it stays attached and
/// forwards, else why it does not (checked and mended one last time first).
pub(super) fn at_exit(service: &mut Service<KernelDataplane>) -> Option<String> {
    check(service);
    let problems = &service.datapath_health_mut().problems;
    (!problems.is_empty()).then(|| problems.join("; "))
}

#[cfg(test)]
mod tests {
    use lb_dataplane::pinned::Mended;

    use super::*;

    #[test]
    fn a_mended_loss_counts_and_leaves_the_datapath_whole() {
        let mut health = DatapathHealth::default();
        let check = PinCheck {
            pins: Mended {
                lost: vec!["maps/VIPS".into(), "link".into()],
                repinned: vec!["maps/VIPS".into(), "link".into()],
                failed: Vec::new(),
                dir_lost: true,
            },
            ..PinCheck::default()
        };
        record(&mut health, &check);
        assert!(!health.degraded);
        assert_eq!((health.pins_lost_total, health.pins_restored_total), (2, 2));
        let last = health.last_loss.clone().unwrap_or_default();
        assert!(
            last.contains("2 pins lost, the pin directory with them"),
            "{last}"
        );
        record(&mut health, &PinCheck::default());
        assert_eq!(health.pins_lost_total, 2);
        assert_eq!(health.last_loss.as_deref(), Some(last.as_str()));
    }

    #[test]
    fn what_cannot_be_mended_degrades_until_it_is() {
        let mut health = DatapathHealth::default();
        let check = PinCheck {
            detached: true,
            problems: vec!["the XDP program is detached from lb0".into()],
            ..PinCheck::default()
        };
        record(&mut health, &check);
        assert!(health.degraded);
        assert!(
            health
                .last_loss
                .as_deref()
                .is_some_and(|l| l.contains("NOT attached again"))
        );
        record(&mut health, &PinCheck::default());
        assert!(!health.degraded && health.problems.is_empty());
    }
}
