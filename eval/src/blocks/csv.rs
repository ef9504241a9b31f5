//! `blocks.csv`: the points, the frame pools, the download-everything rows and the reference
//! curves.

use std::fmt::Write as _;
use std::path::Path;

use super::reference::{reference_lower, reference_pool, EPSILONS, TARGETS};
use super::result::{GalleryResult, Point};

pub(super) fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or(String::new(), |x| format!("{x:.prec$}"))
}

/// One CSV row's writer: method, ε, B, partition, L, pool, fidelity, Recall@8, mAP@8, miss
/// rate, KiB.
pub(super) type RowWriter<'a> = dyn FnMut(
        &str,
        Option<f64>,
        Option<u32>,
        &str,
        Option<u32>,
        f64,
        f64,
        Option<f64>,
        Option<f64>,
        Option<f64>,
        Option<f64>,
    ) + 'a;

/// A block-retrieval point's row with the given fidelity column (measured or predicted) and,
/// with `mc`, its Monte Carlo Recall@8 and mAP@8.
pub(super) fn point_row(
    row: &mut RowWriter<'_>,
    method: &str,
    eps: f64,
    p: &Point,
    fid: f64,
    mc: bool,
) {
    let (recall, map) = if mc {
        let m = p.mc.unwrap_or([f64::NAN; 3]);
        (Some(m[1]), Some(m[2]))
    } else {
        (None, None)
    };
    row(
        method,
        Some(eps),
        Some(p.blocks),
        &p.variant,
        Some(p.size),
        p.pool,
        fid,
        recall,
        map,
        Some(p.miss),
        Some(p.kib),
    );
}

pub(super) fn write_csv(path: &Path, results: &[&GalleryResult]) -> std::io::Result<()> {
    let mut out = String::from(
        "method,epsilon,blocks,partition,released,pool_fraction,fidelity_at_8,recall_at_8,map_at_8,miss_rate,kib_per_search\n",
    );
    let mut row = |method: &str,
                   eps: Option<f64>,
                   blocks: Option<u32>,
                   partition: &str,
                   released: Option<u32>,
                   pool: f64,
                   fid: f64,
                   recall: Option<f64>,
                   map: Option<f64>,
                   miss: Option<f64>,
                   kib: Option<f64>| {
        let _ = writeln!(
            out,
            "{method},{},{},{partition},{},{pool:.6},{fid:.5},{},{},{},{}",
            opt(eps, 0),
            blocks.map_or(String::new(), |b| b.to_string()),
            released.map_or(String::new(), |b| b.to_string()),
            opt(recall, 5),
            opt(map, 5),
            opt(miss, 6),
            opt(kib, 1),
        );
    };
    for r in results {
        let s = &r.suffix;
        for (eps, pts) in &r.pareto {
            for p in pts {
                point_row(&mut row, &format!("blocks{s}"), *eps, p, p.fidelity, true);
            }
            for p in pts {
                point_row(
                    &mut row,
                    &format!("blocks{s}-predicted"),
                    *eps,
                    p,
                    p.predicted,
                    false,
                );
            }
        }
        for (eps, t, p) in &r.least {
            if let Some(p) = p {
                point_row(
                    &mut row,
                    &format!("blocks{s}-least-{t:.2}"),
                    *eps,
                    p,
                    p.fidelity,
                    true,
                );
            }
        }
        for (v, eps, pts) in &r.variant_pareto {
            for p in pts {
                row(
                    &format!("blocks{s}-variant"),
                    Some(*eps),
                    Some(p.blocks),
                    v,
                    Some(p.size),
                    p.pool,
                    p.fidelity,
                    None,
                    None,
                    Some(p.miss),
                    Some(p.kib),
                );
            }
        }
        for f in &r.frame {
            row(
                &format!("frame-pool-{}{s}", f.ranking),
                Some(f.eps),
                None,
                "",
                None,
                f.fraction,
                f.m[0],
                Some(f.m[1]),
                Some(f.m[2]),
                None,
                Some(f.kib),
            );
        }
        let (kib, m) = r.whole;
        row(
            &format!("download-all{s}"),
            None,
            Some(1),
            "whole",
            Some(1),
            1.0,
            m[0],
            Some(m[1]),
            Some(m[2]),
            Some(0.0),
            Some(kib),
        );
    }
    for &eps in &EPSILONS {
        for &t in &TARGETS {
            row(
                "reference",
                Some(eps),
                None,
                "",
                None,
                reference_pool(t, eps),
                t,
                None,
                None,
                Some(1.0 - t),
                None,
            );
            row(
                "reference-lower",
                Some(eps),
                None,
                "",
                None,
                reference_lower(t, eps),
                t,
                None,
                None,
                None,
                None,
            );
        }
    }
    std::fs::write(path, out)
}
