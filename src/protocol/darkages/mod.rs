//! DarkAges (`shared/specs/darkages.md`, read with NOTES.md): the wire format first; the bot,
//! the reference server and the registry entry follow.

pub mod codec;
pub mod token;
