//! The committed on-device model: quality floors on a fixed subset (the first 2,000 test
//! images), so a regression cannot pass silently. Full-split figures are in the README.

use privatemail_server::gallery::data::{load_split, DEFAULT_DIR};
use privatemail_server::gallery::quality::model_quality;
use privatemail_server::MODEL_WEIGHTS;
use shared::embed::model::Model;

#[test]
fn committed_model_meets_quality_floors() {
    let model = Model::from_bytes(MODEL_WEIGHTS).expect("committed weights parse");
    let test = load_split(std::path::Path::new(DEFAULT_DIR), "t10k").unwrap();
    let q = model_quality(&model, &test, 2000);
    println!(
        "first 2,000 test images: accuracy {:.4}, R@1 {:.4}, R@8 {:.4}",
        q.accuracy, q.recall1, q.recall8
    );
    assert!(q.accuracy >= 0.88, "accuracy {}", q.accuracy);
    assert!(q.recall1 >= 0.85, "Recall@1 {}", q.recall1);
    assert!(q.recall8 >= 0.96, "Recall@8 {}", q.recall8);
}

#[test]
fn weights_file_is_small() {
    assert!(
        MODEL_WEIGHTS.len() < 2 << 20,
        "{} bytes",
        MODEL_WEIGHTS.len()
    );
}
