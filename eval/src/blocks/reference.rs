//! The ε grids, the fidelity targets (ours and the issue's) and the reference curves a pool
//! is judged against.

/// ε of the 10,000 gallery, and of the large one.
pub const EPSILONS: [f64; 5] = [1.0, 2.0, 4.0, 6.0, 8.0];
pub const LARGE_EPSILONS: [f64; 3] = [4.0, 6.0, 8.0];

/// Fidelity targets of the issue.
pub const TARGETS: [f64; 3] = [0.95, 0.90, 0.85];

/// The issue's targets: (ε, fidelity, largest pool).
pub const ISSUE_TARGETS: [(f64, f64, f64); 4] = [
    (8.0, 0.95, 0.05),
    (6.0, 0.95, 0.12),
    (4.0, 0.90, 0.30),
    (2.0, 0.85, 0.55),
];

/// The reference curve: the least expected share of blocks any symmetric
/// randomized-response-type mechanism must release to hold the true block with probability P.
pub fn reference_pool(p: f64, eps: f64) -> f64 {
    p / (p + eps.exp() * (1.0 - p))
}

/// The lower bound for any ε-DP pool: P·e^(−ε).
pub fn reference_lower(p: f64, eps: f64) -> f64 {
    p * (-eps).exp()
}
