//! What one gallery's run produces: its points (block retrieval at one (level, L, ε)), the
//! frame-release pools and the whole result the CSV, the report and the plot read.

/// One (level, L) at one ε.
#[derive(Debug, Clone)]
pub struct Point {
    pub eps: f64,
    pub level: usize,
    pub variant: String,
    pub blocks: u32,
    pub size: u32,
    pub pool: f64,
    pub fidelity: f64,
    pub miss: f64,
    pub kib: f64,
    pub predicted: f64,
    /// Monte Carlo: [fidelity, Recall@8, mAP@8] of the returned page.
    pub mc: Option<[f64; 3]>,
    /// Quantised check: (top-8 identical share, fidelity with decoded blocks, fast-path
    /// fidelity on the same searches, searches).
    pub quant: Option<(f64, f64, f64, usize)>,
}

/// A frame-release pool row.
#[derive(Debug, Clone)]
pub struct FramePoint {
    pub eps: f64,
    pub ranking: &'static str,
    pub fraction: f64,
    /// [fidelity, Recall@8, mAP@8].
    pub m: [f64; 3],
    pub kib: f64,
}

/// Everything one gallery's run produced.
pub struct GalleryResult {
    pub n: usize,
    pub suffix: String,
    pub eps: Vec<f64>,
    pub variants: Vec<String>,
    /// Overall Pareto points per ε (MC filled).
    pub pareto: Vec<(f64, Vec<Point>)>,
    /// Per variant, per ε: its own Pareto front.
    pub variant_pareto: Vec<(String, f64, Vec<Point>)>,
    /// (ε, target) → least-pool point overall.
    pub least: Vec<(f64, f64, Option<Point>)>,
    /// (variant, ε, target) → least pool of that variant.
    pub variant_least: Vec<(String, f64, f64, Option<Point>)>,
    pub frame: Vec<FramePoint>,
    /// Download everything: (kib, [fidelity, Recall@8, mAP@8] with the quantised ranking).
    pub whole: (f64, [f64; 3]),
    /// (variant, B, own coverage exact on the queries, true block share, anchors' coverage).
    pub own: Vec<(String, u32, f64, f64, f64)>,
    pub mc_searches: usize,
    /// (ε, target) → least pool with the server's current default levels
    /// (`publish::publish::default_specs`), when they were evaluated.
    pub default_least: Vec<(f64, f64, Option<Point>)>,
    /// The current default levels, by name.
    pub default_name: String,
    /// Public anchors that are themselves items of this gallery.
    pub anchors_in_gallery: usize,
}
