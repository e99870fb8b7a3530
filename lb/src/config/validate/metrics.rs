//! The `[metrics]` table: the Prometheus endpoint's address (or none), the period of the
//! conntrack walk that counts live connections, the idle threshold, and how long a
//! removed backend's series stay exported.

use std::{net::SocketAddr, time::Duration};

use super::{Report, in_range, uint};
use crate::{
    config::{MetricsConfig, file::MetricsFile},
    defaults,
};

/// `metrics.connections_interval_ms`: 100 ms to 1 hour.
const CONNECTIONS_INTERVAL_MS_RANGE: (u32, u32) = (100, 3_600_000);
/// `metrics.idle_secs`: 1 s to 1 day.
const IDLE_SECS_RANGE: (u32, u32) = (1, 86_400);
/// `metrics.removed_retention_secs`: 0 (dropped at the next scrape) to 1 day.
const REMOVED_RETENTION_SECS_RANGE: (u32, u32) = (0, 86_400);

/// Validates `[metrics]`.
pub(super) fn metrics(file: &MetricsFile, r: &mut Report) -> MetricsConfig {
    let text = file.listen.as_deref().unwrap_or(defaults::METRICS_LISTEN);
    let listen = match text.parse::<SocketAddr>() {
        Ok(addr) if addr.port() != 0 => Some(addr),
        _ => {
            r.error(
                "metrics.listen",
                format!(
                    "expected ADDR:PORT with a port from 1 to 65535 (IPv6 in brackets), got {text:?}"
                ),
            );
            None
        }
    };
    let enabled = file.enabled.unwrap_or(defaults::METRICS_ENABLED);
    let ms = |v: u32| Duration::from_millis(u64::from(v));
    let secs = |v: u32| Duration::from_secs(u64::from(v));
    MetricsConfig {
        listen: listen.filter(|_| enabled),
        connections_interval: ms(in_range(
            r,
            "metrics.connections_interval_ms",
            uint(
                file.connections_interval_ms,
                defaults::CONNECTIONS_INTERVAL_MS,
            ),
            CONNECTIONS_INTERVAL_MS_RANGE,
        )),
        idle: secs(in_range(
            r,
            "metrics.idle_secs",
            uint(file.idle_secs, defaults::IDLE_SECS),
            IDLE_SECS_RANGE,
        )),
        removed_retention: secs(in_range(
            r,
            "metrics.removed_retention_secs",
            uint(
                file.removed_retention_secs,
                defaults::REMOVED_RETENTION_SECS,
            ),
            REMOVED_RETENTION_SECS_RANGE,
        )),
    }
}
