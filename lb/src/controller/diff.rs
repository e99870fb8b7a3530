//! Computing what a reload changes ([`ConfigDiff`]): the settings of the running file
//! against the new one's, and, VIP by VIP, the running desired state against the new
//! one (backends added, removed, reweighted, state changed), with the slots that move
//! as the planner's Maglev builds of the new tables say ([`Controller::preview`]).
//!
//! Settings are compared on the validated configurations, not the text: a key written
//! with its default value changes nothing. Nested settings are named by their path
//! (`announce.enabled`), read from the configuration types' `Debug` forms, so a new
//! key of a section is compared without a change here.

use std::{collections::BTreeMap, fmt::Debug};

use super::{
    Controller,
    desired::{Desired, VipSpec},
    report::{ApplyReport, VipChange},
};
use crate::{
    config::{Config, VipConfig},
    control::{BackendDelta, ConfigDiff, SettingChange, VipDiff},
};
use lb_dataplane::Dataplane;

impl<D: Dataplane> Controller<D> {
    /// What applying `desired` would do, without writing anything: the plan's report
    /// (tables rebuilt and the slots that change owner, VIPs removed), health applied
    /// as [`Self::apply`] applies it.
    ///
    /// # Errors
    /// What `apply` would refuse before writing: a table that cannot be built, ids or
    /// table memory exhausted.
    pub fn preview(&self, desired: &Desired) -> Result<ApplyReport, super::ApplyError> {
        let (effective, _) = super::health::effective(desired, &self.unhealthy);
        Ok(super::plan::plan(&self.state, &effective)?.report)
    }
}

/// What a reload from `old` (file) and `running` (desired, runtime changes merged) to
/// `new` and `next` changes; `report` is the [`Controller::preview`] of `next`.
pub fn diff(
    (old, running): (&Config, Option<&Desired>),
    (new, next): (&Config, &Desired),
    report: &ApplyReport,
) -> ConfigDiff {
    let moved: BTreeMap<_, _> = report
        .changes
        .iter()
        .filter_map(|c| match c {
            VipChange::Table(t) => Some((t.vip, t.changed_slots)),
            VipChange::Removed(_) => None,
        })
        .collect();
    let empty = BTreeMap::new();
    let before = running.map_or(&empty, |d| &d.vips);
    let (old_vips, new_vips) = (vip_configs(old), vip_configs(new));
    let mut vips = Vec::new();
    let keys: std::collections::BTreeSet<_> = before.keys().chain(next.vips.keys()).collect();
    for vip in keys {
        let d = vip_diff(
            &vip.to_string(),
            (before.get(vip), old_vips.get(vip).copied()),
            (next.vips.get(vip), new_vips.get(vip).copied()),
            moved.get(vip).copied().flatten(),
        );
        if let Some(d) = d {
            vips.push(d);
        }
    }
    let settings = settings(old, new);
    ConfigDiff {
        changed: !settings.is_empty() || !vips.is_empty(),
        settings,
        vips,
        ..ConfigDiff::default()
    }
}

/// The VIPs of `c` by identity.
fn vip_configs(c: &Config) -> BTreeMap<crate::config::Vip, &VipConfig> {
    c.vips.iter().map(|v| (v.vip, v)).collect()
}

