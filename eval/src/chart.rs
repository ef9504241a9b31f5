//! The log-x chart both evaluations' plots draw on (`table::plot`, `blocks::plot`).

use plotters::prelude::*;

pub(crate) type LogChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<
        plotters::coord::combinators::LogCoord<f64>,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// A chart with a log x axis spanning `xs` (with some margin), y in [0, 1], mesh drawn.
pub(crate) fn log_chart<'a, 'b>(
    panel: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: String,
    xs: &[f64],
    x_desc: &str,
    y_desc: &str,
    y_max: f64,
) -> Result<(LogChart<'a, 'b>, f64, f64), Box<dyn std::error::Error>> {
    let mut lo = xs.iter().copied().fold(f64::INFINITY, f64::min) * 0.8;
    let mut hi = xs.iter().copied().fold(0.0, f64::max) * 1.25;
    // plotters' log axis needs a span of a few factors (one point alone made its mesh
    // generation run away); widen a narrow one around its geometric middle.
    if hi / lo < 4.0 {
        let mid = (lo * hi).sqrt();
        (lo, hi) = (mid / 2.0, mid * 2.0);
    }
    let mut chart = ChartBuilder::on(panel)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{}", (v * 1000.0).round() / 1000.0))
        .draw()?;
    Ok((chart, lo, hi))
}
