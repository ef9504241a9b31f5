//! `docs/eval/blocks.svg`: fidelity@8 of private block retrieval against the expected pool
//! (share of the gallery downloaded) and against KiB per search, per ε, with the frame-release
//! pools, the download-everything point and the reference curve P/(P + e^ε(1 − P)).

use std::path::Path;

use plotters::prelude::*;

use super::reference::reference_pool;
use super::result::GalleryResult;
use super::select::rank_variants;
use crate::chart::log_chart;

type Res = Result<(), Box<dyn std::error::Error>>;

/// One colour per ε (1, 2, 4, 6, 8).
fn eps_colour(eps: f64) -> RGBColor {
    match eps as u32 {
        1 => RGBColor(148, 103, 189),
        2 => RGBColor(31, 119, 180),
        4 => RGBColor(44, 160, 44),
        6 => RGBColor(255, 127, 14),
        _ => RGBColor(214, 39, 40),
    }
}

/// The reference curve's points for P in [0.3, 0.995].
fn reference(eps: f64) -> Vec<(f64, f64)> {
    (0..=139)
        .map(|i| 0.3 + 0.005 * i as f64)
        .map(|p| (reference_pool(p, eps), p))
        .collect()
}

pub fn plot(path: &Path, results: &[&GalleryResult]) -> Res {
    let root = SVGBackend::new(path, (1900, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let (charts, legend_area) = root.split_horizontally(1560);
    let panels: Vec<_> = charts.split_evenly((1, 3));
    // (gallery, x axis: pool or KiB)
    let mut specs: Vec<(&GalleryResult, bool)> = vec![(results[0], false), (results[0], true)];
    if let Some(l) = results.get(1) {
        specs.push((l, false));
    }
    for (panel, (r, kib)) in panels.iter().zip(specs) {
        let best = rank_variants(r)
            .first()
            .map_or(String::new(), |x| x.0.clone());
        let x = |pool: f64, k: f64| if kib { k } else { pool };
        let mut xs: Vec<f64> = Vec::new();
        for (_, pts) in &r.pareto {
            xs.extend(pts.iter().map(|p| x(p.pool, p.kib)));
        }
        xs.extend(r.frame.iter().map(|f| x(f.fraction, f.kib)));
        xs.push(x(1.0, r.whole.0));
        if !kib {
            for &eps in &r.eps {
                xs.extend(reference(eps).iter().map(|p| p.0));
            }
        }
        xs.retain(|v| *v > 0.0 && v.is_finite());
        let (mut chart, _, _) = log_chart(
            panel,
            format!(
                "gallery {}: fidelity@8 vs {}",
                r.n,
                if kib { "KiB per search" } else { "pool" }
            ),
            &xs,
            if kib {
                "expected KiB per search (gzip, thumbnails included)"
            } else {
                "expected pool (share of the gallery downloaded)"
            },
            "fidelity@8",
            1.02,
        )?;
        for &eps in &r.eps {
            let c = eps_colour(eps);
            if !kib {
                chart.draw_series(LineSeries::new(reference(eps), c.mix(0.45).stroke_width(1)))?;
            }
            // The best variant's own Pareto front (line) and the overall front (dots).
            if let Some((_, _, pts)) = r
                .variant_pareto
                .iter()
                .find(|(v, e, _)| *v == best && *e == eps)
            {
                chart.draw_series(LineSeries::new(
                    pts.iter().map(|p| (x(p.pool, p.kib), p.fidelity)),
                    c.stroke_width(2),
                ))?;
            }
            if let Some((_, pts)) = r.pareto.iter().find(|(e, _)| *e == eps) {
                chart.draw_series(
                    pts.iter()
                        .map(|p| Circle::new((x(p.pool, p.kib), p.fidelity), 2, c.filled())),
                )?;
            }
            for f in r.frame.iter().filter(|f| f.eps == eps) {
                let at = (x(f.fraction, f.kib), f.m[0]);
                if f.ranking == "posterior" {
                    chart.draw_series(std::iter::once(TriangleMarker::new(at, 5, c.filled())))?;
                } else {
                    chart.draw_series(std::iter::once(Cross::new(at, 4, c.stroke_width(2))))?;
                }
            }
            // The least pool reaching each target: a ring.
            for (_, _, p) in r.least.iter().filter(|(e, _, _)| *e == eps) {
                if let Some(p) = p {
                    chart.draw_series(std::iter::once(Circle::new(
                        (x(p.pool, p.kib), p.fidelity),
                        6,
                        c.stroke_width(1),
                    )))?;
                }
            }
        }
        let (wkib, wm) = r.whole;
        chart.draw_series(std::iter::once(Circle::new(
            (x(1.0, wkib), wm[0]),
            5,
            BLACK.filled(),
        )))?;
    }
    // Legend.
    let font = ("sans-serif", 14).into_font();
    let best: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "{} ({})",
                rank_variants(r).first().map_or("–", |x| x.0.as_str()),
                r.n
            )
        })
        .collect();
    let best = best.join(", ");
    let notes = [
        "thick line: Pareto front of the best variant".into(),
        format!("  {best}"),
        "dots: Pareto front over all variants".into(),
        "ring: least pool reaching 0.85 / 0.90 / 0.95".into(),
        "thin line: P/(P + e^ε(1 − P)) (reference)".into(),
        "triangle: frame release, posterior pool".into(),
        "cross: frame release, nearest-row pool".into(),
        "black dot: download everything".into(),
    ];
    for (i, note) in notes.iter().enumerate() {
        legend_area.draw(&Text::new(
            note.clone(),
            (10, 40 + 20 * i as i32),
            font.clone(),
        ))?;
    }
    for (i, eps) in [1.0, 2.0, 4.0, 6.0, 8.0].iter().enumerate() {
        let y = 230 + 25 * i as i32;
        legend_area.draw(&PathElement::new(
            vec![(10, y), (40, y)],
            eps_colour(*eps).stroke_width(3),
        ))?;
        legend_area.draw(&Text::new(format!("ε = {eps}"), (50, y - 8), font.clone()))?;
    }
    root.present()?;
    Ok(())
}