/// The changes of one VIP, `None` when there are none.
fn vip_diff(
    vip: &str,
    (before, old): (Option<&VipSpec>, Option<&VipConfig>),
    (after, new): (Option<&VipSpec>, Option<&VipConfig>),
    moved: Option<usize>,
) -> Option<VipDiff> {
    let delta = |b: String, from: Option<(u32, String)>, to: Option<(u32, String)>| BackendDelta {
        backend: b,
        weight_from: from.as_ref().map(|f| f.0),
        weight_to: to.as_ref().map(|t| t.0),
        state_from: from.map(|f| f.1),
        state_to: to.map(|t| t.1),
    };
    let of = |s: &VipSpec| -> BTreeMap<String, (u32, String)> {
        s.backends
            .iter()
            .map(|(k, b)| (k.to_string(), (b.weight, b.state.to_string())))
            .collect()
    };
    let (b0, b1) = (
        before.map(of).unwrap_or_default(),
        after.map(of).unwrap_or_default(),
    );
    let mut d = VipDiff {
        vip: vip.to_owned(),
        change: match (before, after) {
            (None, _) => "added",
            (_, None) => "removed",
            _ => "changed",
        }
        .to_owned(),
        added: Vec::new(),
        removed: Vec::new(),
        reweighted: Vec::new(),
        state_changed: Vec::new(),
        settings: Vec::new(),
        slots_moved: before.and(moved).map(|m| m as u64),
        table_size: after.or(before).map_or(0, |s| s.table_size),
    };
    for (k, now) in &b1 {
        match b0.get(k) {
            None => d.added.push(delta(k.clone(), None, Some(now.clone()))),
            Some(was) if was.0 != now.0 => {
                d.reweighted
                    .push(delta(k.clone(), Some(was.clone()), Some(now.clone())));
            }
            Some(was) if was.1 != now.1 => {
                d.state_changed
                    .push(delta(k.clone(), Some(was.clone()), Some(now.clone())));
            }
            Some(_) => {}
        }
    }
    for (k, was) in &b0 {
        if !b1.contains_key(k) {
            d.removed.push(delta(k.clone(), Some(was.clone()), None));
        }
    }
    if let (Some(old), Some(new)) = (old, new) {
        d.settings = vip_settings(old, new);
    }
    let nothing = d.change == "changed"
        && d.added.is_empty()
        && d.removed.is_empty()
        && d.reweighted.is_empty()
        && d.state_changed.is_empty()
        && d.settings.is_empty()
        && d.slots_moved.is_none_or(|m| m == 0);
    (!nothing).then_some(d)
}

/// A VIP's own settings that differ.
fn vip_settings(old: &VipConfig, new: &VipConfig) -> Vec<SettingChange> {
    let mut out = Vec::new();
    compare(&mut out, "table_size", &old.table_size, &new.table_size);
    compare(
        &mut out,
        "ipv6_backends",
        &old.ipv6_backends,
        &new.ipv6_backends,
    );
    let sources = |v: &VipConfig| {
        let list: Vec<String> = v
            .allowed_sources
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect();
        format!("[{}]", list.join(", "))
    };
    let (s0, s1) = (sources(old), sources(new));
    if s0 != s1 {
        out.push(SettingChange::new("allowed_sources", Some(s0), Some(s1)));
    }
    compare(&mut out, "health", &old.health, &new.health);
    compare(&mut out, "encap", &old.encap, &new.encap);
    compare(&mut out, "fast_path", &old.fast_path, &new.fast_path);
    compare(
        &mut out,
        "second_chance",
        &old.second_chance,
        &new.second_chance,
    );
    compare(
        &mut out,
        "hash",
        &old.hash.fields.name(),
        &new.hash.fields.name(),
    );
    compare(
        &mut out,
        "hash_source_prefix",
        &old.hash.prefix,
        &new.hash.prefix,
    );
    compare(
        &mut out,
        "persistence_timeout_secs",
        &old.hash.affinity_secs,
        &new.hash.affinity_secs,
    );
    out
}

/// The global settings that a reload applies and that differ (those only a start
/// applies are the service's `restart_needed`).
fn settings(old: &Config, new: &Config) -> Vec<SettingChange> {
    let mut out = Vec::new();
    compare(
        &mut out,
        "detach_on_exit",
        &old.detach_on_exit,
        &new.detach_on_exit,
    );
    compare(&mut out, "reload", &old.reload.name(), &new.reload.name());
    compare(&mut out, "mtu", &old.mtu, &new.mtu);
    compare(&mut out, "maglev_seed", &old.maglev_seed, &new.maglev_seed);
    let mib = |c: &Config| c.max_table_memory >> 20;
    compare(&mut out, "max_table_memory_mib", &mib(old), &mib(new));
    compare(&mut out, "encap.source_v4", &old.source_v4, &new.source_v4);
    compare(&mut out, "encap.source_v6", &old.source_v6, &new.source_v6);
    compare(&mut out, "encap", &old.outer, &new.outer);
    compare(&mut out, "nexthop", &old.nexthop, &new.nexthop);
    compare(
        &mut out,
        "nexthop.cache",
        &old.nexthop_cache,
        &new.nexthop_cache,
    );
    compare(
        &mut out,
        "conntrack.udp_timeout",
        &old.udp_timeout,
        &new.udp_timeout,
    );
    compare(
        &mut out,
        "conntrack.new_pin_rate",
        &old.new_pin_rate,
        &new.new_pin_rate,
    );
    compare(&mut out, "icmp", &old.icmp, &new.icmp);
    compare(&mut out, "announce", &old.announce, &new.announce);
    out
}

