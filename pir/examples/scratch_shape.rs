use pir::layout::Shape;
fn main() {
    let items = 1_000_000;
    for r in [
        64usize, 80, 96, 98, 100, 104, 112, 120, 128, 141, 160, 196, 294,
    ] {
        for g in (0..8).map(|b| 1usize << b) {
            let Ok(s) = Shape::new(r, items, r * g) else {
                continue;
            };
            let ps = 8 * (s.query_bytes() + s.answer_bytes());
            println!(
                "R={r} g={g} cols={} q={} a={} search={:.1}KiB hint={:.2}MiB",
                s.cols,
                s.query_bytes(),
                s.answer_bytes(),
                ps as f64 / 1024.0,
                s.hint_bytes() as f64 / 1048576.0
            );
        }
    }
}
