//! `eval`: PrivateMail (Algorithm 1), the anchor-frame protocol and the paper's baselines on
//! Fashion-MNIST, over several seeds. Prints the table (mean ± std over seeds), writes it as
//! CSV and draws the privacy–utility plot (like the paper's Figure 7) and a hyper-parameter
//! study of the frame protocol, as SVG, into `--out`.
//!
//! Gallery: a random subset of the chosen split (`--split test`, or `--split train` for tuning:
//! training images that are not anchors); anchors: a class-balanced random subset of the
//! training split; queries: gallery images, each retrieved leave-one-out (the paper's
//! protocol). `--seed` makes a run reproducible; production noise always comes from OS entropy.
//! Metrics per query: Recall@k (any of the first k shares the query's class), average
//! precision over the full ranking, and fine-grained fidelity (the share of the query's true k
//! nearest gallery neighbours in feature space that the method returns in its first k).

mod alg1;
mod methods;
mod plot;
mod rankings;
mod report;
mod setting;
mod study;

use std::time::Instant;

use crate::baselines::dsne::{self, DsneParams, Reference};
use crate::baselines::hashing::{randomized_response, Hash};
use crate::baselines::projection::Projection;
use embed::model::Model;
use paper::frame::{privatize_in_frame, AnchorFrame};
use paper::laplacian::normalize_rows;
use paper::retrieve::{
    full_ranking, gallery_rows, posterior_ranking, proportional_ranking, LabelledRows,
};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use shared::PrivacyParams;

use data::assets::MODEL_WEIGHTS;
use data::fashion::load_split;
use data::progress::Progress;

use crate::args::Args;
use crate::rng::query_rng;
use alg1::{alg1_params, Alg1};
use methods::{
    ClassRanker, ALG1, DSNE, EXTENDED, FRAME, FRAME_ONE_PER_CLASS, FRAME_PR, FRAME_PROP, ITQ,
    ITQ_BITS, JL, KNN, LSH, LSH_BITS, PCA, PITQ, PITQ_EPOCHS, PROJECTION_DIM, TSNE,
};
use rankings::{chance_levels, hamming_ranking, one_per_class_first, tsne};
use report::{print_table, write_csv, write_study_csv, Row, Triple};
use setting::{score, setting};
use study::{study_alg1, study_frame, ALG1_STUDY_POINTS};

