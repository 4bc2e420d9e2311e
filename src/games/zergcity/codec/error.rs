//! Why a message could not be read or written.

use super::*;

/// A malformed message: counted as `message.reason`, then dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{message}: {reason}")]
pub struct DecodeError {
    pub message: &'static str,
    pub reason: &'static str,
}

impl DecodeError {
    pub fn new(message: &'static str, reason: &'static str) -> Self {
        Self { message, reason }
    }

    pub(super) fn wire(message: &'static str, e: WireError) -> Self {
        Self::new(message, e.reason())
    }
}

/// Why a message could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("the buffer is too small for the message")]
    BufferTooSmall,
    #[error("a count or text does not fit its field")]
    FieldTooLong,
}

impl From<WireError> for EncodeError {
    fn from(_: WireError) -> Self {
        EncodeError::BufferTooSmall
    }
}
