//! Summary statistics used by the benchmark and the report. Percentiles interpolate linearly
//! between order statistics (numpy's default, which `vllm bench serve` uses), so numbers compare.

use serde::{Deserialize, Serialize};

pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Population standard deviation (numpy's default, as in `vllm bench serve`).
pub fn std_dev(values: &[f64]) -> Option<f64> {
    let m = mean(values)?;
    Some((values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / values.len() as f64).sqrt())
}

/// The `p`-th percentile (0..=100) with linear interpolation; `None` for no values.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(percentile_sorted(&sorted, p))
}

fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    let rank = (p.clamp(0.0, 100.0) / 100.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// Median absolute deviation from the median (unscaled).
pub fn mad(values: &[f64]) -> Option<f64> {
    let m = median(values)?;
    let deviations: Vec<f64> = values.iter().map(|v| (v - m).abs()).collect();
    median(&deviations)
}

/// Geometric mean of positive values; `None` when empty or any value is not positive.
pub fn geomean(values: &[f64]) -> Option<f64> {
    if values.is_empty()
        || values
            .iter()
            .any(|v| v.is_nan() || *v <= 0.0 || v.is_infinite())
    {
        return None;
    }
    Some((values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp())
}

/// Mean, median, std and the percentiles `vllm bench serve` reports, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub p90: f64,
    pub p99: f64,
}

impl LatencySummary {
    /// `None` when there are no samples (e.g. every request failed).
    pub fn of(values_ms: &[f64]) -> Option<Self> {
        if values_ms.is_empty() {
            return None;
        }
        let mut sorted = values_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            mean: mean(&sorted)?,
            median: percentile_sorted(&sorted, 50.0),
            std: std_dev(&sorted)?,
            p90: percentile_sorted(&sorted, 90.0),
            p99: percentile_sorted(&sorted, 99.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn mad_by_hand() {
        // median 3; |deviations| = 2,1,0,1,97 -> sorted 0,1,1,2,97 -> MAD 1
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 100.0]), Some(1.0));
        // median 10; deviations 1,0,2 -> MAD 1
        assert_eq!(mad(&[9.0, 10.0, 12.0]), Some(1.0));
    }

    #[test]
    fn percentiles_match_numpy_linear() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        // numpy.percentile(range(1, 11), [90, 99, 25]) = 9.1, 9.91, 3.25
        assert!(close(percentile(&v, 90.0).unwrap(), 9.1));
        assert!(close(percentile(&v, 99.0).unwrap(), 9.91));
        assert!(close(percentile(&v, 25.0).unwrap(), 3.25));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    }

    #[test]
    fn geomean_by_hand() {
        assert!(close(geomean(&[1.0, 4.0]).unwrap(), 2.0));
        assert!(close(geomean(&[2.0, 8.0, 4.0]).unwrap(), 4.0));
        assert_eq!(geomean(&[1.0, 0.0]), None);
        assert_eq!(geomean(&[]), None);
    }

    #[test]
    fn latency_summary_by_hand() {
        let s = LatencySummary::of(&[10.0, 20.0, 30.0, 40.0]).unwrap();
        assert!(close(s.mean, 25.0));
        assert!(close(s.median, 25.0));
        assert!(close(s.std, 125f64.sqrt())); // population: (225+25+25+225)/4
        assert!(close(s.p90, 37.0));
        assert!(close(s.p99, 39.7));
        assert!(LatencySummary::of(&[]).is_none());
    }
}
