//! The table's results and their writers: the printed table, `results.csv` and the study CSV.

use std::fmt::Write as _;
use std::path::Path;

use paper::metrics::mean;

/// Mean (Recall@k, AP, fidelity) over the queries of one seed.
pub(super) type Triple = [f64; 3];

/// One method at one ε (None: non-private), with its per-seed results.
pub(super) struct Row {
    pub(super) method: &'static str,
    pub(super) epsilon: Option<f64>,
    pub(super) per_seed: Vec<Triple>,
}

pub(super) fn mean_std(v: &[f64]) -> (f64, f64) {
    let m = mean(v);
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
    } else {
        0.0
    };
    (m, var.sqrt())
}

pub(super) fn print_table(rows: &[Row], k: usize) {
    println!(
        "{:<34} {:>6}  {:>15}  {:>15}  {:>15}",
        "method",
        "eps",
        format!("Recall@{k}"),
        "mAP",
        format!("fidelity@{k}")
    );
    for r in rows {
        let eps = r.epsilon.map_or("-".to_string(), |e| e.to_string());
        let mut line = format!("{:<34} {eps:>6}", r.method);
        for j in 0..3 {
            let (m, s) = mean_std(&r.per_seed.iter().map(|t| t[j]).collect::<Vec<_>>());
            let _ = write!(line, "  {m:>7.4} ± {s:.4}");
        }
        println!("{line}");
    }
}

pub(super) fn write_csv(path: &Path, rows: &[Row]) -> std::io::Result<()> {
    let mut out = String::from(
        "method,epsilon,seeds,recall_mean,recall_std,map_mean,map_std,fidelity_mean,fidelity_std\n",
    );
    for r in rows {
        let eps = r.epsilon.map_or(String::new(), |e| e.to_string());
        let _ = write!(out, "{},{eps},{}", r.method, r.per_seed.len());
        for j in 0..3 {
            let (m, s) = mean_std(&r.per_seed.iter().map(|t| t[j]).collect::<Vec<_>>());
            let _ = write!(out, ",{m:.5},{s:.5}");
        }
        out.push('\n');
    }
    std::fs::write(path, out)
}

/// The hyper-parameter study as CSV: `parameter,series,metric,value,seeds,mean,std`.
pub(super) fn write_study_csv(
    path: &Path,
    study: &[(String, f64, Vec<f64>)],
) -> std::io::Result<()> {
    let mut out = String::from("parameter,series,metric,value,seeds,mean,std\n");
    for (key, x, v) in study {
        let (m, sd) = mean_std(v);
        let _ = writeln!(
            out,
            "{},{x},{},{m:.5},{sd:.5}",
            key.replace('|', ","),
            v.len()
        );
    }
    std::fs::write(path, out)
}
