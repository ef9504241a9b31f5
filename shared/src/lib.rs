//! The wire: every public document and REST type the browser client, the CLI and the gallery
//! server exchange, the limits that bound them, their bounded decoding, and the one error type
//! every layer refuses bad input with.
//!
//! It depends on no other crate of this workspace: the layers above (`dp`, `embed`, `paper`,
//! `publish`, `client`, the server) all speak it. See ARCHITECTURE.md.

pub mod api;
pub mod bounded;
pub mod digest;
pub mod error;
pub mod familiarity;
pub mod identity;
pub mod params;
pub mod text;

pub use error::Error;
pub use nalgebra::DMatrix;
pub use params::{Mechanism, Params, PostBandwidth, PrivacyParams, SmlqParams};
