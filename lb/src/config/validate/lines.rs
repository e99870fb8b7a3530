//! The line of a key path (`vip[1].backend[2].weight`) in the parsed document, from
//! the spans the toml crate keeps for every key, table header and array item.
//!
//! A key that is not in the file (a required key left out, a default that conflicts)
//! takes the line of an anchor the error names (the VIP that requires it), else of
//! its nearest enclosing key that is in the file.

use toml::de::{DeTable, DeValue};

/// The parsed document and its text.
pub(super) struct Lines<'a> {
    text: &'a str,
    doc: &'a DeTable<'a>,
}

/// One step of a key path.
enum Step<'p> {
    Key(&'p str),
    Index(usize),
}

impl<'a> Lines<'a> {
    pub(super) fn new(text: &'a str, doc: &'a DeTable<'a>) -> Self {
        Self { text, doc }
    }

    /// The line of `path`; when it is not in the file, of `anchor`, else of the
    /// nearest enclosing key of either that is.
    pub(super) fn line(&self, path: &str, anchor: Option<&str>) -> Option<usize> {
        let (own, exact) = find(self.doc, path);
        let near = anchor.map(|a| find(self.doc, a));
        let offset = match near {
            _ if exact => own,
            Some((Some(offset), true)) => Some(offset),
            Some((near, _)) => own.or(near),
            None => own,
        };
        offset.map(|o| line_of(self.text, o))
    }
}

/// The 1-based line of byte `offset` of `text`.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |t| t.matches('\n').count() + 1)
}

/// The offset of the deepest key of `path` found in `doc`, and whether that is the
/// whole path.
fn find(doc: &DeTable<'_>, path: &str) -> (Option<usize>, bool) {
    let mut deepest = None;
    let mut current: Option<&DeValue<'_>> = None;
    for step in steps(path) {
        let table = match current {
            None => Some(doc),
            Some(DeValue::Table(t)) => Some(t),
            Some(_) => None,
        };
        let next = match (step, table, current) {
            (Step::Key(key), Some(t), _) => t
                .get_key_value(key)
                .map(|(k, v)| (k.span().start, v.get_ref())),
            (Step::Index(i), _, Some(DeValue::Array(a))) => {
                a.get(i).map(|v| (v.span().start, v.get_ref()))
            }
            _ => None,
        };
        let Some((offset, value)) = next else {
            return (deepest, false);
        };
        deepest = Some(offset);
        current = Some(value);
    }
    (deepest, true)
}

/// `vip[1].backend` as `vip`, 1, `backend`; an unreadable index ends the path there.
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut pieces = part.split('[');
        steps.extend(pieces.next().filter(|k| !k.is_empty()).map(Step::Key));
        for index in pieces {
            match index.trim_end_matches(']').parse() {
                Ok(i) => steps.push(Step::Index(i)),
                Err(_) => return steps,
            }
        }
    }
    steps
}

/// The key path of the duplicate key at `span` of `text`: the path of the nearest
/// key of that name up to it in the document the parser recovers (the first
/// definition of a key, the table of a header written twice).
pub(super) fn duplicate_key_path(text: &str, span: std::ops::Range<usize>) -> Option<String> {
    let written = text
        .get(span.clone())?
        .trim_matches(['[', ']', ' ', '"', '\'']);
    let name = written.rsplit('.').next()?.trim_matches(['"', '\'']);
    let (doc, _) = DeTable::parse_recoverable(text);
    let mut best: Option<(usize, String)> = None;
    walk(doc.get_ref(), "", &mut |offset, path, key| {
        if key == name && offset <= span.start && best.as_ref().is_none_or(|b| offset > b.0) {
            best = Some((offset, path.to_owned()));
        }
    });
    best.map(|(_, path)| path)
}

/// Calls `visit(offset, path, key)` for every key of `table` at `prefix`, depth first.
fn walk(table: &DeTable<'_>, prefix: &str, visit: &mut dyn FnMut(usize, &str, &str)) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        visit(key.span().start, &path, key.get_ref());
        walk_value(value.get_ref(), &path, visit);
    }
}

/// [`walk`] below a value: a table's keys, an array's tables.
fn walk_value(value: &DeValue<'_>, path: &str, visit: &mut dyn FnMut(usize, &str, &str)) {
    match value {
        DeValue::Table(t) => walk(t, path, visit),
        DeValue::Array(a) => {
            for (i, item) in a.iter().enumerate() {
                walk_value(item.get_ref(), &format!("{path}[{i}]"), visit);
            }
        }
        _ => {}
    }
}
