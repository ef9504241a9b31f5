//! What a release and a privacy total are, in words — for the page (through `client-wasm`)
//! and the CLI alike, so both say the same thing, and every name and figure in it comes from
//! the [`Receipt`] the release produced or the [`Total`] composed from receipts (one source:
//! nothing here is typed by hand beside a figure).
//!
//! Plain words come first and the technical term after them, in brackets; the page's
//! glossary explains the terms.

use dp::budget::{Composition, Total};
use dp::mechanism::{Receipt, ReleaseKind};
use serde::Serialize;

/// The name of the mechanism that made a release: plain words, then the term.
pub fn mechanism_name(kind: ReleaseKind) -> &'static str {
    match kind {
        ReleaseKind::BlockSubset => {
            "a random choice of blocks that hides yours among others (the k-subset mechanism, pure ε-DP)"
        }
        ReleaseKind::DiscreteGaussian => {
            "random noise added to the numbers sent (discrete Gaussian noise, calibrated by zero-concentrated DP)"
        }
        ReleaseKind::AnalyticGaussian => {
            "random noise added to the numbers sent (analytic Gaussian calibration, sampled as a discrete Gaussian)"
        }
        ReleaseKind::ClassicGaussian => {
            "random noise added to the numbers sent (classic Gaussian calibration, sampled as a discrete Gaussian)"
        }
    }
}

/// A figure as both clients print it: up to 3 significant digits, no trailing zeros.
pub fn figure(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if (1e-3..1e6).contains(&x.abs()) {
        let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
        let s = format!("{x:.digits$}");
        let s = if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        };
        return s;
    }
    // 3.97e-5, as JavaScript's `toExponential(2)` would, trailing zeros dropped.
    let s = format!("{x:.2e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let m = if m.contains('.') {
        m.trim_end_matches('0').trim_end_matches('.')
    } else {
        m
    };
    format!("{m}e{e}")
}

/// One release, in words, from its receipt: what was done, ε, the δ at which it is proven
/// (the requested δ beside it when they differ, as for the analytic calibration, exact only
/// for continuous noise) and, for noise, ρ.
pub fn release(r: &Receipt) -> String {
    let name = mechanism_name(r.mechanism);
    match r.mechanism {
        ReleaseKind::BlockSubset => format!("{name}: ε = {}, δ = 0", figure(r.epsilon)),
        _ => {
            let asked = if figure(r.proven_delta) != figure(r.delta) {
                format!(
                    " (δ = {} was asked for; this is what the noise drawn proves)",
                    figure(r.delta)
                )
            } else {
                String::new()
            };
            format!(
                "{name}: ε = {}, δ = {}{asked}; ρ = {} (zero-concentrated DP)",
                figure(r.epsilon),
                figure(r.proven_delta),
                figure(r.zcdp_rho)
            )
        }
    }
}

/// How a total was composed, as a heading: plain words, then the term.
pub fn composition_name(method: Composition) -> &'static str {
    match method {
        Composition::Nothing => "nothing released yet",
        Composition::Basic => "each search's ε added up (basic composition)",
        Composition::Zcdp => {
            "each search's ρ added up, then turned into ε (zero-concentrated DP composition)"
        }
        Composition::PurePlusZcdp => {
            "the block searches' ε added up, plus the noisy searches' ρ added up and turned into ε (pure ε-DP plus zero-concentrated DP)"
        }
    }
}

/// A total in words: its heading ([`composition_name`]) and how the figure was reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TotalWords {
    /// The composition the total's ε comes from, in words.
    pub method: &'static str,
    /// The figures, in a sentence or two.
    pub text: String,
    /// "ε = 4.12 over 3 searches".
    pub short: String,
}

