//! Upstream loss from what the server reports it received: the loss a bot can only measure
//! when the protocol carries the server's counts back.
//!
//! A server that puts, in what it sends, the highest input sequence it has received and how
//! many inputs it has received in all (both cumulative) tells the bot its upstream loss: of
//! the inputs up to that sequence, that many arrived. [`ReportedLoss`] turns successive
//! reports into `loss_up` counts. A report older than one already counted (its datagram was
//! reordered or duplicated) moves neither count, so nothing is counted twice; the counts lag
//! by the inputs still in flight, which the next report covers.

use crate::protocol::prelude::Recorder;

/// Follows a server's cumulative input report (see the module docs).
///
/// ```
/// use tickswarm::api::reported::ReportedLoss;
/// use tickswarm::api::Recorder;
/// let (mut loss, mut rec) = (ReportedLoss::new(), Recorder::new());
/// loss.on_report(10, 10, &mut rec); // inputs 1..=10 all arrived
/// loss.on_report(20, 17, &mut rec); // 3 of 11..=20 lost
/// loss.on_report(15, 14, &mut rec); // a late, older report: ignored
/// assert_eq!((rec.loss_up.expected, rec.loss_up.received), (20, 17));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportedLoss {
    highest: u32,
    received: u32,
}

impl ReportedLoss {
    /// No report yet (sequences start at 1).
    pub fn new() -> Self {
        Self::default()
    }

    /// The server reports `highest` (the highest input sequence it received) and `received`
    /// (inputs received in all); counts what is new since the last report into `rec.loss_up`.
    pub fn on_report(&mut self, highest: u32, received: u32, rec: &mut Recorder) {
        if highest >= self.highest && received >= self.received {
            rec.loss_up.add(
                u64::from(highest - self.highest),
                u64::from(received - self.received),
            );
            (self.highest, self.received) = (highest, received);
        }
    }
}
