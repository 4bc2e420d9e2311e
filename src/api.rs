//! The public, semver-stable API in one place: everything a protocol implements and uses
//! ([`crate::protocol::prelude`], re-exported whole), a datagram bot's whole lifecycle
//! ([`lifecycle`]), two helpers for protocols with deltas on acknowledged baselines
//! ([`baselines`], [`reported`]), the catalogue's [`register`], and the entry point
//! [`main_with`] that runs the command line with a user's protocols. See the crate docs, "What is stable".
//!
//! ```
//! use tickswarm::api::*;
//! // The built-in protocols are known without registering them.
//! assert!(ProtocolName::known().iter().any(|p| p.as_str() == "cafe"));
//! ```

pub mod baselines;
pub mod lifecycle;
pub mod reported;

pub use crate::cli::main_with;
pub use crate::games::{register, RegisterError};
pub use crate::protocol::prelude::*;
