//! Where a start's time went, logged once the daemon is ready (`start phases (ms):
//! ...` at info level): the configuration read, the datapath's open (its maps created
//! or opened, its programs verified), the controller's recovery, the first apply
//! (planning while the worker threads build the tables, the record, the table buffers,
//! the other map writes, the service's own work), the attach and what follows it. `lb-bench --scale-only` reads the line (target [`TARGET`]) for its
//! breakdown; the keys are stable.

use std::{
    fmt,
    time::{Duration, Instant},
};

use lb_dataplane::LoadTimes;

use crate::controller::{ApplyReport, ApplyTiming, VipChange};

/// The log target of the line, `lb::start`: `RUST_LOG=warn,lb::start=info` keeps it
/// and nothing else below warnings.
pub(super) const TARGET: &str = "lb::start";

/// The phases of one start (wall-clock time unless said otherwise).
#[derive(Clone, Copy, Debug)]
pub(super) struct StartPhases {
    /// When the start began (after the arguments were read).
    begun: Instant,
    /// Reading and checking the configuration file and the state file.
    pub(super) config: Duration,
    /// Opening the datapath, whole (the lock, the pins' check, the load).
    pub(super) open: Duration,
    /// The load's two parts.
    pub(super) load: LoadTimes,
    /// Reading the adopted datapath's record back into the controller.
    pub(super) recover: Duration,
    /// The first apply's parts.
    pub(super) apply: ApplyTiming,
    /// The first apply whole, the service's own work around the controller's included
    /// (the desired state from the file, the state file's overrides, the report).
    pub(super) apply_total: Duration,
    /// The Maglev builds' own times (their fingerprints not included), summed over the
    /// worker threads that ran them side by side: CPU time, more than the wall-clock
    /// time they add to the plan.
    pub(super) builds: Duration,
    /// Attaching the program to the interface (or replacing an adopted link's).
    pub(super) attach: Duration,
    /// What follows the attach: the health checks' start, the next hops' watch, the
    /// pins kept.
    pub(super) health: Duration,
}

impl StartPhases {
    /// Phases of a start that began at `begun`, all zero so far.
    pub(super) fn new(begun: Instant) -> Self {
        Self {
            begun,
            config: Duration::ZERO,
            open: Duration::ZERO,
            load: LoadTimes::default(),
            recover: Duration::ZERO,
            apply: ApplyTiming::default(),
            apply_total: Duration::ZERO,
            builds: Duration::ZERO,
            attach: Duration::ZERO,
            health: Duration::ZERO,
        }
    }

    /// Takes the first apply's timing and its table builds' times from `report`.
    pub(super) fn applied(&mut self, report: &ApplyReport) {
        self.apply = report.timing;
        let ms: f64 = report
            .changes
            .iter()
            .filter_map(|c| match c {
                VipChange::Table(t) => Some(t.build_ms),
                VipChange::Removed(_) => None,
            })
            .sum();
        self.builds = Duration::from_secs_f64(ms.max(0.0) / 1e3);
    }

    /// The line logged once ready, `elapsed` after [`Self::begun`].
    pub(super) fn line(&self, elapsed: Duration) -> String {
        Line {
            phases: self,
            total: elapsed,
        }
        .to_string()
    }

    /// How long since the start began.
    pub(super) fn elapsed(&self) -> Duration {
        self.begun.elapsed()
    }
}

/// [`StartPhases`] with the start's total, as logged.
struct Line<'a> {
    phases: &'a StartPhases,
    total: Duration,
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.phases;
        let a = &p.apply;
        let controller = a.plan + a.record + a.buffers + a.writes;
        let service = p.apply_total.saturating_sub(controller);
        let accounted = p.config + p.open + p.recover + p.apply_total + p.attach + p.health;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "start phases (ms): total={:.0} config={:.0} open={:.0} maps={:.0} verify={:.0} \
             recover={:.0} plan={:.0} builds_cpu={:.0} record={:.0} buffers={:.0} writes={:.0} \
             service={:.0} attach={:.0} health={:.0} other={:.0}",
            ms(self.total),
            ms(p.config),
            ms(p.open),
            ms(p.load.maps),
            ms(p.load.programs),
            ms(p.recover),
            ms(a.plan),
            ms(p.builds),
            ms(a.record),
            ms(a.buffers),
            ms(a.writes),
            ms(service),
            ms(p.attach),
            ms(p.health),
            ms(self.total.saturating_sub(accounted)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_every_phase_and_the_rest() {
        let mut p = StartPhases::new(Instant::now());
        p.config = Duration::from_millis(30);
        p.open = Duration::from_millis(300);
        p.load = LoadTimes {
            maps: Duration::from_millis(100),
            programs: Duration::from_millis(190),
        };
        p.recover = Duration::from_millis(5);
        p.apply = ApplyTiming {
            plan: Duration::from_millis(200),
            record: Duration::from_millis(20),
            buffers: Duration::from_millis(50),
            writes: Duration::from_millis(70),
        };
        p.apply_total = Duration::from_millis(360);
        p.builds = Duration::from_millis(380);
        p.attach = Duration::from_millis(15);
        p.health = Duration::from_millis(25);
        assert_eq!(
            p.line(Duration::from_millis(800)),
            "start phases (ms): total=800 config=30 open=300 maps=100 verify=190 recover=5 \
             plan=200 builds_cpu=380 record=20 buffers=50 writes=70 service=20 attach=15 \
             health=25 other=65"
        );
    }

    #[test]
    fn the_builds_are_summed_over_the_changed_tables() {
        let mut report = ApplyReport::default();
        for build_ms in [1.5, 2.5] {
            report
                .changes
                .push(VipChange::Table(crate::controller::TableChange {
                    build_ms,
                    ..table_change()
                }));
        }
        let mut p = StartPhases::new(Instant::now());
        p.applied(&report);
        assert_eq!(p.builds, Duration::from_millis(4));
    }

    fn table_change() -> crate::controller::TableChange {
        crate::controller::TableChange {
            vip: "10.0.0.1:80/tcp".parse().expect("a VIP"),
            backends: 0,
            in_table: 0,
            table_size: 7,
            fingerprint: "0".repeat(64).parse().expect("a fingerprint"),
            generation: 1,
            build_ms: 0.0,
            changed_slots: None,
        }
    }
}
