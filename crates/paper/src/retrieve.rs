//! Exact k-nearest-neighbour search by brute force: O(n·k_dim) time and O(k) extra memory per
//! query. The server layers an index on top for low dimensions; this is the reference.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

use crate::laplacian::dist2;

/// One result: a gallery row and its Euclidean distance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Neighbor {
    pub index: usize,
    pub distance: f64,
}

#[derive(PartialEq)]
struct ByDist(f64, usize);
impl Eq for ByDist {}
impl PartialOrd for ByDist {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByDist {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// The `k` rows of `gallery` nearest to `query`, nearest first (ties by index), skipping
/// `exclude` (leave-one-out).
pub fn knn(
    gallery: &DMatrix<f64>,
    query: &[f64],
    k: usize,
    exclude: Option<usize>,
) -> Vec<Neighbor> {
    let rows = gallery_rows(gallery);
    knn_rows(&rows, query, k, exclude)
}

/// Row-major copy of a matrix (nalgebra stores columns).
pub fn gallery_rows(m: &DMatrix<f64>) -> Vec<Vec<f64>> {
    m.row_iter().map(|r| r.iter().copied().collect()).collect()
}

/// [`knn`] over row-major rows.
pub fn knn_rows(
    rows: &[Vec<f64>],
    query: &[f64],
    k: usize,
    exclude: Option<usize>,
) -> Vec<Neighbor> {
    let mut heap: BinaryHeap<ByDist> = BinaryHeap::with_capacity(k + 1);
    for (i, row) in rows.iter().enumerate() {
        if Some(i) == exclude {
            continue;
        }
        let d = dist2(row, query);
        if heap.len() < k {
            heap.push(ByDist(d, i));
        } else if let Some(top) = heap.peek() {
            if ByDist(d, i) < *top {
                heap.pop();
                heap.push(ByDist(d, i));
            }
        }
    }
    let mut out: Vec<ByDist> = heap.into_vec();
    out.sort();
    out.into_iter()
        .map(|ByDist(d, i)| Neighbor {
            index: i,
            distance: d.sqrt(),
        })
        .collect()
}

/// Every row's squared distance to `query`, ranked nearest first (for mAP over the full list).
pub fn full_ranking(rows: &[Vec<f64>], query: &[f64], exclude: Option<usize>) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = rows
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != exclude)
        .map(|(i, r)| (dist2(r, query), i))
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// Gallery rows with public class labels, for the class-posterior rankings: `flat` holds
/// `labels.len()` rows row-major, every label `< num_classes`.
#[derive(Debug, Clone, Copy)]
pub struct LabelledRows<'a> {
    pub flat: &'a [f64],
    pub labels: &'a [u32],
    pub num_classes: usize,
}

/// Ranking of a noisy query by the probability ranking principle. `query` is a released row
/// `y = z + n` with `n ~ N(0, σ²I)`; taking the query to be one of the gallery items, a priori
/// uniformly, item `g` has posterior `p(g | y) ∝ exp(−‖y − z_g‖²/(2σ²))`, and the probability
/// that `g` is relevant (shares the query's class) is the posterior mass of its class,
/// `P(class(g) | y)`. Ranking by that (ties by distance) maximises the expected number of
/// relevant items among the first k for every k — the nearest-neighbour ranking does not,
/// because under heavy noise the nearest items are the gallery's ambiguous ones. Reads only
/// the release and public data, so it is post-processing. `labels` must be `< num_classes`.
/// `flat` holds the gallery rows row-major (`labels.len()` rows of `query.len()` entries).
/// Returns at most `k` indices (`usize::MAX` for all), `exclude` skipped; O(N) plus the sort of
/// what is returned.
pub fn posterior_ranking(
    gallery: &LabelledRows,
    query: &[f64],
    sigma: f64,
    k: usize,
    exclude: Option<usize>,
) -> Vec<usize> {
    let post = class_posterior(gallery, query, sigma, exclude);
    let mut out = Vec::with_capacity(k.min(gallery.labels.len()));
    extend_by_class(
        &mut out,
        &post,
        gallery.labels,
        k,
        &vec![0; gallery.num_classes],
    );
    out
}

