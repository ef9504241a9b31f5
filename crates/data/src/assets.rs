//! The committed model weights (`server/assets/`, served by the server from there).

/// The committed weights of the gallery model: the server embeds the gallery and the anchors
/// with them (`train` writes them; see the README).
pub const MODEL_WEIGHTS: &[u8] = include_bytes!("../../../server/assets/model.bin");
/// The committed weights of the query model, the one the page and the CLI run on a photo
/// (served as `web/pkg/query.bin`): the gallery model fine-tuned so that a photo's features
/// land where the gallery model puts its clean image (`train --init --teacher --distill`;
/// docs/model.md, "Training"). The server
/// names their version in its configuration, which clients check before any photo; the
/// familiarity reference is the familiarity model's (`embed::ood::FAMILIARITY_WEIGHTS`).
pub const QUERY_WEIGHTS: &[u8] = include_bytes!("../../../server/assets/query.bin");
/// The class model the page and the CLI show the class with (`embed::classify`); the
/// server only serves it (as `web/pkg/classifier.bin`) and the evaluation measures it.
pub const CLASS_WEIGHTS: &[u8] = include_bytes!("../../../server/assets/classifier.bin");
