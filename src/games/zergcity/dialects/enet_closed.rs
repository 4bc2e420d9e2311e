//! An ENet session the server (or the network) closed under a bot of the real server's
//! dialects (`implementation`, `benchmark`): what it means for the bot and how it is counted,
//! in one place.

use crate::protocol::prelude::{BotPhase, Recorder};

/// The phase a bot in `phase` moves to when its ENet session is closed under it, recorded:
/// before play a connect failure (`transport_closed`), in play a session the server ended
/// (`session_closed_by_server`). `None`: the bot had already ended, nothing changes.
pub fn phase_after_close(phase: BotPhase, rec: &mut Recorder) -> Option<BotPhase> {
    match phase {
        BotPhase::Connecting => {
            rec.connect_failures.add("transport_closed", 1);
            Some(BotPhase::Failed)
        }
        BotPhase::Connected => {
            rec.event("session_closed_by_server");
            Some(BotPhase::Closed)
        }
        _ => None,
    }
}