/// Like [`posterior_ranking`], but the first `seats` places (the page the user sees) are
/// shared among the classes in proportion to their posterior mass (Sainte-Laguë: each seat
/// goes to the class with the largest `P(c | y)/(2·s_c + 1)`, `s_c` its seats so far; PM-2,
/// Dang & Croft 2012). When the release is sharp (one class holds almost all the mass) every
/// seat goes to that class, as in [`posterior_ranking`]; when it is noisy the page shows the
/// several probable classes instead of betting all of it on one — which is what a user
/// needs to find their category among the results at strong privacy. Places after `seats`
/// follow [`posterior_ranking`]. Post-processing of the release, like it. Returns at most `k`.
pub fn proportional_ranking(
    gallery: &LabelledRows,
    query: &[f64],
    sigma: f64,
    seats: usize,
    k: usize,
    exclude: Option<usize>,
) -> Vec<usize> {
    let (labels, num_classes) = (gallery.labels, gallery.num_classes);
    let post = class_posterior(gallery, query, sigma, exclude);
    let (mass, available) = (&post.mass, &post.available);
    let mut taken = vec![0usize; num_classes];
    let mut order = Vec::new();
    for _ in 0..seats.min(k) {
        let best = (0..num_classes)
            .filter(|&c| taken[c] < available[c])
            .max_by(|&a, &b| {
                let q = |c: usize| mass[c] / (2 * taken[c] + 1) as f64;
                q(a).total_cmp(&q(b)).then(b.cmp(&a))
            });
        let Some(c) = best else { break };
        taken[c] += 1;
        order.push(c);
    }
    // Each seated class's nearest items, in the order the seats were won.
    let mut out = Vec::with_capacity(k.min(labels.len()));
    let mut nearest = nearest_by_class(&post.d2, labels, &taken);
    nearest.iter_mut().for_each(|v| v.reverse());
    for c in order {
        out.push(nearest[c].pop().expect("seat within the class's items"));
    }
    // The seated items are each class's nearest, so the rest skips exactly that many.
    extend_by_class(&mut out, &post, labels, k, &taken);
    out
}

/// What the class-posterior rankings know about one release.
struct Posterior {
    /// Squared distance of every item (the excluded one: ∞).
    d2: Vec<f64>,
    /// The normalised class posterior `P(c | y)`.
    mass: Vec<f64>,
    /// Items of each class that may be returned.
    available: Vec<usize>,
}

/// The [`Posterior`] of a release, in one pass over the gallery after the distances.
fn class_posterior(
    gallery: &LabelledRows,
    query: &[f64],
    sigma: f64,
    exclude: Option<usize>,
) -> Posterior {
    let LabelledRows {
        flat,
        labels,
        num_classes,
    } = *gallery;
    let dim = query.len();
    let n = labels.len();
    assert_eq!(flat.len(), n * dim, "rows must be n × dim, row-major");
    // Contiguous passes (they vectorise): squared distances, then weights.
    let mut d2: Vec<f64> = flat
        .chunks_exact(dim)
        .map(|r| r.iter().zip(query).map(|(a, b)| (a - b) * (a - b)).sum())
        .collect();
    if let Some(e) = exclude.filter(|&e| e < n) {
        d2[e] = f64::INFINITY;
    }
    let best = d2.iter().copied().fold(f64::INFINITY, f64::min);
    let scale = 0.5 / (sigma * sigma);
    // Class masses by log-sum-exp relative to the best item, so nothing underflows to 0/0.
    let mut mass = vec![0.0f64; num_classes];
    let mut available = vec![0usize; num_classes];
    for (&v, &l) in d2.iter().zip(labels) {
        if v.is_finite() {
            mass[l as usize] += crate::laplacian::exp_neg(-(v - best) * scale);
            available[l as usize] += 1;
        }
    }
    let total: f64 = mass.iter().sum();
    if total > 0.0 {
        mass.iter_mut().for_each(|m| *m /= total);
    }
    Posterior {
        d2,
        mass,
        available,
    }
}

