//! The readings of ZergCity other than the spec's, one folder each (the spec dialect is the
//! game's own `codec`, `bot` and `server`), and what the real server's two programs share.

pub mod benchmark;
mod enet_closed;
pub mod implementation;
mod lz4_sized;
