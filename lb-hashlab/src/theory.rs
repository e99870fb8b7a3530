//! The expected values the lab prints beside its measurements, from the tutorial's and
//! the papers' formulas. Pure functions of server counts, weights and ring points.
//!
//! - mod-N from `a` to `b` servers keeps `x` where `x mod a = x mod b`, that is
//!   `min(a, b)` residues of every `lcm(a, b)`: it moves `1 - min/lcm` (`1 - 1/5` for
//!   4 to 5). Any scheme must move at least the changed share of the weight.
//! - The ring with `P = N·V` points: sd/avg ≈ `sqrt((N - 1)/P)` (the load of a server is
//!   the sum of `V` independent arcs, Karger et al. 1997), so a target `c` needs
//!   `V ≈ (N - 1)/(N·c²) ≈ 1/c²`; it stores `P` pairs of 16 bytes and a lookup makes
//!   `ceil(log2 P)` comparisons.
//! - Jump hash loops about `ln n` times per lookup (Lamping and Veach 2014, section 3).

use serde::Serialize;

/// Bytes of one (token, server) pair as the tutorial counts them.
pub const PAIR_BYTES: usize = 16;

/// A fraction `num/den` in lowest terms, with its value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    /// Numerator.
    pub num: u64,
    /// Denominator (> 0).
    pub den: u64,
    /// `num / den`.
    pub value: f64,
}

impl Ratio {
    /// `num/den` reduced; `None` when `den` is 0.
    #[must_use]
    pub fn new(num: u64, den: u64) -> Option<Self> {
        if den == 0 {
            return None;
        }
        let g = gcd(num, den).max(1);
        Some(Self {
            num: num / g,
            den: den / g,
            value: num as f64 / den as f64,
        })
    }
}

/// Greatest common divisor (Euclid).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The fraction of keys mod-N keeps from `a` to `b` servers, `min(a, b)/lcm(a, b)`, in
/// lowest terms; mod-N moves `1 -` this. `None` when either count is 0.
#[must_use]
pub fn mod_n_kept(a: u64, b: u64) -> Option<Ratio> {
    if a == 0 || b == 0 {
        return None;
    }
    let lcm = a / gcd(a, b) * b;
    Ratio::new(a.min(b), lcm)
}

/// The least share of keys any scheme must move when `added` weight joins and
/// `removed` weight leaves a total of `before` (weight units; 1 per server unweighted).
#[must_use]
pub fn minimum_moved(before: u64, added: u64, removed: u64) -> Option<Ratio> {
    if removed > 0 {
        Ratio::new(removed, before)
    } else if added > 0 {
        Ratio::new(added, before + added)
    } else {
        None
    }
}

/// The ring's expected sd/avg of keys per server, `sqrt((N - 1)/P)` for `N` servers
/// and `P` points (`P = N·V` with equal weights).
#[must_use]
pub fn ring_sd_avg(servers: usize, points: usize) -> f64 {
    (servers.saturating_sub(1) as f64 / points.max(1) as f64).sqrt()
}

/// `V` for a target sd/avg `c` on `N` servers: `(N - 1)/(N·c²)` (≈ `1/c²` for large N).
#[must_use]
pub fn vnodes_for(servers: usize, c: f64) -> f64 {
    let n = servers.max(1) as f64;
    (n - 1.0) / (n * c * c)
}

/// The ring's memory as the tutorial counts it: [`PAIR_BYTES`] per point, in bytes.
#[must_use]
pub fn ring_memory_bytes(points: usize) -> usize {
    points.saturating_mul(PAIR_BYTES)
}

/// Comparisons of a binary search over `points` points: `ceil(log2 points)`.
#[must_use]
pub fn ring_comparisons(points: usize) -> u32 {
    points.max(1).next_power_of_two().trailing_zeros()
}

/// Jump hash's expected loop count for `n` buckets: about `ln n`.
#[must_use]
pub fn jump_loops(n: usize) -> f64 {
    (n.max(1) as f64).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tutorials_formulas() {
        // Section 1: 4 -> 5 servers, mod-N keeps 1/5 and moves 80 %; the minimum is 1/5.
        let kept = mod_n_kept(4, 5).unwrap();
        assert_eq!((kept.num, kept.den), (1, 5));
        let least = minimum_moved(4, 1, 0).unwrap();
        assert_eq!((least.num, least.den), (1, 5));
        assert_eq!(minimum_moved(5, 0, 1).unwrap().value, 0.2);
        // Section 4: N = 10 gives 9.5 % at V = 100 and 3.0 % at V = 1000.
        assert!((ring_sd_avg(10, 1_000) - 0.0949).abs() < 1e-4);
        assert!((ring_sd_avg(10, 10_000) - 0.0300).abs() < 1e-4);
        // 5 % needs V ≈ 400, 10 % V ≈ 100 (1/c²); 100 x 256 tokens: 15 comparisons.
        assert!((vnodes_for(1_000_000, 0.05) - 400.0).abs() < 0.01);
        assert_eq!(ring_comparisons(25_600), 15);
        assert_eq!(ring_comparisons(1), 0);
        assert_eq!(ring_comparisons(1_024), 10);
        assert_eq!(ring_memory_bytes(25_600), 409_600);
        assert!((jump_loops(10) - std::f64::consts::LN_10).abs() < 1e-12);
    }
}
