//! The committed models: quality floors on a fixed subset (the first 2,000 test images), so a
//! regression cannot pass silently. Full-split figures are in the README.

use data::assets::{MODEL_WEIGHTS, QUERY_WEIGHTS};
use data::fashion::{load_split, DEFAULT_DIR};
use data::quality::{model_quality, query_quality, Quality};
use embed::model::Model;

/// The floors both models meet: accuracy, leave-one-out Recall@1 and Recall@8.
fn meets_floors(what: &str, q: Quality) {
    println!(
        "first 2,000 test images, {what}: accuracy {:.4}, R@1 {:.4}, R@8 {:.4}",
        q.accuracy, q.recall1, q.recall8
    );
    assert!(q.accuracy >= 0.88, "{what}: accuracy {}", q.accuracy);
    assert!(q.recall1 >= 0.85, "{what}: Recall@1 {}", q.recall1);
    assert!(q.recall8 >= 0.96, "{what}: Recall@8 {}", q.recall8);
}

fn test_split() -> data::fashion::Split {
    load_split(std::path::Path::new(DEFAULT_DIR), "t10k").unwrap()
}

#[test]
fn committed_model_meets_quality_floors() {
    let model = Model::from_bytes(MODEL_WEIGHTS).expect("committed weights parse");
    meets_floors("gallery model", model_quality(&model, &test_split(), 2000));
}

/// The query model's features of a dataset image rank the gallery model's features as the
/// gallery model's own do: the query model is trained to land every image where the gallery
/// model puts it, photo or not.
#[test]
fn committed_query_model_meets_the_same_floors_against_the_gallery() {
    let query = Model::from_bytes(QUERY_WEIGHTS).expect("committed query weights parse");
    let gallery = Model::from_bytes(MODEL_WEIGHTS).unwrap();
    meets_floors(
        "query model against the gallery model",
        query_quality(&query, &gallery, &test_split(), 2000),
    );
}

#[test]
fn weights_files_are_small() {
    for w in [MODEL_WEIGHTS, QUERY_WEIGHTS] {
        assert!(w.len() < 2 << 20, "{} bytes", w.len());
    }
}
