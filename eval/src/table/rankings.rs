//! Rankings of the baselines and chance levels that are not in `shared`: the one-per-class
//! page, random class blocks, t-SNE and Hamming ranking.

use crate::baselines::hashing::hamming;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use super::methods::{CHANCE_BLOCKS, CHANCE_ORDER, CHANCE_PAGE};
use super::report::Triple;
use super::setting::{score, Setting};
use crate::rng::query_rng;

/// The first item of each class in `ranking`, up to `k` of them, moved to the front (in the
/// ranking's order); the rest keep their order.
pub(super) fn one_per_class_first(ranking: Vec<usize>, labels: &[u32], k: usize) -> Vec<usize> {
    let mut seen = vec![false; labels.iter().max().map_or(0, |&m| m as usize + 1)];
    let (mut page, mut rest) = (Vec::with_capacity(k), Vec::with_capacity(ranking.len()));
    for i in ranking {
        let c = labels[i] as usize;
        if page.len() < k && !seen[c] {
            seen[c] = true;
            page.push(i);
        } else {
            rest.push(i);
        }
    }
    page.extend(rest);
    page
}

/// A random order of the classes, and every item but `exclude` in random order grouped by
/// class in that order (what a class-level ranking degenerates to without signal).
pub(super) fn class_blocks(
    labels: &[u32],
    exclude: usize,
    rng: &mut impl RngCore,
) -> (Vec<u32>, Vec<usize>) {
    let mut classes: Vec<u32> = (0..10).collect();
    classes.shuffle(rng);
    let mut order: Vec<usize> = (0..labels.len()).filter(|&i| i != exclude).collect();
    order.shuffle(rng);
    order.sort_by_key(|&i| classes.iter().position(|&c| c == labels[i]));
    (classes, order)
}

/// Barnes–Hut t-SNE (θ = 0.5, perplexity 30 — less for fewer than 91 rows, as the
/// neighbour search needs 3·perplexity — 1,000 epochs) of unit rows to 2-D, started from a
/// seeded N(0, 10⁻⁴) layout so that a run is reproducible.
pub(super) fn tsne(
    rows: &[Vec<f64>],
    seed: u64,
) -> Result<Vec<Vec<f64>>, rayon::ThreadPoolBuildError> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let samples: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
    let init: Vec<f64> = (0..2 * rows.len())
        .map(|_| {
            1e-2 * rand_distr::Distribution::<f64>::sample(&rand_distr::StandardNormal, &mut rng)
        })
        .collect();
    let perplexity = ((rows.len().saturating_sub(1) / 3) as f64).clamp(1.0, 30.0);
    // bhtsne sums forces with rayon, whose splitting (and so the floating-point order)
    // depends on work stealing: one thread makes a run reproducible.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    Ok(pool.install(|| {
        let mut t = bhtsne::tSNE::<f64, &[f64], 2>::new(&samples);
        t.perplexity(perplexity)
            .epochs(1000)
            .initial_embedding(init)
            .barnes_hut(0.5, |a, b| {
                a.iter()
                    .zip(b.iter())
                    .map(|(x, y)| (x - y) * (x - y))
                    .sum::<f64>()
                    .sqrt()
            });
        t.embedding().chunks(2).map(<[f64]>::to_vec).collect()
    }))
}

/// Rank by Hamming distance, ties broken by a random order (codes tie often).
pub(super) fn hamming_ranking(
    codes: &[Vec<bool>],
    query: &[bool],
    exclude: usize,
    rng: &mut impl RngCore,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..codes.len()).filter(|&i| i != exclude).collect();
    order.shuffle(rng);
    order.sort_by_key(|&i| hamming(&codes[i], query));
    order
}

/// The chance levels of one seed's setting (see `methods`), each pushed as a non-private row.
pub(super) fn chance_levels(
    s: &Setting,
    k: usize,
    seed: u64,
    push: &mut impl FnMut(&'static str, Option<f64>, Triple),
) -> Result<(), shared::Error> {
    let g = s.gallery.nrows();
    push(
        CHANCE_ORDER,
        None,
        score(s, k, |q| {
            let mut order: Vec<usize> = (0..g).filter(|&i| i != q).collect();
            order.shuffle(&mut query_rng(seed, q, 97, 0.0));
            Ok(order)
        })?,
    );
    push(
        CHANCE_BLOCKS,
        None,
        score(s, k, |q| {
            Ok(class_blocks(&s.labels, q, &mut query_rng(seed, q, 98, 0.0)).1)
        })?,
    );
    push(
        CHANCE_PAGE,
        None,
        score(s, k, |q| {
            let (classes, mut order) = class_blocks(&s.labels, q, &mut query_rng(seed, q, 96, 0.0));
            // The first item of each of the first k classes moves to the front.
            let mut firsts: Vec<usize> = classes
                .iter()
                .take(k)
                .filter_map(|&c| order.iter().position(|&i| s.labels[i] == c))
                .collect();
            firsts.sort_unstable();
            let page: Vec<usize> = firsts.iter().map(|&p| order[p]).collect();
            for p in firsts.into_iter().rev() {
                order.remove(p);
            }
            Ok(page.into_iter().chain(order).collect())
        })?,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::one_per_class_first;

    #[test]
    fn one_per_class_first_moves_each_class_s_first_item_up() {
        // Items 0..6 with classes 0,0,1,0,2,1; a page of 2 then of 5.
        let labels = [0, 0, 1, 0, 2, 1];
        let ranking = vec![0, 1, 2, 3, 4, 5];
        assert_eq!(
            one_per_class_first(ranking.clone(), &labels, 2),
            [0, 2, 1, 3, 4, 5]
        );
        // Only three classes exist: the page holds three, then the rest in order.
        assert_eq!(one_per_class_first(ranking, &labels, 5), [0, 2, 4, 1, 3, 5]);
    }
}
