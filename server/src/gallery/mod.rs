//! The gallery's data: the dataset loader, the catalogue's store and its packed copy, the
//! exact index, and the on-device model's training and quality check.

pub mod data;
pub mod index;
pub mod packed;
pub mod photos;
pub mod quality;
pub mod store;
pub mod training;
