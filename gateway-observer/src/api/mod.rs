//! The daemon's local JSON API, one module per version: the types of what it serves, which the
//! daemon builds (`collector/snapshot.rs`, `alerts`) and `top` reads (`top/model.rs`). Nothing
//! here reads state or does I/O.

pub mod v1;
