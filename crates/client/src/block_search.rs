//! The client's side of private block retrieval, for every client (browser and command line):
//! release which blocks to fetch, then rank what was fetched.
//!
//! # What leaves the client
//! Only [`BlockRequest::fetch`]: the blocks of the release in a fresh uniformly random order.
//! The release is the k-subset mechanism's output ([`dp::subset`], pure ε-DP for the
//! whole photo); the order is drawn independently of the photo, and the level and count come
//! from the plan, which is public ([`publish::plan`]). So every request the client
//! makes is a function of the release and public data alone (post-processing). Callers must
//! fetch them all, at once, by one code path, and must not retry or fetch anything else
//! depending on the result — the true block's position in [`BlockRequest::fetch`] is never
//! exposed.

use rand::RngCore;

use dp::exact::uniform_below;
use dp::mechanism::{Receipt, ReleaseKind};
use dp::subset;
use publish::blocks::{decode, rank, Block, Hit};
use publish::centroids::Centroids;
use publish::partition::nearest_centroid_fixed;
use publish::plan::{validate_doc, Plan};
use shared::api::PartitionDoc;
use shared::error::{Error, Result};
use shared::params::limits;

/// What one search fetches.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockRequest {
    pub level: usize,
    /// Block ids to fetch, in the order to issue the requests (uniformly random).
    pub fetch: Vec<u32>,
    /// What the release spent; `None` when the plan fetches every block (nothing released).
    pub receipt: Option<Receipt>,
}

/// The URL of a block, relative to the server (the document's `blocks_url` is relative or
/// absolute as the server chose).
pub fn block_url(doc: &PartitionDoc, level: usize, block: u32) -> String {
    format!("{}/{level}/{block}", doc.blocks_url.trim_end_matches('/'))
}

/// Release the blocks a search fetches for the photo with exact `features`. `centroids` are
/// the plan's level's (verified with [`publish::centroids::verify`]); a plan that
/// fetches every block of its level needs none.
///
/// Guarantee: pure `plan.epsilon`-DP (δ = 0) for the photo, from [`subset::release`]; the fetch
/// order is a uniform shuffle drawn from `rng` independently of the photo; a plan that fetches
/// every block of its level releases nothing (0-DP) and returns no receipt.
pub fn release_blocks(
    doc: &PartitionDoc,
    plan: &Plan,
    centroids: Option<&Centroids>,
    features: &[f32],
    rng: &mut impl RngCore,
) -> Result<BlockRequest> {
    validate_doc(doc)?;
    let level = doc.levels.get(plan.level).ok_or(Error::InvalidParameter {
        name: "plan",
        reason: format!("level {} is not in the partition", plan.level),
    })?;
    if level.blocks != plan.blocks || plan.size == 0 || plan.size > level.blocks {
        return Err(Error::InvalidParameter {
            name: "plan",
            reason: "does not match the partition".into(),
        });
    }
    shared::error::ensure_query_f32(features, doc.feature_dim)?;
    let (mut fetch, receipt) = if plan.size == level.blocks {
        ((0..level.blocks).collect::<Vec<u32>>(), None)
    } else {
        let c = centroids.ok_or(Error::InvalidParameter {
            name: "centroids",
            reason: "a release needs the level's centroids".into(),
        })?;
        c.check_for(doc, level)?;
        // By the same work wherever the photo lies: the release follows it.
        let x = nearest_centroid_fixed(&c.values, doc.feature_dim, features);
        let set = subset::release(rng, x, level.blocks, plan.size, plan.epsilon)?;
        (
            set,
            Some(Receipt::pure(plan.epsilon, ReleaseKind::BlockSubset)),
        )
    };
    // Fresh uniform order (Fisher–Yates with exact uniform draws).
    for i in (1..fetch.len()).rev() {
        let j = uniform_below(rng, (i + 1) as u128) as usize;
        fetch.swap(i, j);
    }
    Ok(BlockRequest {
        level: plan.level,
        fetch,
        receipt,
    })
}

