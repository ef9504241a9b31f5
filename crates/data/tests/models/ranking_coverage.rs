//! The hintless ranking's level (`publish::publish::ranking_spec`) built as the server builds it, on the
//! demo gallery's real features with the committed gallery model, probed with the committed
//! query model's features of held-out images (as a client computes them): the share of a
//! held-out photo's exact top 8 that its own block holds is the ranking's fidelity (it scores
//! that block only), so a change to the level's construction or to either model that lowers it
//! cannot pass silently. Measured on the 1,000 reserved training images `pirbench` searches with.

use data::assets::{MODEL_WEIGHTS, QUERY_WEIGHTS};
use data::fashion::{balanced_anchors, demo_gallery, load_split, reserved_train, DEFAULT_DIR};
use embed::model::{Model, EMBED};
use publish::partition::closure_neighbours;
use publish::partition::{build_level, coverage, nearest_k_many, Level, Overlap};
use publish::publish::{ranking_spec, COVERAGE_K};

fn features(model: &Model, images: &[&[u8]]) -> Vec<f32> {
    model
        .infer_batch(images)
        .unwrap()
        .into_iter()
        .flat_map(|r| r.features)
        .collect()
}

#[test]
fn the_ranking_level_holds_most_of_a_held_out_photos_top_8() {
    let model = Model::from_bytes(MODEL_WEIGHTS).unwrap();
    let query = Model::from_bytes(QUERY_WEIGHTS).unwrap();
    let dir = std::path::Path::new(DEFAULT_DIR);
    let (train, test) = (
        load_split(dir, "train").unwrap(),
        load_split(dir, "t10k").unwrap(),
    );
    let anchors = balanced_anchors(&train, 1_000);
    for n in [1_000usize, 10_000] {
        let gallery = demo_gallery(&test, &train, &anchors, n);
        let x = features(
            &model,
            &gallery
                .iter()
                .map(|g| g.pixels.as_slice())
                .collect::<Vec<_>>(),
        );
        let photos: Vec<&[u8]> = reserved_train(train.labels.len(), &anchors)
            .into_iter()
            .map(|i| train.images.image(i))
            .collect();
        let probes = features(&query, &photos);
        let truth = nearest_k_many(&x, EMBED, &probes, COVERAGE_K);
        let spec = ranking_spec(n).expect("a ranking level");
        let Overlap::Capped { m, rows } = spec.overlap else {
            panic!("{spec:?}");
        };
        let (nb, _) = closure_neighbours(&x, EMBED, m as usize, 1).unwrap();
        let level = build_level(&x, EMBED, spec, 1, Some(&nb)).unwrap();
        assert!(level.members.iter().all(|b| b.len() <= rows as usize));
        let filled = coverage(&level, EMBED, &probes, &truth).own;
        // The same cells without the neighbours the cap lets in.
        let mut cells = vec![Vec::new(); level.members.len()];
        for (i, &h) in level.home.iter().enumerate() {
            cells[h as usize].push(i as u32);
        }
        let bare = coverage(
            &Level {
                members: cells,
                ..level.clone()
            },
            EMBED,
            &probes,
            &truth,
        )
        .own;
        println!(
            "{n} items: {} blocks of ≤ {rows} rows, own-block coverage on {} held-out photos {filled:.4} (cells alone {bare:.4})",
            level.members.len(),
            photos.len()
        );
        assert!(filled >= 0.97, "{n} items: coverage {filled}");
        assert!(filled > bare + 0.1, "{n} items: {filled} against {bare}");
    }
}
