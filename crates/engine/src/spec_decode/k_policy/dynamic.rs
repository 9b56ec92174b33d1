//! The study's dynamic-K controller, kept for comparison with the offline best K
//! and the adaptive policy.

/// Levels of the study's dynamic-K controller.
pub const DYNAMIC_LEVELS: [usize; 3] = [4, 6, 12];

/// The study's controller, exactly: a batch-global EMA (alpha 0.1) of the mean
/// number of accepted draft tokens per sequence per verify step; after each step,
/// move up one level when EMA >= 0.8 K, otherwise take the smallest level >= 1.5
/// EMA (the top level when none is).
#[derive(Debug, Clone, Default)]
pub struct DynamicK {
    ema: Option<f64>,
    /// Index into the levels; starts at the lowest.
    level: usize,
}

impl DynamicK {
    pub const ALPHA: f64 = 0.1;

    pub fn k(&self) -> usize {
        DYNAMIC_LEVELS[self.level]
    }

    pub fn max_k(&self) -> usize {
        DYNAMIC_LEVELS[DYNAMIC_LEVELS.len() - 1]
    }

    pub fn ema(&self) -> Option<f64> {
        self.ema
    }

    /// Feeds one verify step's mean accepted length (over the sequences that used
    /// this controller).
    pub fn observe(&mut self, mean_accepted: f64) {
        let ema = match self.ema {
            None => mean_accepted,
            Some(e) => (1.0 - Self::ALPHA) * e + Self::ALPHA * mean_accepted,
        };
        self.ema = Some(ema);
        let k = self.k() as f64;
        self.level = if ema >= 0.8 * k {
            (self.level + 1).min(DYNAMIC_LEVELS.len() - 1)
        } else {
            DYNAMIC_LEVELS
                .iter()
                .position(|&l| l as f64 >= 1.5 * ema)
                .unwrap_or(DYNAMIC_LEVELS.len() - 1)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_k_follows_the_study_rule() {
        let mut d = DynamicK::default();
        assert_eq!(d.k(), 4);
        d.observe(3.5); // EMA 3.5 >= 0.8*4 -> up one level
        assert_eq!(d.k(), 6);
        d.observe(5.0); // EMA 3.65 < 4.8 -> smallest level >= 5.475 -> 6
        assert_eq!(d.k(), 6);
        let mut d = DynamicK::default();
        d.observe(0.5); // EMA 0.5 -> smallest >= 0.75 -> 4
        assert_eq!(d.k(), 4);
        let mut d = DynamicK::default();
        d.observe(3.5);
        d.observe(20.0); // EMA 5.15 >= 4.8 -> 12
        assert_eq!(d.k(), 12);
        d.observe(0.0); // EMA 4.635 < 9.6 -> smallest >= 6.95 -> 12
        assert_eq!(d.k(), 12);
        for _ in 0..30 {
            d.observe(0.0);
        }
        assert_eq!(d.k(), 4);
        assert!((d.ema().unwrap() - 4.635 * 0.9f64.powi(30)).abs() < 1e-9);
    }
}
