//! Where a DarkAges bot may be handed over to.
//!
//! A ZONE_HANDOFF names any address, and the bot answers it with CONNECTs (resent): a server
//! that is hostile or broken could aim a whole swarm at a third party. A bot follows a
//! handoff only to an address the scenario allows ([`HandoffPolicy`]): any port on a host of
//! the run's targets (the zones of a cluster listen on consecutive ports of one host, as the
//! embedded servers do), or what the protocol option `handoff_allow` lists. Anything else is
//! refused before a byte is sent (`handoff_refused.not_allowed`) and the bot stays where it
//! is.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// One `handoff_allow` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowRule {
    /// `10.0.0.0/8`, `::1/128`, or a bare address (any port): a network.
    Net(IpAddr, u8),
    /// `10.1.2.3:7000`, `[::1]:7000`: one address.
    Addr(SocketAddr),
}

impl AllowRule {
    /// Parse an entry; the message says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if let Ok(a) = t.parse::<SocketAddr>() {
            return Ok(Self::Addr(a));
        }
        if let Ok(ip) = t.parse::<IpAddr>() {
            return Ok(Self::Net(ip, if ip.is_ipv4() { 32 } else { 128 }));
        }
        let bad = || {
            format!(
                "handoff_allow: `{text}` is neither an address (10.1.2.3, 10.1.2.3:7000) nor a \
                 network (10.0.0.0/8)"
            )
        };
        let (ip, bits) = t.split_once('/').ok_or_else(bad)?;
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let bits: u8 = bits.parse().map_err(|_| bad())?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        if bits > max {
            return Err(format!(
                "handoff_allow: `{text}`: a prefix of at most {max} bits"
            ));
        }
        Ok(Self::Net(ip, bits))
    }

    pub fn matches(&self, to: SocketAddr) -> bool {
        match *self {
            Self::Addr(a) => a == to,
            Self::Net(net, bits) => in_net(net, bits, to.ip()),
        }
    }
}

fn in_net(net: IpAddr, bits: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(n) & mask == u32::from(i) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(n) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

/// The addresses a bot may be handed over to: any port on a target's host, or a rule.
#[derive(Debug, Clone, Default)]
pub struct HandoffPolicy {
    targets: Arc<[SocketAddr]>,
    rules: Vec<AllowRule>,
}

impl HandoffPolicy {
    /// `entries` checked by the options' validation; one that does not parse is skipped.
    pub fn new(targets: Arc<[SocketAddr]>, entries: &[String]) -> Self {
        Self {
            targets,
            rules: entries
                .iter()
                .filter_map(|e| AllowRule::parse(e).ok())
                .collect(),
        }
    }

    /// Whether a handoff to `to` is followed. With no targets known and no rules (a bot
    /// built by hand, outside the engine) every address is.
    pub fn allows(&self, to: SocketAddr) -> bool {
        if self.targets.is_empty() && self.rules.is_empty() {
            return true;
        }
        self.targets.iter().any(|t| t.ip() == to.ip()) || self.rules.iter().any(|r| r.matches(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_are_addresses_hosts_or_networks() {
        assert_eq!(
            AllowRule::parse("10.1.2.3:7000"),
            Ok(AllowRule::Addr(a("10.1.2.3:7000")))
        );
        assert!(AllowRule::parse("127.0.0.0/8")
            .unwrap()
            .matches(a("127.9.9.9:1")));
        assert!(!AllowRule::parse("127.0.0.0/8")
            .unwrap()
            .matches(a("128.0.0.1:1")));
        assert!(AllowRule::parse("10.0.0.7")
            .unwrap()
            .matches(a("10.0.0.7:9")));
        assert!(!AllowRule::parse("10.0.0.7")
            .unwrap()
            .matches(a("10.0.0.8:9")));
        assert!(AllowRule::parse("0.0.0.0/0")
            .unwrap()
            .matches(a("1.2.3.4:5")));
        assert!(AllowRule::parse("fd00::/8")
            .unwrap()
            .matches(a("[fd12::1]:5")));
        assert!(!AllowRule::parse("fd00::/8")
            .unwrap()
            .matches(a("10.0.0.1:5")));
        assert!(AllowRule::parse("10.0.0.0/33").is_err());
        assert!(AllowRule::parse("zone-2.example").is_err());
    }

    #[test]
    fn targets_hosts_and_rules_are_followed_nothing_else() {
        let targets: Arc<[SocketAddr]> = Arc::from(vec![a("127.0.0.1:7777")]);
        let p = HandoffPolicy::new(targets, &["10.1.2.3:7000".into()]);
        assert!(p.allows(a("127.0.0.1:7778")), "a zone beside the target");
        assert!(p.allows(a("10.1.2.3:7000")));
        assert!(!p.allows(a("10.1.2.3:7001")));
        assert!(!p.allows(a("127.0.0.2:7777")), "another host");
        assert!(
            HandoffPolicy::default().allows(a("1.2.3.4:5")),
            "nothing known"
        );
    }
}
