//! `tickswarm protocols`: the protocols this build speaks (the built-in ones and those a
//! user's binary registered), each with its transport, default port, how it measures round
//! trips and loss, and its dialects.

use crate::protocol::ProtocolName;

pub(crate) fn cmd_protocols() {
    for p in ProtocolName::known() {
        let i = p.info();
        out!("{} ({})", i.name, i.spec);
        out!(
            "  transport        {} (default port {})",
            i.transport,
            i.default_port
        );
        out!("  rtt              {}", i.rtt);
        out!("  downstream loss  {}", i.downstream_loss);
        out!("  upstream loss    {}", i.upstream_loss);
        for (d, what) in i.dialects {
            out!("  dialect {d:<8} {what}");
        }
        out!();
    }
}