pub(crate) fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let test = load_split(&args.data_dir, "t10k")?;
    let train = load_split(&args.data_dir, "train")?;
    let model = Model::from_bytes(MODEL_WEIGHTS)?;
    let params = alg1_params(&args);
    let privacy = |eps: f64| PrivacyParams {
        epsilon: eps,
        ..params.privacy
    };
    let nq = args.queries.min(args.gallery);
    println!(
        "split {:?}, gallery {}, anchors {}, queries {nq} (leave-one-out), seeds {}..{}, features: {:?}, k = {}, delta = {}, mechanism = {:?}; Algorithm 1: kernel_scale = {}, alpha = {}, T = {}; frame kernel_scale = {}",
        args.split, args.gallery, args.anchors, args.seed, args.seed + args.seeds - 1, args.features, args.k,
        args.delta, args.mechanism, params.smlq.kernel_scale, params.smlq.alpha, params.smlq.iterations,
        args.frame_kernel_scale
    );

    let mut rows: Vec<Row> = Vec::new();
    let mut push = |method: &'static str, epsilon: Option<f64>, t: Triple| match rows
        .iter_mut()
        .find(|r| r.method == method && r.epsilon == epsilon)
    {
        Some(r) => r.per_seed.push(t),
        None => rows.push(Row {
            method,
            epsilon,
            per_seed: vec![t],
        }),
    };
    let mut study: Vec<(String, f64, Vec<f64>)> = Vec::new();
    let mut alg1_study: Vec<(String, f64, Vec<f64>)> = Vec::new();
    // Progress: one step for each seed's baselines, each ε, each study point (a line each).
    let alg1_study_seeds = if args.no_study || args.skip_algorithm1 {
        0
    } else {
        args.study_seeds.min(args.seeds)
    };
    let frame_study_points = if args.no_study { 0 } else { 10 };
    let steps = args.seeds * (1 + args.epsilons.len() as u64 + frame_study_points)
        + alg1_study_seeds * ALG1_STUDY_POINTS;
    let progress = Progress::new("eval", steps, "steps");
    let step = |msg: String| {
        progress.inc(1);
        progress.println(format!("{msg} ({:.0} s)", t0.elapsed().as_secs_f64()));
    };
    for seed in args.seed..args.seed + args.seeds {
        let s = setting(&args, &model, &test, &train, seed)?;
        let k = args.k;
        let g = s.gallery.nrows();
        let mut rng = ChaCha20Rng::seed_from_u64(seed ^ 0x5eed);

        // Chance levels.
        chance_levels(&s, k, seed, &mut push)?;
        // Non-private references.
        push(
            KNN,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&s.gallery_rows, &s.gallery_rows[q], Some(q)))
            })?,
        );
        let frame = AnchorFrame::class_simplex(
            &s.anchors,
            &s.anchor_labels,
            params.smlq.num_classes,
            args.frame_kernel_scale,
        )?;
        let placed = gallery_rows(&frame.place(&s.gallery)?);
        let placed_flat = placed.concat();
        let labelled = LabelledRows {
            flat: &placed_flat,
            labels: &s.labels,
            num_classes: 10,
        };
        push(
            FRAME,
            None,
            score(&s, k, |q| Ok(full_ranking(&placed, &placed[q], Some(q))))?,
        );
        let jl = Projection::random(s.gallery.ncols(), PROJECTION_DIM, &mut rng)?;
        let jl_rows = gallery_rows(&jl.apply(&s.gallery)?);
        let pca = Projection::pca(&s.anchors, PROJECTION_DIM)?;
        let pca_rows = gallery_rows(&pca.apply(&s.gallery)?);
        let lsh = Hash::lsh(s.gallery.ncols(), LSH_BITS, &mut rng)?;
        let lsh_codes = lsh.codes(&s.gallery)?;
        let itq = Hash::itq(&s.anchors, ITQ_BITS, &mut rng)?;
        let itq_codes = itq.codes(&s.gallery)?;
        push(
            PCA,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&pca_rows, &pca_rows[q], Some(q)))
            })?,
        );
        push(
            JL,
            None,
            score(&s, k, |q| Ok(full_ranking(&jl_rows, &jl_rows[q], Some(q))))?,
        );
        for (name, codes) in [(LSH, &lsh_codes), (ITQ, &itq_codes)] {
            push(
                name,
                None,
                score(&s, k, |q| {
                    Ok(hamming_ranking(
                        codes,
                        &codes[q],
                        q,
                        &mut query_rng(seed, q, 99, 0.0),
                    ))
                })?,
            );
        }

        // t-SNE of the whole gallery (non-private: it reads every feature vector); DP-dSNE's
        // public reference is a t-SNE of the anchors, the gallery is placed against it
        // without noise and each query with noise.
        let anchor_rows = gallery_rows(&normalize_rows(&s.anchors, "anchors")?);
        // The two layouts side by side, each on one thread (see `tsne`).
        let (tsne_rows, anchor_layout) = rayon::join(
            || tsne(&s.gallery_rows, seed ^ 0x7511e),
            || tsne(&anchor_rows, seed ^ 0xa4c),
        );
        let (tsne_rows, anchor_layout) = (tsne_rows?, anchor_layout?);
        push(
            TSNE,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&tsne_rows, &tsne_rows[q], Some(q)))
            })?,
        );
        let reference = Reference::new(
            &s.anchors,
            anchor_layout.iter().map(|r| [r[0], r[1]]).collect(),
        )?;
        let dparams = DsneParams::default();
        let dsne_rows: Vec<Vec<f64>> = (0..g)
            .into_par_iter()
            .map(|i| {
                let x: Vec<f64> = s.gallery.row(i).iter().copied().collect();
                dsne::embed(&x, &reference, &dparams).map(|y| y.to_vec())
            })
            .collect::<Result<_, shared::Error>>()?;
        push(
            DSNE,
            None,
            score(&s, k, |q| {
                Ok(full_ranking(&dsne_rows, &dsne_rows[q], Some(q)))
            })?,
        );

        let alg1 = if args.skip_algorithm1 {
            None
        } else {
            let server = Alg1::new(&s, &params, &mut rng)?;
            push(ALG1, None, server.non_private(&s, k)?);
            Some(server)
        };
        step(format!("seed {seed}: non-private references and baselines"));

        for &eps in &args.epsilons {
            let p = privacy(eps);
            let feats = |q: usize| -> Vec<f64> { s.gallery.row(q).iter().copied().collect() };
            if let Some(server) = &alg1 {
                // Algorithm 1 (one noisy step) and the extended paper's (three noisy steps).
                for (name, steps, id) in [(ALG1, 1usize, 1u64), (EXTENDED, 3, 8)] {
                    push(name, Some(eps), server.private(&s, &p, steps, seed, id, k)?);
                }
            }
            // One frame release per query, ranked two ways.
            let released: Vec<(Vec<f64>, f64)> = (0..s.truth.len())
                .into_par_iter()
                .map(|q| {
                    let mut rng = query_rng(seed, q, 2, eps);
                    let r = privatize_in_frame(&feats(q), &frame, 9, &p, &mut rng)?;
                    let row = r.rows.row(r.real_position()).iter().copied().collect();
                    Ok((row, r.receipt.noise_scale))
                })
                .collect::<Result<_, shared::Error>>()?;
            push(
                FRAME,
                Some(eps),
                score(&s, k, |q| {
                    Ok(full_ranking(&placed, &released[q].0, Some(q)))
                })?,
            );
            // The class-posterior rankings of the same release (post-processing).
            let rankers: [(&'static str, ClassRanker); 3] = [
                (FRAME_PR, |g, row, sigma, _, q| {
                    posterior_ranking(g, row, sigma, usize::MAX, Some(q))
                }),
                (FRAME_ONE_PER_CLASS, |g, row, sigma, k, q| {
                    let full = posterior_ranking(g, row, sigma, usize::MAX, Some(q));
                    one_per_class_first(full, g.labels, k)
                }),
                (FRAME_PROP, |g, row, sigma, k, q| {
                    proportional_ranking(g, row, sigma, k, usize::MAX, Some(q))
                }),
            ];
            for (name, rank) in rankers {
                push(
                    name,
                    Some(eps),
                    score(&s, k, |q| {
                        let (row, sigma) = &released[q];
                        Ok(rank(&labelled, row, *sigma, k, q))
                    })?,
                );
            }
            for (name, proj, prow, id) in [(JL, &jl, &jl_rows, 3u64), (PCA, &pca, &pca_rows, 4)] {
                push(
                    name,
                    Some(eps),
                    score(&s, k, |q| {
                        let mut rng = query_rng(seed, q, id, eps);
                        let (noisy, _) = proj.release(&feats(q), &p, &mut rng)?;
                        let row: Vec<f64> = noisy.matrix().iter().copied().collect();
                        Ok(full_ranking(prow, &row, Some(q)))
                    })?,
                );
            }
            push(
                DSNE,
                Some(eps),
                score(&s, k, |q| {
                    let mut rng = query_rng(seed, q, 10, eps);
                    let (y, _) = dsne::privatize(&feats(q), &reference, &dparams, &p, &mut rng)?;
                    Ok(full_ranking(&dsne_rows, &y, Some(q)))
                })?,
            );
            // PITQ: the rotation learned with flipping inside its rounds (at this ε, as the
            // paper runs it; the anchors it reads are public), the query's code then released
            // by randomized response at the record-level ε.
            let pitq = Hash::pitq(&s.anchors, ITQ_BITS, PITQ_EPOCHS, eps, &mut rng)?;
            let pitq_codes = pitq.codes(&s.gallery)?;
            for (name, codes, id) in [
                (LSH, &lsh_codes, 5u64),
                (ITQ, &itq_codes, 6),
                (PITQ, &pitq_codes, 11),
            ] {
                push(
                    name,
                    Some(eps),
                    score(&s, k, |q| {
                        let mut rng = query_rng(seed, q, id, eps);
                        let noisy = randomized_response(&codes[q], eps, &mut rng)?;
                        Ok(hamming_ranking(codes, &noisy, q, &mut rng))
                    })?,
                );
            }
            step(format!("seed {seed}: ε = {eps}"));
        }

        if !args.no_study && !args.skip_algorithm1 && seed < args.seed + args.study_seeds {
            study_alg1(
                &s,
                params,
                &privacy,
                seed,
                k,
                &mut rng,
                &mut alg1_study,
                &step,
            )?;
        }
        if !args.no_study {
            study_frame(
                &s,
                args.frame_kernel_scale,
                &privacy,
                seed,
                &mut study,
                &step,
            )?;
        }
        progress.println(format!(
            "seed {seed} done after {:.0} s",
            t0.elapsed().as_secs_f64()
        ));
    }
    progress.finish();

    print_table(&rows, args.k);
    std::fs::create_dir_all(&args.out)?;
    write_csv(&args.out.join("results.csv"), &rows)?;
    plot::privacy_utility(&args.out.join("privacy-utility.svg"), &rows, args.k)?;
    if !study.is_empty() {
        plot::study(&args.out.join("frame-study.svg"), &study)?;
    }
    if !alg1_study.is_empty() {
        write_study_csv(&args.out.join("algorithm1-study.csv"), &alg1_study)?;
        plot::alg1_study(&args.out.join("algorithm1-study.svg"), &alg1_study)?;
    }
    println!(
        "wrote {}/results.csv, privacy-utility.svg{}{}; total {:.1} s",
        args.out.display(),
        if study.is_empty() {
            ""
        } else {
            ", frame-study.svg"
        },
        if alg1_study.is_empty() {
            ""
        } else {
            ", algorithm1-study.csv, algorithm1-study.svg"
        },
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