/// Adds the leaves of `key` whose values differ between `old` and `new`.
fn compare<T: Debug + PartialEq>(out: &mut Vec<SettingChange>, key: &str, old: &T, new: &T) {
    if old == new {
        return;
    }
    let (a, b) = (
        leaves(key, &format!("{old:?}")),
        leaves(key, &format!("{new:?}")),
    );
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for k in keys {
        let (x, y) = (a.get(k).cloned().flatten(), b.get(k).cloned().flatten());
        if x != y {
            out.push(SettingChange::new(k.clone(), x, y));
        }
    }
}

/// The leaves of a `Debug` form: `Name { a: 1, b: Inner { c: 2 } }` under `key` gives
/// `key.a` = 1 and `key.b.c` = 2; `Some(x)` is `x`, `None` is unset.
fn leaves(key: &str, debug: &str) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    let text = debug.trim();
    if let Some(inner) = text.strip_prefix("Some(").and_then(|t| t.strip_suffix(')')) {
        return leaves(key, inner);
    }
    if text == "None" {
        out.insert(key.to_owned(), None);
        return out;
    }
    let body = text
        .find(" { ")
        .filter(|i| text[..*i].chars().all(|c| c.is_alphanumeric() || c == '_'))
        .and_then(|i| text[i + 3..].strip_suffix(" }"));
    let Some(body) = body else {
        out.insert(key.to_owned(), Some(text.to_owned()));
        return out;
    };
    for field in split_top(body) {
        if let Some((name, value)) = field.split_once(": ") {
            out.extend(leaves(&format!("{key}.{}", name.trim()), value));
        }
    }
    out
}

/// Splits `text` at the commas outside brackets and quotes.
fn split_top(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start, mut quoted, mut escaped) =
        (Vec::new(), 0i32, 0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '{' | '[' | '(' if !quoted => depth += 1,
            '}' | ']' | ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Inner {
        c: u32,
        name: &'static str,
    }

    #[derive(Debug, PartialEq)]
    struct Section {
        enabled: bool,
        table: Option<u32>,
        inner: Inner,
    }

    /// The VIP of a configuration whose `[[vip]]` table has `keys` beside its address
    /// and one backend.
    fn vip_with(keys: &str) -> VipConfig {
        let text = format!(
            "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n[[vip]]\naddress = \"203.0.113.10\"\nport = 80\n\
             protocol = \"tcp\"\n{keys}\n\
             [[vip.backend]]\naddress = \"198.51.100.11\"\n"
        );
        let loaded = Config::from_toml(&text).expect("valid");
        loaded.config.vips[0].clone()
    }

    #[test]
    fn a_vips_hash_fields_fast_path_and_encapsulation_changes_are_named() {
        let old = vip_with("");
        let new = vip_with("hash = \"src\"\nhash_source_prefix = 24\nfast_path = true");
        let keys: Vec<String> = vip_settings(&old, &new)
            .iter()
            .map(|c| format!("{c:?}"))
            .collect();
        let text = keys.join("\n");
        for key in ["\"fast_path\"", "\"hash\"", "\"hash_source_prefix\""] {
            assert!(text.contains(key), "{key} in {text}");
        }
        assert!(text.contains("src") && text.contains("5-tuple"), "{text}");
        assert!(vip_settings(&old, &old).is_empty());
        let sticky = vip_with("hash = \"src\"\npersistence_timeout_secs = 300");
        let plain = vip_with("hash = \"src\"");
        let changes: Vec<String> = vip_settings(&plain, &sticky)
            .iter()
            .map(|c| format!("{c:?}"))
            .collect();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].contains("\"persistence_timeout_secs\"") && changes[0].contains("300"),
            "{changes:?}"
        );
    }

    #[test]
    fn debug_forms_are_compared_leaf_by_leaf() {
        let a = Section {
            enabled: false,
            table: None,
            inner: Inner {
                c: 1,
                name: "a, {b}",
            },
        };
        let b = Section {
            enabled: true,
            table: Some(100),
            inner: Inner {
                c: 1,
                name: "a, {c}",
            },
        };
        let mut out = Vec::new();
        compare(&mut out, "announce", &a, &b);
        assert_eq!(
            out,
            [
                SettingChange::new(
                    "announce.enabled",
                    Some("false".into()),
                    Some("true".into())
                ),
                SettingChange::new(
                    "announce.inner.name",
                    Some("\"a, {b}\"".into()),
                    Some("\"a, {c}\"".into())
                ),
                SettingChange::new("announce.table", None, Some("100".into())),
            ]
        );
        let mut none = Vec::new();
        compare(&mut none, "announce", &a, &a);
        assert!(none.is_empty());
    }
}
