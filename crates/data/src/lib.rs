//! The data the server, the evaluation and the training read: Fashion-MNIST's splits, the
//! demo gallery and the public anchors ([`fashion`]), product photos rendered from its images
//! ([`photos`]), held-out images that are not clothing ([`not_clothing`]) and the familiarity check measured on them ([`familiarity`]), the familiarity detector's fitting family ([`not_garments`]), the committed model weights ([`assets`]), the model's quality check
//! ([`quality`]), and the progress lines long steps print ([`progress`]).

pub mod assets;
pub mod familiarity;
pub mod fashion;
pub mod not_clothing;
pub mod not_garments;
pub mod photos;
pub mod progress;
pub mod quality;
