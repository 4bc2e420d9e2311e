//! The numbered codes inside messages: ServerHello results, Disconnect reasons, InputAck
//! results and ErrorMessage codes, with the names they are counted by.

/// ServerHello result codes (§4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloResult {
    Accepted,
    ServerFull,
    VersionMismatch,
    InvalidSessionToken,
    Banned,
    NotAcceptingPlayers,
    Other(u8),
}

impl HelloResult {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Accepted,
            1 => Self::ServerFull,
            2 => Self::VersionMismatch,
            3 => Self::InvalidSessionToken,
            4 => Self::Banned,
            5 => Self::NotAcceptingPlayers,
            v => Self::Other(v),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            Self::Accepted => 0,
            Self::ServerFull => 1,
            Self::VersionMismatch => 2,
            Self::InvalidSessionToken => 3,
            Self::Banned => 4,
            Self::NotAcceptingPlayers => 5,
            Self::Other(v) => v,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::ServerFull => "server_full",
            Self::VersionMismatch => "version_mismatch",
            Self::InvalidSessionToken => "invalid_session_token",
            Self::Banned => "banned",
            Self::NotAcceptingPlayers => "not_accepting_players",
            Self::Other(_) => "other",
        }
    }
}

/// Disconnect reason codes (§4.3).
pub const DISCONNECT_NORMAL: u8 = 0;
pub const DISCONNECT_KICKED: u8 = 1;
pub const DISCONNECT_SHUTDOWN: u8 = 2;
pub const DISCONNECT_TIMEOUT: u8 = 3;
pub const DISCONNECT_PROTOCOL_ERROR: u8 = 4;

pub fn disconnect_reason_name(r: u8) -> &'static str {
    match r {
        DISCONNECT_NORMAL => "normal",
        DISCONNECT_KICKED => "kicked",
        DISCONNECT_SHUTDOWN => "server_shutdown",
        DISCONNECT_TIMEOUT => "timeout",
        DISCONNECT_PROTOCOL_ERROR => "protocol_error",
        _ => "other",
    }
}

/// InputAck result codes (§6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum InputResult {
    Success = 0,
    InvalidPosition = 1,
    InsufficientFunds = 2,
    NotOwner = 3,
    BlockedByTerrain = 4,
    RequirementsNotMet = 5,
    RateLimited = 6,
}

impl InputResult {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Success,
            1 => Self::InvalidPosition,
            2 => Self::InsufficientFunds,
            3 => Self::NotOwner,
            4 => Self::BlockedByTerrain,
            5 => Self::RequirementsNotMet,
            6 => Self::RateLimited,
            _ => return None,
        })
    }

    /// Counter names (`input_result.<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "accepted",
            Self::InvalidPosition => "invalid_position",
            Self::InsufficientFunds => "insufficient_funds",
            Self::NotOwner => "not_owner",
            Self::BlockedByTerrain => "blocked_by_terrain",
            Self::RequirementsNotMet => "requirements_not_met",
            Self::RateLimited => "rate_limited",
        }
    }
}

/// ErrorMessage codes (§12.2).
pub fn error_code_name(code: u32) -> &'static str {
    match code {
        0 => "none",
        1 => "protocol_mismatch",
        2 => "invalid_message",
        3 => "invalid_sequence",
        4 => "rate_limited",
        5 => "server_full",
        6 => "not_authorized",
        7 => "internal_error",
        8 => "timeout",
        _ => "other",
    }
}
pub const ERROR_INVALID_MESSAGE: u32 = 2;
pub const ERROR_SERVER_FULL: u32 = 5;
