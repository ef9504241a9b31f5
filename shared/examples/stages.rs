use std::time::Instant;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use shared::laplacian::{DenseKernel, LabelLaplacian};
use shared::mechanism::release;
use shared::privatemail::{median_sq_distance, privatize, Anchors, initial_embedding};
use shared::smlq::smlq;
use shared::{DMatrix, Params};
fn main() {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let d = 64;
    let feats = DMatrix::from_fn(1000, d, |_, _| rng.random::<f64>());
    let labels: Vec<u32> = (0..1010).map(|i| (i % 10) as u32).collect();
    let query: Vec<f64> = (0..d).map(|_| rng.random::<f64>()).collect();
    let mut params = Params::default();
    params.smlq.iterations = 5;
    let t = Instant::now();
    let anchors = Anchors::new(&feats, &labels[..1000], &params.smlq).unwrap();
    println!("anchors {:?}", t.elapsed());
    let mut best = std::time::Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        privatize(&query, 3, &anchors, &params, &mut rng).unwrap();
        best = best.min(t.elapsed());
    }
    println!("privatize min of 30 {:?}", best);
    let q = initial_embedding(&mut rng, 1010, &params.smlq);
    let t = Instant::now();
    let (noisy, _) = release(&q, 10.0, &params.privacy, &mut rng).unwrap();
    println!("release {:?}", t.elapsed());
    let t = Instant::now();
    let m = median_sq_distance(noisy.matrix());
    println!("median {:?}", t.elapsed());
    let mut best = std::time::Duration::MAX;
    let mut k = DenseKernel::from_points(noisy.matrix(), m);
    for _ in 0..20 {
        let t = Instant::now();
        k = DenseKernel::from_points(noisy.matrix(), m);
        best = best.min(t.elapsed());
    }
    println!("from_points min {:?}", best);
    let mut best = std::time::Duration::MAX;
    for _ in 0..20 {
        let t = Instant::now();
        std::hint::black_box(old_from_points(noisy.matrix(), m));
        best = best.min(t.elapsed());
    }
    println!("old from_points min {:?}", best);
    let mut best = std::time::Duration::MAX;
    let xs: Vec<f64> = (0..510_000).map(|i| -(i as f64) * 1e-5).collect();
    for _ in 0..20 {
        let t = Instant::now();
        let s: f64 = xs.iter().map(|x| x.exp()).sum();
        std::hint::black_box(s);
        best = best.min(t.elapsed());
    }
    println!("510k exp min {:?}", best);
    let ly = LabelLaplacian::new(&labels, 10, 0.3).unwrap();
    let t = Instant::now();
    smlq(&k, &ly, 0.5, q.clone(), 5, true);
    println!("smlq T=5 {:?}", t.elapsed());
}
#[allow(dead_code)]
pub fn old_from_points(z: &DMatrix<f64>, s: f64) -> DMatrix<f64> {
    let n = z.nrows();
    let mut w = DMatrix::<f64>::zeros(n, n);
    let rows: Vec<Vec<f64>> = z.row_iter().map(|r| r.iter().copied().collect()).collect();
    for i in 0..n {
        for j in (i + 1)..n {
            let v = shared::laplacian::kernel_weight(shared::laplacian::dist2(&rows[i], &rows[j]), s);
            w[(i, j)] = v;
            w[(j, i)] = v;
        }
    }
    w
}
