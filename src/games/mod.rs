//! The games: the five protocols tickswarm ships, each in a folder of its own, written against
//! the public toolkit only (`crate::protocol::prelude`, what `tickswarm::api` re-exports), as
//! a studio's own protocol crate is; `tests/it/layers.rs` checks that no game reaches past it.
//!
//! This file is also the catalogue of protocols a process knows: the built-in ones listed
//! here, then those registered at run time ([`register`], which `tickswarm::main_with` calls
//! for a user's own). Scenario parsing, `serve`, `protocols`, the engine and the report find a
//! protocol by name here and then reach it only through its registry entry
//! ([`ProtocolName`], [`ProtocolSection`]); no other module outside a game's folder names it.

use serde::Deserialize;

use crate::protocol::registry::{AnyProtocol, ProtocolName, ProtocolSection};

#[allow(missing_docs)] // shown for their wire-format documentation; not a stable API
pub mod cafe;
#[allow(missing_docs)] // see above
pub mod city;
#[allow(missing_docs)] // see above
pub mod darkages;
#[allow(missing_docs)] // see above
pub mod rtype;
#[allow(missing_docs)] // see above
pub mod zergcity;

#[cfg(test)]
mod footprint;

#[allow(non_upper_case_globals)] // named as the protocols' marker types are
impl ProtocolName {
    /// The cafe protocol ([`cafe::Cafe`]).
    pub const Cafe: ProtocolName = ProtocolName::new(&cafe::Cafe);
    /// The rtype protocol ([`rtype::Rtype`]).
    pub const Rtype: ProtocolName = ProtocolName::new(&rtype::Rtype);
    /// The city protocol ([`city::City`]).
    pub const City: ProtocolName = ProtocolName::new(&city::City);
    /// The zergcity protocol ([`zergcity::ZergCity`]).
    pub const ZergCity: ProtocolName = ProtocolName::new(&zergcity::ZergCity);
    /// The darkages protocol ([`darkages::DarkAges`]).
    pub const DarkAges: ProtocolName = ProtocolName::new(&darkages::DarkAges);

    /// The built-in protocols, in the order `tickswarm protocols` lists them (registered
    /// ones follow: [`ProtocolName::known`]). Adding a game is its folder plus one line here.
    pub const ALL: &'static [ProtocolName] = &[
        Self::Cafe,
        Self::Rtype,
        Self::City,
        Self::ZergCity,
        Self::DarkAges,
    ];

    /// Every protocol this process knows: the built-in ones, then the registered ones.
    pub fn known() -> Vec<ProtocolName> {
        let extra = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
        Self::ALL.iter().chain(extra.iter()).copied().collect()
    }

    /// The known protocol with this name.
    pub fn find(name: &str) -> Option<ProtocolName> {
        Self::known().into_iter().find(|p| p.as_str() == name)
    }

    /// Every known protocol's name, for help texts and errors.
    pub fn names() -> Vec<&'static str> {
        Self::known().iter().map(|p| p.as_str()).collect()
    }
}

impl std::str::FromStr for ProtocolName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::find(s).ok_or_else(|| {
            format!(
                "unknown protocol `{s}` (one of: {})",
                Self::names().join(", ")
            )
        })
    }
}

/// Protocols registered at run time, after the built-in ones. Read when a scenario or a flag
/// names a protocol (never per packet), written by [`register`].
static REGISTERED: std::sync::RwLock<Vec<ProtocolName>> = std::sync::RwLock::new(Vec::new());

/// Why [`register`] refused a protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// Another protocol (built in or registered) already has this name.
    #[error("a protocol named `{0}` is already known; pick another INFO.name")]
    Duplicate(&'static str),
    /// Names are what scenarios write (`protocol: { mygame: {} }`): lower-case ASCII letters,
    /// digits, `-` and `_`, starting with a letter.
    #[error(
        "protocol name `{0}` must be lower-case letters, digits, - or _, starting with a letter"
    )]
    BadName(&'static str),
}

