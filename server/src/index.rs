//! Exact k-nearest-neighbour index over the gallery embedding: a k-d tree (kiddo) for the
//! default 2-D embedding, brute force for other dimensions. O(n log n) to build, about
//! O(log n + k) per query in 2-D.

use std::num::NonZeroUsize;

use kiddo::immutable::float::kdtree::ImmutableKdTree;
use kiddo::SquaredEuclidean;
use shared::retrieve::{knn_rows, Neighbor};

pub enum Index {
    Kd2(Box<ImmutableKdTree<f64, u64, 2, 32>>),
    Brute(Vec<Vec<f64>>),
}

impl Index {
    /// Build over row-major rows of equal length.
    pub fn build(rows: &[Vec<f64>]) -> Self {
        if !rows.is_empty() && rows[0].len() == 2 {
            let pts: Vec<[f64; 2]> = rows.iter().map(|r| [r[0], r[1]]).collect();
            Index::Kd2(Box::new(ImmutableKdTree::new_from_slice(&pts)))
        } else {
            Index::Brute(rows.to_vec())
        }
    }

    /// The `k` nearest rows, nearest first.
    pub fn knn(&self, query: &[f64], k: usize) -> Vec<Neighbor> {
        match self {
            Index::Kd2(tree) => {
                let Some(k) = NonZeroUsize::new(k) else {
                    return Vec::new();
                };
                tree.nearest_n::<SquaredEuclidean>(&[query[0], query[1]], k)
                    .into_iter()
                    .map(|n| Neighbor {
                        index: n.item as usize,
                        distance: n.distance.sqrt(),
                    })
                    .collect()
            }
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
}
