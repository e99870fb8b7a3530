//! The shapes of `docs/src/guide/json.md` and a check of a JSON value against one (the
//! language is described in that file): `lb --json` output is tested against the
//! documented schema.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// Every shape of `docs/src/guide/json.md`, by its block's name (`lb status`, `lb trace
/// (each packet)`, ...).
///
/// # Errors
/// When the file cannot be read or a block is not JSON.
pub fn documented() -> anyhow::Result<BTreeMap<String, Value>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/guide/json.md");
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let mut shapes = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("```json-shape ") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let shape = serde_json::from_str(&body.join("\n"))
            .with_context(|| format!("the shape of {name} in docs/src/guide/json.md"))?;
        shapes.insert(name.to_owned(), shape);
    }
    Ok(shapes)
}

/// Checks `value` against `shape`; the error names the path of the first mismatch.
///
/// # Errors
/// The first place where `value` differs from the shape.
pub fn check(shape: &Value, value: &Value) -> anyhow::Result<()> {
    at("$", shape, value)
}

fn at(path: &str, shape: &Value, value: &Value) -> anyhow::Result<()> {
    match shape {
        Value::String(types) => {
            if types.split('|').any(|t| is(t, value)) {
                Ok(())
            } else {
                bail!("{path}: expected {types}, got {value}")
            }
        }
        Value::Array(item) => {
            let (Some(item), Value::Array(values)) = (item.first(), value) else {
                bail!("{path}: expected an array, got {value}");
            };
            for (i, v) in values.iter().enumerate() {
                at(&format!("{path}[{i}]"), item, v)?;
            }
            Ok(())
        }
        Value::Object(keys) => {
            let Value::Object(fields) = value else {
                bail!("{path}: expected an object, got {value}");
            };
            for (key, sub) in keys {
                let (name, optional) = match key.strip_suffix('?') {
                    Some(name) => (name, true),
                    None => (key.as_str(), false),
                };
                match fields.get(name) {
                    None | Some(Value::Null) if optional => {}
                    None => bail!("{path}: missing key {name}"),
                    Some(v) => at(&format!("{path}.{name}"), sub, v)?,
                }
            }
            for name in fields.keys() {
                if !keys.contains_key(name) && !keys.contains_key(&format!("{name}?")) {
                    bail!("{path}: undocumented key {name}");
                }
            }
            Ok(())
        }
        other => bail!("{path}: bad shape {other}"),
    }
}

fn is(ty: &str, v: &Value) -> bool {
    match ty {
        "any" => true,
        "null" => v.is_null(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn shapes_accept_what_they_describe_and_name_the_first_mismatch() {
        let shape = json!({"a": "integer", "b?": {"c": "string|null"}, "d": ["number"]});
        check(&shape, &json!({"a": 1, "d": [1, 2.5]})).unwrap();
        check(&shape, &json!({"a": 1, "b": {"c": null}, "d": []})).unwrap();
        let err = |v| check(&shape, &v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"a": 1.5, "d": []})),
            "$.a: expected integer, got 1.5"
        );
        assert_eq!(err(json!({"d": []})), "$: missing key a");
        assert_eq!(
            err(json!({"a": 1, "d": [], "e": 0})),
            "$: undocumented key e"
        );
        assert_eq!(
            err(json!({"a": 1, "d": ["x"]})),
            "$.d[0]: expected number, got \"x\""
        );
    }
}