/// Verify every fetched block against the hash the document lists for it, then return the
/// exact top `k` of their union for the query and the decoded blocks (the hits index them).
/// `fetched` pairs each block id of the request with its bytes.
pub fn verify_and_rank(
    doc: &PartitionDoc,
    level: usize,
    fetched: &[(u32, &[u8])],
    features: &[f32],
    k: usize,
) -> Result<(Vec<Hit>, Vec<Block>)> {
    let l = doc.levels.get(level).ok_or(Error::InvalidParameter {
        name: "level",
        reason: format!("{level} is not in the partition"),
    })?;
    if fetched.len() > limits::MAX_BLOCKS {
        return Err(Error::TooLarge {
            what: "fetched blocks",
            count: fetched.len(),
            limit: limits::MAX_BLOCKS,
        });
    }
    let blocks = fetched
        .iter()
        .map(|&(b, bytes)| {
            let hash = l.hashes.get(b as usize).ok_or(Error::InvalidParameter {
                name: "block",
                reason: format!("{b} is not a block of level {level}"),
            })?;
            let declared = l.bytes.get(b as usize).copied().unwrap_or(0);
            if bytes.len() as u64 != declared {
                return Err(Error::InvalidParameter {
                    name: "block",
                    reason: format!(
                        "block {b} has {} bytes, the partition declares {declared}",
                        bytes.len()
                    ),
                });
            }
            let block = decode(bytes, Some(hash))?;
            if block.dim != doc.feature_dim
                || block.thumb_side != doc.thumb_side
                || l.sizes.get(b as usize) != Some(&(block.len() as u32))
            {
                return Err(Error::InvalidParameter {
                    name: "block",
                    reason: format!("block {b} does not have the shape the partition declares"),
                });
            }
            Ok(block)
        })
        .collect::<Result<Vec<Block>>>()?;
    let hits = rank(features, &blocks, k)?;
    Ok((hits, blocks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use publish::centroids::verify;
    use publish::fixture::small_partition;
    use publish::plan::plan;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn release_fetch_verify_rank() {
        let (doc, files, cents, features) = small_partition();
        let dim = doc.feature_dim;
        let q = &features[5 * dim..6 * dim];
        let whole_bytes = doc.levels[0].transfer_bytes[0] as f64;
        let p = plan(&doc, 6.0, 0.5 * whole_bytes).unwrap();
        assert!(!p.whole && p.size >= 1, "{p:?}");
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        // A release needs the plan's level's centroids: none, or another level's, are refused.
        assert!(release_blocks(&doc, &p, None, q, &mut rng).is_err());
        let other = verify(&doc, 0, &cents[0]).unwrap();
        assert!(release_blocks(&doc, &p, Some(&other), q, &mut rng).is_err());
        let c = verify(&doc, p.level, &cents[p.level]).unwrap();
        let req = release_blocks(&doc, &p, Some(&c), q, &mut rng).unwrap();
        assert_eq!(req.fetch.len(), p.size as usize);
        assert!(req.receipt.is_some());
        let fetched: Vec<(u32, &[u8])> = req
            .fetch
            .iter()
            .map(|&b| (b, files[req.level][b as usize].as_slice()))
            .collect();
        let (hits, _) = verify_and_rank(&doc, req.level, &fetched, q, 8).unwrap();
        assert_eq!(hits.len(), 8);
        // A block swapped for another fails verification.
        let swapped = [(
            req.fetch[0],
            files[req.level][(req.fetch[0] as usize + 1) % p.blocks as usize].as_slice(),
        )];
        assert!(verify_and_rank(&doc, req.level, &swapped, q, 8).is_err());
        // The whole gallery: nothing released, exact answer.
        let whole = plan(&doc, 6.0, 1e12).unwrap();
        assert!(whole.whole);
        let req = release_blocks(&doc, &whole, None, q, &mut rng).unwrap();
        assert!(req.receipt.is_none());
        assert_eq!(req.fetch, vec![0]);
        let (hits, _) = verify_and_rank(
            &doc,
            req.level,
            &[(0, files[req.level][0].as_slice())],
            q,
            1,
        )
        .unwrap();
        assert_eq!(
            hits[0].id, 1005,
            "the query is gallery item 5 and finds itself"
        );
        assert!(release_blocks(&doc, &whole, None, &q[..2], &mut rng).is_err());
    }
}
