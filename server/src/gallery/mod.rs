//! The gallery the server holds: the catalogue's store and its packed copy, and the exact
//! index. The dataset, the demo gallery and the model's training are `data` and `train`.

pub mod index;
pub mod packed;
pub mod store;
