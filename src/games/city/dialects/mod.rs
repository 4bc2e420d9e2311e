//! The readings of City other than the spec's, one folder each (the spec dialect is the
//! game's own `codec`, `bot` and `server`).

pub mod implementation;
