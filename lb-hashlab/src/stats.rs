//! Balance of a placement: [`Balance`] of per-server loads (keys or requests).

use serde::Serialize;

/// How evenly a load spreads over the servers that should carry it (weight > 0).
///
/// `min`, `max`, `mean` and `sd` (population standard deviation) are of the raw loads.
/// `max_avg` and `sd_avg` are of each load relative to its server's fair share
/// `total * w / sum(w)`: with equal weights they are `max / mean` and `sd / mean`, and
/// 1.0 and 0.0 are perfect balance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Balance {
    /// Smallest load.
    pub min: u64,
    /// Largest load.
    pub max: u64,
    /// Mean load.
    pub mean: f64,
    /// Population standard deviation of the loads.
    pub sd: f64,
    /// Largest load over its fair share.
    pub max_avg: f64,
    /// Population standard deviation of load over fair share.
    pub sd_avg: f64,
}

impl Balance {
    /// The balance of `loads` (one per server) for servers of `weights`; servers of
    /// weight 0 are left out. All zeros when no weight or no load.
    #[must_use]
    pub fn of(loads: &[u64], weights: &[u32]) -> Self {
        let active: Vec<(u64, f64)> = loads
            .iter()
            .zip(weights)
            .filter(|(_, w)| **w > 0)
            .map(|(&load, &w)| (load, f64::from(w)))
            .collect();
        let total: u64 = active.iter().map(|(load, _)| load).sum();
        let weight: f64 = active.iter().map(|(_, w)| w).sum();
        if active.is_empty() || total == 0 {
            return Self {
                min: 0,
                max: 0,
                mean: 0.0,
                sd: 0.0,
                max_avg: 0.0,
                sd_avg: 0.0,
            };
        }
        let n = active.len() as f64;
        let mean = total as f64 / n;
        let sd = (active
            .iter()
            .map(|(load, _)| (*load as f64 - mean).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        let relative: Vec<f64> = active
            .iter()
            .map(|(load, w)| *load as f64 / (total as f64 * w / weight))
            .collect();
        let rel_mean = relative.iter().sum::<f64>() / n;
        let sd_avg = (relative.iter().map(|r| (r - rel_mean).powi(2)).sum::<f64>() / n).sqrt();
        Self {
            min: active.iter().map(|(load, _)| *load).min().unwrap_or(0),
            max: active.iter().map(|(load, _)| *load).max().unwrap_or(0),
            mean,
            sd,
            max_avg: relative.iter().copied().fold(0.0, f64::max),
            sd_avg,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_weights_are_plain_ratios() {
        let b = Balance::of(&[90, 100, 110, 7], &[1, 1, 1, 0]);
        assert_eq!((b.min, b.max), (90, 110));
        assert!((b.mean - 100.0).abs() < 1e-12);
        assert!((b.sd - (200.0_f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!((b.max_avg - 1.1).abs() < 1e-12);
        assert!((b.sd_avg - b.sd / 100.0).abs() < 1e-12);
    }

    #[test]
    fn weights_set_the_fair_share() {
        let b = Balance::of(&[100, 200], &[1, 2]);
        assert!((b.max_avg - 1.0).abs() < 1e-12 && b.sd_avg.abs() < 1e-12);
        assert_eq!(Balance::of(&[0, 0], &[1, 1]).max_avg, 0.0);
    }
}
