//! One slice of `N`: the batch build's workers and the PIR databases' row shards split by it.

/// Slices at most.
const MAX_SHARDS: usize = 4096;

/// Slice `index` of `count`: a batch build's worker (`server build --shard i/N`) or a row
/// shard of the PIR databases (`server serve --shard-rows i/S`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    /// `i/N` with `0 ≤ i < N ≤ 4096`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s.split_once('/').ok_or("expected i/N, e.g. 0/3")?;
        let index: usize = i.trim().parse().map_err(|e| format!("{i:?}: {e}"))?;
        let count: usize = n.trim().parse().map_err(|e| format!("{n:?}: {e}"))?;
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(format!(
                "need 0 ≤ i < N ≤ {MAX_SHARDS}, got {index}/{count}"
            ));
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// The positions of `0..n` this slice takes: contiguous, as even as can be, so the joined
    /// rows keep the gallery's order whatever `count` is.
    pub fn range(self, n: usize) -> std::ops::Range<usize> {
        n * self.index / self.count..n * (self.index + 1) / self.count
    }
}
