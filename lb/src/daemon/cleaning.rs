//! The fast path's cleaning in the daemon: the walk of `lb_dataplane::Cleaner` every
//! `conntrack.clean_interval_secs` on a blocking thread ([`run`]), and what `lb status`
//! and the metrics show of it ([`Cleanings`]): the totals since start, the last walk's
//! dirty slots per VIP, and the last failure.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use lb_common::fastpath;
use lb_dataplane::{Cleaner, Cleaning, SlotCounts};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::Shared;
use crate::{
    config::CleaningConfig,
    control::{CleaningStatus, PinStatus, SlotStatus, Status},
};

/// The cleaning walks' results since start.
#[derive(Clone, Debug, Default)]
pub struct Cleanings {
    /// The last successful walk's slots per VIP id, and when it ended.
    last: Option<(BTreeMap<u32, SlotCounts>, Duration, Instant)>,
    cleaned_total: u64,
    aborted_total: u64,
    pins_deleted_total: u64,
    failures_total: u64,
    last_error: Option<String>,
}

impl Cleanings {
    /// Records a walk's result.
    pub fn record(&mut self, result: Result<Cleaning, String>) {
        match result {
            Ok(c) => {
                self.cleaned_total += c.cleaned;
                self.aborted_total += c.aborted;
                // C5's deletes, S4's expired exceptions (C6), closed ones (C7) and removed VIPs'.
                self.pins_deleted_total += c.pins_deleted
                    + c.syn_pins_expired
                    + c.closed_exceptions_expired
                    + c.exceptions_orphaned;
                self.last_error = None;
                self.last = Some((c.vips, c.took, Instant::now()));
            }
            Err(e) => {
                self.failures_total += 1;
                self.last_error = Some(e);
            }
        }
    }

    /// The totals and the last walk, once a walk ran or failed.
    pub fn status(&self) -> Option<CleaningStatus> {
        if self.last.is_none() && self.failures_total == 0 {
            return None;
        }
        let (walk_ms, age_secs) = self.last.as_ref().map_or((0.0, 0.0), |(_, took, at)| {
            (took.as_secs_f64() * 1e3, at.elapsed().as_secs_f64())
        });
        Some(CleaningStatus {
            cleaned_total: self.cleaned_total,
            aborted_total: self.aborted_total,
            pins_deleted_total: self.pins_deleted_total,
            failures_total: self.failures_total,
            last_error: self.last_error.clone(),
            walk_ms,
            age_secs,
        })
    }

    /// Adds the totals and each VIP's slot states to `status`.
    pub fn annotate(&self, status: &mut Status) {
        status.cleaning = self.status();
        let Some((vips, _, _)) = &self.last else {
            return;
        };
        for v in &mut status.vips {
            v.slot_states = vips.get(&v.id).map(|c| SlotStatus {
                dirty: c.dirty,
                recent: c.recent,
                held: c.foreign,
                pins: c.fast.then_some(PinStatus {
                    owner: c.pins.owner,
                    other: c.pins.other,
                    other_live: c.pins.other_live,
                }),
            });
        }
    }
}

/// The fast path's times for the cleaning: `cfg`, with the data path's UDP timeout.
pub fn times(cfg: &CleaningConfig, udp_timeout: Duration) -> fastpath::Config {
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    fastpath::Config {
        quiet_ns: nanos(cfg.quiet),
        tcp_idle_ns: nanos(cfg.tcp_idle),
        udp_timeout_ns: nanos(udp_timeout),
        ..fastpath::Config::DEFAULT
    }
}

/// Runs a cleaning walk every `interval` (on a blocking thread: it reads both conntrack
/// maps) and hands each result to the service; the first walk's end (or failure) is
/// sent on `walked`.
pub async fn run(
    cleaner: Cleaner,
    times: fastpath::Config,
    interval: Duration,
    service: Shared,
    walked: oneshot::Sender<()>,
) {
    let mut walked = Some(walked);
    let mut cleaner = Some(cleaner);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(c) = cleaner.take() else { return };
        let Ok((c, result)) = tokio::task::spawn_blocking(move || {
            let result = c.clean(&times);
            (c, result)
        })
        .await
        else {
            return;
        };
        cleaner = Some(c);
        let result = result.map_err(|e| e.to_string());
        match &result {
            Ok(c)
                if c.cleaned > 0
                    || c.pins_deleted > 0
                    || c.syn_pins_expired > 0
                    || c.closed_exceptions_expired > 0 =>
            {
                info!(
                    "cleaning: {} slots turned clean, {} pins deleted, {} commits aborted, \
                     {} unanswered SYNs' and {} closed connections' exceptions expired",
                    c.cleaned,
                    c.pins_deleted,
                    c.aborted,
                    c.syn_pins_expired,
                    c.closed_exceptions_expired
                );
            }
            Ok(_) => {}
            Err(e) => warn!("cleaning walk failed (dirty slots stay dirty): {e}"),
        }
        service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cleanings_mut()
            .record(result);
        if let Some(walked) = walked.take() {
            // The receiver may have stopped waiting (`FIRST_WALK_WAIT`).
            let _ = walked.send(());
        }
    }
}
