//! The `implementation` dialect: what the public server does beyond the spec.

pub mod predict;
