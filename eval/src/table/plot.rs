//! The evaluation's SVG plots.

use plotters::prelude::*;
use std::path::Path;

use super::report::{mean_std, Row};
use crate::chart::{log_chart, LogChart};

type Res = Result<(), Box<dyn std::error::Error>>;

fn colour(i: usize) -> RGBColor {
    // Methods in the order the table lists them: the chance lines black and greys, then one
    // clearly different colour per method (the frame's variants in blues and teal).
    const C: [RGBColor; 17] = [
        RGBColor(0, 0, 0),
        RGBColor(160, 160, 160),
        RGBColor(100, 100, 100),
        RGBColor(140, 86, 75),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(23, 190, 207),
        RGBColor(148, 103, 189),
        RGBColor(188, 189, 34),
        RGBColor(227, 119, 194),
        RGBColor(255, 127, 14),
        RGBColor(255, 187, 120),
        RGBColor(10, 40, 120),
        RGBColor(0, 150, 136),
        RGBColor(90, 40, 140),
        RGBColor(120, 200, 230),
    ];
    C[i % C.len()]
}

fn metric(r: &Row, j: usize) -> (f64, f64) {
    mean_std(&r.per_seed.iter().map(|t| t[j]).collect::<Vec<_>>())
}

/// Recall@k and mAP against ε (log scale): per method one colour, a thick line for the
/// private variant (mean, ±1 std bars over seeds), a thin one for the same method without
/// noise; the legend in a third panel.
pub fn privacy_utility(path: &Path, rows: &[Row], k: usize) -> Res {
    let eps: Vec<f64> = rows.iter().filter_map(|r| r.epsilon).collect();
    if eps.is_empty() {
        return Ok(());
    }
    let methods: Vec<&str> = rows.iter().fold(Vec::new(), |mut m, r| {
        if !m.contains(&r.method) {
            m.push(r.method);
        }
        m
    });
    let root = SVGBackend::new(path, (1560, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (charts, legend_area) = root.split_horizontally(1200);
    legend(&legend_area, &methods)?;
    let panels = charts.split_evenly((1, 2));
    let names = [(format!("Recall@{k}"), 0usize), ("mAP".to_string(), 1)];
    for (panel, (name, j)) in panels.iter().zip(names) {
        let (mut chart, lo, hi) = log_chart(
            panel,
            format!("{name} vs ε (δ = 1e-5)"),
            &eps,
            "ε",
            &name,
            1.0,
        )?;
        for (i, method) in methods.iter().enumerate() {
            let c = colour(i);
            let mine = || rows.iter().filter(move |r| r.method == *method);
            if let Some(np) = mine().find(|r| r.epsilon.is_none()) {
                let (m, _) = metric(np, j);
                chart.draw_series(LineSeries::new(
                    vec![(lo, m), (hi, m)],
                    c.mix(0.6).stroke_width(1),
                ))?;
            }
            let private: Vec<(f64, f64, f64)> = mine()
                .filter_map(|r| r.epsilon.map(|e| (e, metric(r, j).0, metric(r, j).1)))
                .collect();
            chart.draw_series(LineSeries::new(
                private.iter().map(|&(e, m, _)| (e, m)),
                c.stroke_width(2),
            ))?;
            chart.draw_series(private.iter().map(|&(e, m, s)| {
                PathElement::new(
                    vec![(e, (m - s).max(0.0)), (e, (m + s).min(1.0))],
                    c.stroke_width(1),
                )
            }))?;
            chart.draw_series(
                private
                    .iter()
                    .map(|&(e, m, _)| Circle::new((e, m), 3, c.filled())),
            )?;
        }
    }
    root.present()?;
    Ok(())
}

fn legend(area: &DrawingArea<SVGBackend, plotters::coord::Shift>, methods: &[&str]) -> Res {
    let font = ("sans-serif", 14).into_font();
    let notes = [
        "thick: private (mean ± std over seeds)",
        "thin: the same method without noise",
    ];
    for (i, note) in notes.iter().enumerate() {
        area.draw(&Text::new(*note, (10, 50 + 20 * i as i32), font.clone()))?;
    }
    for (i, m) in methods.iter().enumerate() {
        let y = 100 + 25 * i as i32;
        area.draw(&PathElement::new(
            vec![(10, y), (40, y)],
            colour(i).stroke_width(3),
        ))?;
        area.draw(&Text::new(m.to_string(), (50, y - 8), font.clone()))?;
    }
    Ok(())
}

/// The frame protocol's mAP against its kernel scale and its number of anchors.
pub fn study(path: &Path, study: &[(String, f64, Vec<f64>)]) -> Res {
    let root = SVGBackend::new(path, (1100, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 2));
    for (panel, what) in panels.iter().zip(["kernel scale", "anchors"]) {
        let pts: Vec<&(String, f64, Vec<f64>)> = study
            .iter()
            .filter(|(k, _, _)| k.starts_with(what))
            .collect();
        let xs: Vec<f64> = pts.iter().map(|p| p.1).collect();
        let (mut chart, _, _) = log_chart(
            panel,
            format!("anchor frame: mAP vs {what}"),
            &xs,
            what,
            "mAP",
            1.0,
        )?;
        for (i, series) in ["non-private", "ε = 8"].iter().enumerate() {
            let c = colour(i + 3);
            let line: Vec<(f64, f64)> = pts
                .iter()
                .filter(|(k, _, _)| k.ends_with(series))
                .map(|(_, x, v)| (*x, mean_std(v).0))
                .collect();
            labelled_line(&mut chart, line, c, series.to_string())?;
        }
        series_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    }
    root.present()?;
    Ok(())
}

/// Algorithm 1's study (the paper's Figure 5, plus the number of anchors): Recall@k and mAP
/// against the embedding dimension k, the label weight α, the kernel scale σ (= s) and the
/// anchors, non-private and at ε = 8.
pub fn alg1_study(path: &Path, study: &[(String, f64, Vec<f64>)]) -> Res {
    let root = SVGBackend::new(path, (1300, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 2));
    let names = [
        ("k", "embedding dimension k"),
        ("alpha", "α"),
        ("sigma", "kernel scale σ"),
        ("anchors", "anchors n"),
    ];
    for (panel, (what, desc)) in panels.iter().zip(names) {
        let pts: Vec<&(String, f64, Vec<f64>)> = study
            .iter()
            .filter(|(k, _, _)| k.split('|').next() == Some(what))
            .collect();
        let xs: Vec<f64> = pts.iter().map(|p| p.1).collect();
        let (mut chart, _, _) = log_chart(
            panel,
            format!(
                "Algorithm 1: effect of {desc} ({})",
                xs.iter()
                    .fold(Vec::<f64>::new(), |mut v, &x| {
                        if !v.contains(&x) {
                            v.push(x);
                        }
                        v
                    })
                    .iter()
                    .map(f64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            &xs,
            desc,
            "score",
            1.35,
        )?;
        let series: Vec<String> = pts.iter().fold(Vec::new(), |mut m, (k, _, _)| {
            let s = k.split_once('|').map_or(k.as_str(), |(_, r)| r).to_string();
            if !m.contains(&s) {
                m.push(s);
            }
            m
        });
        for (i, name) in series.iter().enumerate() {
            let c = colour(i + 3);
            let line: Vec<(f64, f64)> = pts
                .iter()
                .filter(|(k, _, _)| k.ends_with(name.as_str()))
                .map(|(_, x, v)| (*x, mean_std(v).0))
                .collect();
            labelled_line(&mut chart, line, c, name.replace('|', ", "))?;
        }
        series_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present()?;
    Ok(())
}

/// A study line with dots, labelled for the legend.
fn labelled_line<'a, 'b: 'a>(
    chart: &mut LogChart<'a, 'b>,
    line: Vec<(f64, f64)>,
    c: RGBColor,
    label: String,
) -> Res {
    chart
        .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    Ok(())
}

fn series_legend<'a, 'b: 'a>(chart: &mut LogChart<'a, 'b>, position: SeriesLabelPosition) -> Res {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