/// A privacy total in words, from the total and the receipts it was composed from.
pub fn total(t: &Total, receipts: &[Receipt]) -> TotalWords {
    let d = figure(t.delta);
    let eps: Vec<String> = receipts.iter().map(|r| figure(r.epsilon)).collect();
    let sum = if eps.len() <= 8 {
        format!("{} = {}", eps.join(" + "), figure(t.basic_epsilon))
    } else {
        format!("{} in all", figure(t.basic_epsilon))
    };
    let over_delta = |at: &str| {
        if t.basic_delta > t.delta {
            format!(
                "{at}their δ's, {}, would pass δ = {d}",
                figure(t.basic_delta)
            )
        } else {
            String::new()
        }
    };
    let text = match t.method {
        Composition::Nothing => "Nothing has been released yet.".to_string(),
        Composition::Basic => format!(
            "Each search's ε is added (basic composition; their δ's add up to {}, within δ = {d}): {sum}.",
            figure(t.basic_delta)
        ),
        Composition::Zcdp => format!(
            "Each search's ρ is added (zero-concentrated DP): ρ = {} in all, which is ε = {} at δ = {d}. \
             (Adding the ε's instead would give {}{}.)",
            figure(t.zcdp_rho),
            figure(t.epsilon),
            figure(t.basic_epsilon),
            over_delta(", and ")
        ),
        Composition::PurePlusZcdp => format!(
            "The block searches' ε's are added (pure ε-DP): {}; the noisy-numbers searches' ρ's are added \
             (zero-concentrated DP): ρ = {}, which is ε = {} at δ = {d}; together ε = {} at δ = {d}. \
             (Adding every ε would give {}{}.)",
            figure(t.pure_epsilon),
            figure(t.gaussian_rho),
            figure(t.epsilon - t.pure_epsilon),
            figure(t.epsilon),
            figure(t.basic_epsilon),
            over_delta(", and ")
        ),
    };
    let n = t.releases;
    TotalWords {
        method: composition_name(t.method),
        text,
        short: format!(
            "ε = {} over {n} search{}",
            figure(t.epsilon),
            if n == 1 { "" } else { "es" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dp::budget::compose;
    use dp::mechanism::release as dp_release;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use shared::{DMatrix, Mechanism, PrivacyParams};

    fn gaussian(mechanism: Mechanism, epsilon: f64) -> Receipt {
        let p = PrivacyParams {
            epsilon,
            delta: 1e-5,
            mechanism,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        dp_release(&DMatrix::zeros(2, 3), 1.0, &p, &mut rng)
            .unwrap()
            .1
    }

    #[test]
    fn figures_read_as_written() {
        assert_eq!(figure(0.0), "0");
        assert_eq!(figure(4.0), "4");
        assert_eq!(figure(0.5), "0.5");
        assert_eq!(figure(12.345), "12.3");
        assert_eq!(figure(3.9712e-5), "3.97e-5");
        assert_eq!(figure(1e-5), "1e-5");
    }

    /// Each mechanism's words name that mechanism and no other, and state the receipt's own ε,
    /// δ (the proven one) and ρ.
    #[test]
    fn each_release_is_worded_from_its_receipt() {
        let receipts = [
            gaussian(Mechanism::DiscreteGaussian, 1.0),
            gaussian(Mechanism::AnalyticGaussian, 1.0),
            gaussian(Mechanism::ClassicGaussian, 0.5),
            Receipt::pure(4.0, ReleaseKind::BlockSubset),
        ];
        let terms = [
            "discrete Gaussian noise",
            "analytic Gaussian",
            "classic Gaussian",
            "k-subset",
        ];
        for (r, term) in receipts.iter().zip(terms) {
            let w = release(r);
            assert!(w.contains(term), "{w}");
            for other in terms.iter().filter(|t| **t != term) {
                assert!(!w.contains(other), "{w} names {other}");
            }
            assert!(w.contains(&format!("ε = {}", figure(r.epsilon))), "{w}");
            assert!(
                w.contains(&format!("δ = {}", figure(r.proven_delta))),
                "{w}"
            );
            if r.mechanism != ReleaseKind::BlockSubset {
                assert!(w.contains(&format!("ρ = {}", figure(r.zcdp_rho))), "{w}");
            }
        }
        // The analytic calibration proves a larger δ than asked for, and says both.
        let a = &receipts[1];
        assert!(a.proven_delta > a.delta, "{a:?}");
        let w = release(a);
        assert!(
            w.contains(&format!("δ = {} was asked for", figure(a.delta))),
            "{w}"
        );
        assert!(!release(&receipts[0]).contains("asked for"));
    }

    /// The heading names the composition the total's ε came from, and the text agrees.
    #[test]
    fn a_total_is_worded_by_the_composition_it_used() {
        let block = Receipt::pure(1.0, ReleaseKind::BlockSubset);
        let noise = gaussian(Mechanism::DiscreteGaussian, 1.0);
        for (list, method) in [
            (vec![], Composition::Nothing),
            (vec![block; 3], Composition::Basic),
            (vec![noise; 25], Composition::Zcdp),
        ] {
            let t = compose(&list, 1e-5).unwrap();
            assert_eq!(t.method, method, "{t:?}");
            let w = total(&t, &list);
            assert_eq!(w.method, composition_name(method));
            assert!(w.short.contains(&figure(t.epsilon)), "{w:?}");
            match method {
                Composition::Basic => {
                    assert!(w.method.contains("basic") && w.text.contains("basic composition"))
                }
                Composition::Zcdp => assert!(
                    w.method.contains("zero-concentrated") && !w.method.contains("basic"),
                    "{w:?}"
                ),
                _ => {}
            }
        }
    }
}
