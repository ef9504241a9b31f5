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

#[cfg(test)]
mod tests {
    use super::*;

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
}
