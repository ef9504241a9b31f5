//! Exact k-nearest-neighbour index over gallery rows: a k-d tree (kiddo) for the default 2-D
//! embedding and the 10-class anchor frame, brute force for other dimensions. O(n log n) to
//! build, about O(log n + k) per query in 2-D.

use std::num::NonZeroUsize;

use kiddo::immutable::float::kdtree::ImmutableKdTree;
use kiddo::SquaredEuclidean;
use paper::retrieve::{knn_rows, Neighbor};

pub enum Index {
    Kd2(Box<ImmutableKdTree<f64, u64, 2, 32>>),
    /// The anchor frame of 10 classes.
    Kd10(Box<ImmutableKdTree<f64, u64, 10, 32>>),
    Brute(Vec<Vec<f64>>),
}

fn tree<'a, const K: usize>(
    rows: impl Iterator<Item = &'a [f64]>,
) -> Box<ImmutableKdTree<f64, u64, K, 32>> {
    let pts: Vec<[f64; K]> = rows.map(|r| std::array::from_fn(|j| r[j])).collect();
    Box::new(ImmutableKdTree::new_from_slice(&pts))
}

fn nearest<const K: usize>(
    tree: &ImmutableKdTree<f64, u64, K, 32>,
    query: &[f64],
    k: usize,
) -> Vec<Neighbor> {
    let Some(k) = NonZeroUsize::new(k) else {
        return Vec::new();
    };
    let q: [f64; K] = std::array::from_fn(|j| query[j]);
    tree.nearest_n::<SquaredEuclidean>(&q, k)
        .into_iter()
        .map(|n| Neighbor {
            index: n.item as usize,
            distance: n.distance.sqrt(),
        })
        .collect()
}

impl Index {
    /// Build over row-major rows of equal length.
    pub fn build(rows: &[Vec<f64>]) -> Self {
        match rows.first().map(Vec::len) {
            Some(2) => Index::Kd2(tree(rows.iter().map(Vec::as_slice))),
            Some(10) => Index::Kd10(tree(rows.iter().map(Vec::as_slice))),
            _ => Index::Brute(rows.to_vec()),
        }
    }

    /// [`Index::build`] over rows of `dim` values stored one after another.
    pub fn build_flat(flat: &[f64], dim: usize) -> Self {
        match dim {
            _ if flat.is_empty() || dim == 0 => Index::Brute(Vec::new()),
            2 => Index::Kd2(tree(flat.chunks_exact(2))),
            10 => Index::Kd10(tree(flat.chunks_exact(10))),
            _ => Index::Brute(flat.chunks_exact(dim).map(<[f64]>::to_vec).collect()),
        }
    }

    /// The `k` nearest rows, nearest first.
    pub fn knn(&self, query: &[f64], k: usize) -> Vec<Neighbor> {
        match self {
            Index::Kd2(t) => nearest(t, query, k),
            Index::Kd10(t) => nearest(t, query, k),
            Index::Brute(rows) => knn_rows(rows, query, k, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kd_tree_matches_brute_force() {
        let rows: Vec<Vec<f64>> = (0..5000)
            .map(|i| {
                let t = i as f64 * 0.7;
                vec![
                    t.sin() * (1.0 + (i % 13) as f64),
                    t.cos() * (1.0 + (i % 7) as f64),
                ]
            })
            .collect();
        let idx = Index::build(&rows);
        assert!(matches!(idx, Index::Kd2(_)));
        for q in [[0.0, 0.0], [3.3, -2.0], [100.0, 100.0], [-1.0, 0.5]] {
            for k in [1, 8, 50] {
                let a = idx.knn(&q, k);
                let b = knn_rows(&rows, &q, k, None);
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(&b) {
                    assert!((x.distance - y.distance).abs() < 1e-12);
                }
            }
        }
        assert!(idx.knn(&[0.0, 0.0], 0).is_empty());
    }

    /// Ties (many gallery items share a simplex vertex) are fine: distances agree.
    #[test]
    fn ten_dimensional_tree_matches_brute_force() {
        let rows: Vec<Vec<f64>> = (0..3000)
            .map(|i| {
                (0..10)
                    .map(|j| {
                        if i % 3 == 0 {
                            f64::from(j == i % 10)
                        } else {
                            ((i * 7 + j * 13) % 17) as f64 / 17.0
                        }
                    })
                    .collect()
            })
            .collect();
        let idx = Index::build(&rows);
        assert!(matches!(idx, Index::Kd10(_)));
        let flat = Index::build_flat(&rows.concat(), 10);
        assert!(matches!(flat, Index::Kd10(_)));
        assert!(matches!(Index::build_flat(&[], 10), Index::Brute(ref r) if r.is_empty()));
        let three = Index::build_flat(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3);
        assert!(
            matches!(three, Index::Brute(ref r) if r == &vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]])
        );
        for q in [vec![0.1; 10], rows[3].clone(), rows[100].clone()] {
            let b = knn_rows(&rows, &q, 8, None);
            for a in [idx.knn(&q, 8), flat.knn(&q, 8)] {
                assert_eq!(a.len(), 8);
                for (x, y) in a.iter().zip(&b) {
                    assert!((x.distance - y.distance).abs() < 1e-12);
                }
            }
        }
    }
}
