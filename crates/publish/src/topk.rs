//! The `k` nearest of a stream of candidates, as the partition and the block ranking keep them.

/// A bounded list of the `k` smallest `(distance, id)` pairs, ties to the lower id.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    items: Vec<(f32, u32)>,
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            items: Vec::with_capacity(k + 1),
        }
    }
    #[inline]
    pub fn push(&mut self, d: f32, id: u32) {
        if self.items.len() == self.k {
            let (wd, wid) = self.items[self.k - 1];
            if d > wd || (d == wd && id >= wid) {
                return;
            }
            self.items.pop();
        }
        let pos = self
            .items
            .partition_point(|&(bd, bid)| bd < d || (bd == d && bid < id));
        self.items.insert(pos, (d, id));
    }
    /// The ids, nearest first, in an allocation of exactly their size: `collect` over
    /// `into_iter` would reuse the pairs' allocation in place, twice the bytes the ids need —
    /// 1.5 GB instead of 0.77 GB for a million items' 192 closure neighbours.
    pub fn into_ids(self) -> Vec<u32> {
        let mut ids = Vec::with_capacity(self.items.len());
        ids.extend(self.items.iter().map(|&(_, i)| i));
        ids
    }
    pub fn into_pairs(self) -> Vec<(f32, u32)> {
        self.items
    }
}