/// Add a protocol beside the built-in ones for the rest of the process: scenarios may name
/// it, `serve`, `validate` and `protocols` know it. Registering the same marker twice is
/// harmless; two different protocols with one name are refused.
///
/// ```
/// use tickswarm::api::{register, ProtocolName};
/// // The built-in ones need no registration; registering one again is a no-op.
/// let cafe = register(&tickswarm::games::cafe::Cafe).unwrap();
/// assert_eq!(cafe, ProtocolName::Cafe);
/// assert_eq!("cafe".parse::<ProtocolName>(), Ok(cafe));
/// ```
pub fn register(p: &'static dyn AnyProtocol) -> Result<ProtocolName, RegisterError> {
    let name = p.info().name;
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok {
        return Err(RegisterError::BadName(name));
    }
    let handle = ProtocolName::new(p);
    if let Some(known) = ProtocolName::find(name) {
        // The same marker type again (its vtable and data are the same): already there.
        return if known.marker() == p.marker() {
            Ok(known)
        } else {
            Err(RegisterError::Duplicate(name))
        };
    }
    let mut list = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    list.push(handle);
    Ok(handle)
}

impl<'de> Deserialize<'de> for ProtocolSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SectionVisitor)
    }
}

struct SectionVisitor;

impl<'de> serde::de::Visitor<'de> for SectionVisitor {
    type Value = ProtocolSection;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "one key, the protocol's name (one of {})",
            ProtocolName::names().join(", ")
        )
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error as _;
        let Some(key) = map.next_key::<String>()? else {
            return Err(A::Error::custom(
                "the protocol section is empty: name one protocol",
            ));
        };
        let Some(proto) = ProtocolName::find(&key) else {
            // Worded as serde's own, so the scenario's "did you mean" suggestion reads it.
            return Err(A::Error::custom(format!(
                "unknown variant `{key}`, expected one of {}",
                ProtocolName::names().join(", ")
            )));
        };
        let section = map.next_value_seed(SectionSeed(proto))?;
        if let Some(other) = map.next_key::<String>()? {
            return Err(A::Error::custom(format!(
                "one protocol per scenario: `{key}` and `{other}` both given"
            )));
        }
        Ok(section)
    }
}

struct SectionSeed(ProtocolName);

impl<'de> serde::de::DeserializeSeed<'de> for SectionSeed {
    type Value = ProtocolSection;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let mut erased = <dyn erased_serde::Deserializer>::erase(d);
        self.0
            .deserialize_section(&mut erased)
            .map_err(|e| serde::de::Error::custom(without_location(&e.to_string())))
    }
}

/// An error from inside the options comes back through the type-erased deserializer as its
/// text, with the location appended (once per layer it crossed); the deserializer adds the
/// location again when it takes the error back, so every appended one is cut (a scenario
/// error names its line and column once).
fn without_location(mut msg: &str) -> &str {
    while let Some(head) = strip_location(msg) {
        msg = head;
    }
    msg
}

/// `msg` without its trailing " at line N, column M", if it has one.
fn strip_location(msg: &str) -> Option<&str> {
    let (head, tail) = msg.rsplit_once(" at line ")?;
    let is_location = tail.split_once(", column ").is_some_and(|(line, col)| {
        !line.is_empty()
            && !col.is_empty()
            && line.bytes().all(|b| b.is_ascii_digit())
            && col.bytes().all(|b| b.is_ascii_digit())
    });
    is_location.then_some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_options_error_keeps_one_location() {
        let m = "unknown field `dialectt`, expected one of dialect at line 4, column 5 at line 4, column 5";
        assert_eq!(
            without_location(m),
            "unknown field `dialectt`, expected one of dialect"
        );
        assert_eq!(without_location("bad at line x"), "bad at line x");
        assert_eq!(without_location("no location"), "no location");
    }

    #[test]
    fn a_mistake_inside_options_is_reported_once_at_its_line_and_column() {
        let yaml = "cafe:\n  dialectt: spec\n";
        let e = serde_saphyr::from_str::<ProtocolSection>(yaml)
            .unwrap_err()
            .to_string();
        let first = e.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error: line 2 column 3: unknown field `dialectt`"),
            "{e}"
        );
        assert!(!first.contains(" at line "), "{e}");
    }
}
