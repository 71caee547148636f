//! Percentiles of one run's samples, and the median and spread of a figure
//! over several runs.

use std::time::Duration;

/// The p-th percentile (nearest rank) of latencies, in milliseconds;
/// NaN when there are none.
pub fn pct_ms(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1].as_secs_f64() * 1000.0
}

/// The median of a figure over runs (the mean of the middle two for an even
/// count); NaN when there are no values.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The spread of a figure over runs: half the range (max - min) as a
/// percentage of the median; 0 for one run.
pub fn spread_pct(values: &[f64]) -> f64 {
    let v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    let m = median(&v);
    if v.len() < 2 || m == 0.0 || m.is_nan() {
        return 0.0;
    }
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    (hi - lo) / 2.0 / m.abs() * 100.0
}

/// A number with 3 significant digits, thousands as `k`.
pub fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        return "-".into();
    }
    let a = x.abs();
    if a >= 100_000.0 {
        format!("{:.0}k", x / 1000.0)
    } else if a >= 10_000.0 {
        format!("{:.1}k", x / 1000.0)
    } else if a >= 100.0 {
        format!("{:.0}", x)
    } else if a >= 10.0 {
        format!("{:.1}", x)
    } else if a >= 1.0 {
        format!("{:.2}", x)
    } else {
        format!("{:.3}", x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nearest-rank percentiles of 1..=100 ms are the ranks themselves.
    #[test]
    fn percentiles() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(pct_ms(&mut v, 50.0), 50.0);
        assert_eq!(pct_ms(&mut v, 99.0), 99.0);
        assert_eq!(pct_ms(&mut v, 100.0), 100.0);
        assert!(pct_ms(&mut [], 50.0).is_nan());
    }

    /// Median and spread over runs.
    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(spread_pct(&[90.0, 100.0, 110.0]), 10.0);
        assert_eq!(spread_pct(&[5.0]), 0.0);
    }
}
