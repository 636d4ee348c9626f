//! Trends in sampled series: one least-squares slope over several segments
//! that each keep their own level (an engine restarted by the soak starts
//! again from a lower RSS; only growth within a lifetime is a trend). One
//! segment is a plain least-squares fit. Pure arithmetic.

/// The slope, in y per x, of one line fitted to every segment at once,
/// each segment with its own intercept: Σ (x - x̄ₛ)(y - ȳₛ) / Σ (x - x̄ₛ)² over all
/// segments s. `None` when no segment has two distinct x.
pub fn pooled_slope(segments: &[&[(f64, f64)]]) -> Option<f64> {
    let (mut num, mut den) = (0.0, 0.0);
    for points in segments.iter().filter(|p| p.len() >= 2) {
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        for &(x, y) in points.iter() {
            num += (x - mx) * (y - my);
            den += (x - mx) * (x - mx);
        }
    }
    (den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slope(points: &[(f64, f64)]) -> Option<f64> {
        pooled_slope(&[points])
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn slopes_of_lines_and_noise() {
        let line: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 3.0 * x as f64 + 7.0)).collect();
        assert!(close(slope(&line), 3.0));
        let flat_noise = [(0.0, 5.0), (1.0, 7.0), (2.0, 5.0), (3.0, 7.0)];
        assert!(close(slope(&flat_noise), 0.4));
        assert_eq!(slope(&[(1.0, 2.0)]), None);
        assert_eq!(slope(&[(1.0, 2.0), (1.0, 9.0)]), None);
    }

    #[test]
    fn restarts_do_not_hide_growth_or_fake_it() {
        // A sawtooth: each lifetime grows 2 per step from a fresh start.
        // Fitted as one series it looks flat; per lifetime it grows 2.
        let a: Vec<(f64, f64)> = (0..5).map(|x| (x as f64, 100.0 + 2.0 * x as f64)).collect();
        let b: Vec<(f64, f64)> = (5..10).map(|x| (x as f64, 90.0 + 2.0 * (x - 5) as f64)).collect();
        assert!(close(pooled_slope(&[&a, &b]), 2.0));
        let whole: Vec<(f64, f64)> = a.iter().chain(&b).copied().collect();
        assert!(slope(&whole).unwrap() < 0.0);
        // Flat lifetimes at different levels: no trend.
        let c: Vec<(f64, f64)> = (0..5).map(|x| (x as f64, 50.0)).collect();
        let d: Vec<(f64, f64)> = (5..10).map(|x| (x as f64, 80.0)).collect();
        assert!(close(pooled_slope(&[&c, &d]), 0.0));
        assert!(
            close(pooled_slope(&[&c, &[(20.0, 1.0)]]), 0.0),
            "a one-point segment adds nothing"
        );
    }
}
