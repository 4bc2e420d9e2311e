//! Scenario edits for tests, made on the parsed scenario rather than on its text: an edit
//! whose key is not in the file panics, so a test cannot go on running a scenario it did not
//! mean to (a text replacement that no longer matches does nothing, silently).
//!
//! The edited scenario is written back as JSON, which is YAML, so the binary reads it as any
//! scenario file (comments are not kept).

use std::path::Path;

use serde_json::Value;

pub struct Scenario {
    doc: Value,
}

impl Scenario {
    /// `scenarios/<name>` of this repository.
    pub fn file(name: &str) -> Self {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios")
            .join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> Self {
        let doc: Value = serde_saphyr::from_str(text).expect("a scenario that parses as YAML");
        Self { doc }
    }

    /// Replace the value at `path` (keys and list indices joined by dots:
    /// `population.stages.0.ramp_to`). Panics when the path is not in the scenario.
    pub fn set(mut self, path: &str, value: impl Into<Value>) -> Self {
        let (parent, last) = self.parent(path);
        let slot = match parent {
            Value::Object(m) => m.get_mut(last),
            Value::Array(a) => last.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        };
        let slot = slot.unwrap_or_else(|| panic!("the scenario has no `{path}` to set"));
        *slot = value.into();
        self
    }

    /// Add `path`, a key the scenario leaves out. Panics when it is already there (then
    /// `set` it) or when its parent is not.
    pub fn add(mut self, path: &str, value: impl Into<Value>) -> Self {
        let (parent, last) = self.parent(path);
        let Value::Object(m) = parent else {
            panic!("`{path}`: its parent is not a mapping");
        };
        assert!(
            m.insert(last.to_string(), value.into()).is_none(),
            "the scenario already has `{path}`: set it"
        );
        self
    }

    /// Replace the item of the list at `path` that equals `old` (a threshold, say). Panics
    /// when no item does.
    pub fn replace_item(mut self, path: &str, old: &str, new: &str) -> Self {
        let list = self
            .get_mut(path)
            .and_then(Value::as_array_mut)
            .unwrap_or_else(|| panic!("the scenario has no list `{path}`"));
        let item = list
            .iter_mut()
            .find(|v| v.as_str() == Some(old))
            .unwrap_or_else(|| panic!("`{path}` has no item `{old}`"));
        *item = Value::from(new);
        self
    }

    /// The value at `path`, for a test's own checks.
    pub fn get(&self, path: &str) -> &Value {
        let mut v = &self.doc;
        for key in path.split('.') {
            v = match v {
                Value::Object(m) => m.get(key),
                Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            }
            .unwrap_or_else(|| panic!("the scenario has no `{path}`"));
        }
        v
    }

    /// The scenario as text the binary reads.
    pub fn text(&self) -> String {
        serde_json::to_string_pretty(&self.doc).expect("a JSON value serialises")
    }

    /// Write the scenario to `path`.
    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.text()).expect("write the scenario");
    }

    fn get_mut(&mut self, path: &str) -> Option<&mut Value> {
        let mut v = &mut self.doc;
        for key in path.split('.') {
            v = match v {
                Value::Object(m) => m.get_mut(key)?,
                Value::Array(a) => a.get_mut(key.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(v)
    }

    fn parent<'a>(&mut self, path: &'a str) -> (&mut Value, &'a str) {
        let (parent, last) = match path.rsplit_once('.') {
            Some((p, l)) => (Some(p), l),
            None => (None, path),
        };
        let v = match parent {
            Some(p) => self
                .get_mut(p)
                .unwrap_or_else(|| panic!("the scenario has no `{p}`")),
            None => &mut self.doc,
        };
        (v, last)
    }
}

/// `text` with `from` replaced by `to`, for tests that edit a scenario's text on purpose
/// (to check the position of a parse error). Panics when `from` is not in `text`.
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "`{from}` is not in the scenario text:\n{text}"
    );
    text.replacen(from, to, 1)
}
