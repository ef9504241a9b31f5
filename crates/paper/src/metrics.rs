//! Retrieval metrics.

/// Recall@k as the paper defines it: 1 if any of the first `k` results has the query's label.
pub fn recall_at_k(result_labels: &[u32], query_label: u32, k: usize) -> f64 {
    let hit = result_labels.iter().take(k).any(|&l| l == query_label);
    if hit {
        1.0
    } else {
        0.0
    }
}

/// Average precision of a full ranking: mean over the relevant items of the precision at their
/// rank. `relevant_total` is the number of relevant items in the ranked set (0 gives 0).
pub fn average_precision(ranked_labels: &[u32], query_label: u32, relevant_total: usize) -> f64 {
    if relevant_total == 0 {
        return 0.0;
    }
    let mut hits = 0usize;
    let mut sum = 0.0;
    for (rank, &l) in ranked_labels.iter().enumerate() {
        if l == query_label {
            hits += 1;
            sum += hits as f64 / (rank + 1) as f64;
        }
    }
    sum / relevant_total as f64
}

/// Share of `truth` (the true nearest neighbours in feature space) that `returned` contains.
pub fn overlap(returned: &[usize], truth: &[usize]) -> f64 {
    if truth.is_empty() {
        return 0.0;
    }
    let hits = truth.iter().filter(|t| returned.contains(t)).count();
    hits as f64 / truth.len() as f64
}

/// Mean of a sample (0 for an empty one).
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_is_any_hit_in_top_k() {
        assert_eq!(recall_at_k(&[1, 2, 3], 3, 3), 1.0);
        assert_eq!(recall_at_k(&[1, 2, 3], 3, 2), 0.0);
        assert_eq!(recall_at_k(&[], 3, 8), 0.0);
    }

    #[test]
    fn average_precision_known_values() {
        // relevant at ranks 1 and 3 of 2 relevant: (1/1 + 2/3) / 2.
        let ap = average_precision(&[7, 1, 7, 2], 7, 2);
        assert!((ap - (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-15);
        assert_eq!(average_precision(&[7, 7], 7, 2), 1.0);
        assert_eq!(average_precision(&[1, 2], 7, 0), 0.0);
    }

    #[test]
    fn overlap_counts_shared_items() {
        assert_eq!(overlap(&[1, 2, 3, 4], &[4, 9]), 0.5);
    }
}