/// For every class `c`, its `need[c]` items nearest first (ties by index); one pass over the
/// gallery, then a selection per class.
fn nearest_by_class(d2: &[f64], labels: &[u32], need: &[usize]) -> Vec<Vec<usize>> {
    let mut buckets: Vec<Vec<(f64, usize)>> = vec![Vec::new(); need.len()];
    for (i, (&d, &l)) in d2.iter().zip(labels).enumerate() {
        if need[l as usize] > 0 && d.is_finite() {
            buckets[l as usize].push((d, i));
        }
    }
    let by_dist = |a: &(f64, usize), b: &(f64, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    buckets
        .into_iter()
        .zip(need)
        .map(|(mut items, &n)| {
            if n < items.len() {
                items.select_nth_unstable_by(n, by_dist);
                items.truncate(n);
            }
            items.sort_by(by_dist);
            items.into_iter().map(|(_, i)| i).collect()
        })
        .collect()
}

/// Append the most probable class's items nearest first, then the next class's, until `out`
/// holds `k`, leaving out each class's `shown[c]` nearest items (already placed). One pass over
/// the gallery for all classes.
fn extend_by_class(
    out: &mut Vec<usize>,
    post: &Posterior,
    labels: &[u32],
    k: usize,
    shown: &[usize],
) {
    let mut classes: Vec<usize> = (0..post.mass.len()).collect();
    classes.sort_by(|&a, &b| post.mass[b].total_cmp(&post.mass[a]).then(a.cmp(&b)));
    let mut want = vec![0usize; classes.len()];
    let mut left = k.saturating_sub(out.len());
    for &c in &classes {
        let n = (post.available[c] - shown[c]).min(left);
        if n > 0 {
            want[c] = shown[c] + n;
            left -= n;
        }
    }
    if want.iter().all(|&w| w == 0) {
        return; // the page is full already
    }
    let nearest = nearest_by_class(&post.d2, labels, &want);
    for c in classes {
        out.extend(nearest[c].iter().skip(shown[c]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A noisy query between a dense class and one ambiguous item of another class: nearest
    /// neighbour returns the ambiguous item first, the posterior ranking the dense class; with
    /// tiny noise both agree.
    #[test]
    fn posterior_ranking_prefers_the_probable_class() {
        let mut rows: Vec<Vec<f64>> = (0..20).map(|i| vec![1.0 + 0.01 * i as f64, 0.0]).collect();
        let mut labels = vec![0u32; 20];
        rows.push(vec![0.45, 0.0]);
        labels.push(1);
        rows.push(vec![-1.0, 0.0]);
        labels.push(1);
        let y = [0.4, 0.0];
        assert_eq!(full_ranking(&rows, &y, None)[0], 20);
        let flat: Vec<f64> = rows.concat();
        let two = LabelledRows {
            flat: &flat,
            labels: &labels,
            num_classes: 2,
        };
        let pr = posterior_ranking(&two, &y, 0.6, usize::MAX, None);
        assert_eq!(pr.len(), 22);
        assert!(pr[..20].iter().all(|&i| labels[i] == 0), "{pr:?}");
        let sharp = posterior_ranking(&two, &y, 0.01, 3, Some(21));
        assert_eq!(sharp[0], 20);
        assert_eq!(sharp.len(), 3);
        assert!(!sharp.contains(&21));
        // Far from everything: still a valid ranking (no NaN from underflow).
        let far = posterior_ranking(&two, &[1e6, 1e6], 0.01, 5, None);
        assert_eq!(far.len(), 5);
    }

    #[test]
    fn knn_matches_full_sort_and_excludes() {
        let g = DMatrix::from_fn(200, 2, |i, j| ((i * 37 + j * 11) % 101) as f64 / 7.0);
        let rows = gallery_rows(&g);
        let q = [3.0, 4.0];
        let full = full_ranking(&rows, &q, Some(5));
        let top = knn(&g, &q, 10, Some(5));
        assert_eq!(top.iter().map(|n| n.index).collect::<Vec<_>>(), full[..10]);
        assert!(top.iter().all(|n| n.index != 5));
        assert!(top.windows(2).all(|w| w[0].distance <= w[1].distance));
        assert_eq!(knn(&g, &q, 0, None).len(), 0);
        assert_eq!(knn(&g, &q, 500, None).len(), 200);
    }

    #[test]
    fn proportional_ranking_shares_the_page_only_when_unsure() {
        // Three classes in a line; the query between classes 0 and 1.
        let mut flat = Vec::new();
        let mut labels = Vec::new();
        for c in 0..3u32 {
            for i in 0..10 {
                flat.extend([c as f64 + 0.001 * i as f64, 0.0]);
                labels.push(c);
            }
        }
        let three = LabelledRows {
            flat: &flat,
            labels: &labels,
            num_classes: 3,
        };
        // Unsure (σ large): the 8 seats go to all three classes; the rest follows the
        // posterior ranking and every item appears once.
        let wide = proportional_ranking(&three, &[0.5, 0.0], 5.0, 8, usize::MAX, None);
        assert_eq!(wide.len(), 30);
        let mut seen = wide.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 30);
        for c in 0..3 {
            assert!(wide[..8].iter().any(|&i| labels[i] == c), "{wide:?}");
        }
        // Sure (σ small): all seats to the nearest class, exactly the posterior ranking.
        let sharp = proportional_ranking(&three, &[0.1, 0.0], 0.05, 8, 12, Some(0));
        let pr = posterior_ranking(&three, &[0.1, 0.0], 0.05, 12, Some(0));
        assert_eq!(sharp, pr);
        assert!(!sharp.contains(&0));
        // A class with fewer items than its seats gives the rest up.
        let part = LabelledRows {
            flat: &flat[..6],
            labels: &labels[..3],
            num_classes: 3,
        };
        let few = proportional_ranking(&part, &[0.0, 0.0], 0.05, 8, 8, None);
        assert_eq!(few.len(), 3);
    }
}
