//! What a reload changes ([`ConfigDiff`]): the answer of `lb config diff` and, in the
//! same words ([`ConfigDiff::lines`]), what the daemon logs after every reload.

use serde::{Deserialize, Serialize};

/// One setting whose value differs: its key path as in the file (`mtu`,
/// `announce.enabled`, `allowed_sources`), and both values in their text forms
/// (`null`: not set, or the section absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SettingChange {
    /// The key path.
    pub key: String,
    /// The running value.
    pub from: Option<String>,
    /// The value after the reload.
    pub to: Option<String>,
}

impl SettingChange {
    /// The change of `key` from `from` to `to`.
    pub fn new(key: impl Into<String>, from: Option<String>, to: Option<String>) -> Self {
        Self {
            key: key.into(),
            from,
            to,
        }
    }

    fn text(&self) -> String {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".to_owned());
        format!("{} {} -> {}", self.key, show(&self.from), show(&self.to))
    }
}

/// A backend's weight or state change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackendDelta {
    /// The backend's address.
    pub backend: String,
    /// Its weight before (`null` for an added backend).
    pub weight_from: Option<u32>,
    /// Its weight after (`null` for a removed backend).
    pub weight_to: Option<u32>,
    /// Its state before (`active`, `drain`, `down`; `null` for an added backend).
    pub state_from: Option<String>,
    /// Its state after (`null` for a removed backend).
    pub state_to: Option<String>,
}

/// What changes in one VIP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VipDiff {
    /// The VIP (`ADDR:PORT/PROTO`).
    pub vip: String,
    /// `added`, `removed` or `changed`.
    pub change: String,
    /// Backends added (weight and state after).
    pub added: Vec<BackendDelta>,
    /// Backends removed (weight and state before).
    pub removed: Vec<BackendDelta>,
    /// Backends whose weight changes (their state may change too).
    pub reweighted: Vec<BackendDelta>,
    /// Backends whose state alone changes.
    pub state_changed: Vec<BackendDelta>,
    /// The VIP's other settings (`table_size`, `allowed_sources`, `health...`).
    pub settings: Vec<SettingChange>,
    /// Table slots whose backend changes (the Maglev builder's new table against the
    /// running one); `null` when the table is not rebuilt, or for an added VIP.
    pub slots_moved: Option<u64>,
    /// The table size after the change (before, for a removed VIP).
    pub table_size: u32,
}

/// What a reload of a file changes in the running daemon.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConfigDiff {
    /// The file compared.
    pub file: String,
    /// Whether anything changes (also when a reload would be refused).
    pub changed: bool,
    /// Settings that only a restart applies: a reload that changes them is refused and
    /// changes nothing.
    pub restart_needed: Vec<String>,
    /// Global settings that change.
    pub settings: Vec<SettingChange>,
    /// VIPs that change, in VIP order.
    pub vips: Vec<VipDiff>,
    /// Runtime changes the file overrides (they are dropped by the reload).
    pub overrides_dropped: Vec<String>,
}

impl BackendDelta {
    fn weight_text(&self) -> String {
        match (self.weight_from, self.weight_to) {
            (Some(a), Some(b)) if a != b => format!("weight {a} -> {b}"),
            (_, Some(w)) | (Some(w), None) => format!("weight {w}"),
            (None, None) => String::new(),
        }
    }

    fn state_text(&self) -> String {
        match (&self.state_from, &self.state_to) {
            (Some(a), Some(b)) if a != b => format!("{a} -> {b}"),
            (_, Some(s)) | (Some(s), None) => s.clone(),
            (None, None) => String::new(),
        }
    }
}

impl VipDiff {
    /// This VIP's lines (see [`ConfigDiff::lines`]).
    pub fn lines(&self) -> Vec<String> {
        let v = &self.vip;
        let mut out = Vec::new();
        match self.change.as_str() {
            "added" => out.push(format!(
                "VIP {v}: added with {} backends, table {} slots",
                self.added.len(),
                self.table_size
            )),
            "removed" => out.push(format!("VIP {v}: removed")),
            _ => {}
        }
        for s in &self.settings {
            out.push(format!("VIP {v}: {}", s.text()));
        }
        if self.change != "added" {
            for b in &self.added {
                let (w, s) = (b.weight_text(), b.state_text());
                out.push(format!("VIP {v}: backend {} added ({w}, {s})", b.backend));
            }
        }
        if self.change != "removed" {
            for b in &self.removed {
                out.push(format!("VIP {v}: backend {} removed", b.backend));
            }
        }
        for b in &self.reweighted {
            let mut line = format!(
                "VIP {v}: backend {} reweighted {}",
                b.backend,
                b.weight_text()
            );
            if b.state_from != b.state_to {
                line.push_str(&format!(", {}", b.state_text()));
            }
            out.push(line);
        }
        for b in &self.state_changed {
            out.push(format!("VIP {v}: backend {} {}", b.backend, b.state_text()));
        }
        if let Some(moved) = self.slots_moved {
            #[expect(clippy::cast_precision_loss, reason = "a percentage for reading")]
            let pct = 100.0 * moved as f64 / f64::from(self.table_size.max(1));
            out.push(format!(
                "VIP {v}: {moved} of {} slots move to another backend ({pct:.2}%)",
                self.table_size
            ));
        }
        out
    }
}

impl ConfigDiff {
    /// The change in words, one line each: what `lb config diff` prints and what the
    /// daemon logs after a reload. Empty when nothing changes.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.restart_needed.is_empty() {
            out.push(format!(
                "needs a restart (a reload is refused): {}",
                self.restart_needed.join(", ")
            ));
        }
        out.extend(self.settings.iter().map(SettingChange::text));
        out.extend(self.vips.iter().flat_map(VipDiff::lines));
        out.extend(
            self.overrides_dropped
                .iter()
                .map(|o| format!("runtime change dropped: {o}")),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(
        b: &str,
        w: (Option<u32>, Option<u32>),
        s: (Option<&str>, Option<&str>),
    ) -> BackendDelta {
        BackendDelta {
            backend: b.to_owned(),
            weight_from: w.0,
            weight_to: w.1,
            state_from: s.0.map(str::to_owned),
            state_to: s.1.map(str::to_owned),
        }
    }

    #[test]
    fn every_kind_of_change_has_its_words() {
        let diff = ConfigDiff {
            file: "/etc/lb/lb.toml".into(),
            changed: true,
            restart_needed: vec!["interface".into()],
            settings: vec![SettingChange::new(
                "announce.enabled",
                Some("false".into()),
                Some("true".into()),
            )],
            vips: vec![VipDiff {
                vip: "203.0.113.10:80/tcp".into(),
                change: "changed".into(),
                added: vec![delta("10.0.0.3", (None, Some(1)), (None, Some("active")))],
                removed: vec![delta("10.0.0.2", (Some(1), None), (Some("active"), None))],
                reweighted: vec![delta(
                    "10.0.0.1",
                    (Some(1), Some(3)),
                    (Some("active"), Some("active")),
                )],
                state_changed: vec![delta(
                    "10.0.0.4",
                    (Some(1), Some(1)),
                    (Some("active"), Some("drain")),
                )],
                settings: vec![SettingChange::new(
                    "allowed_sources",
                    Some("[]".into()),
                    Some("[\"192.0.2.0/24\"]".into()),
                )],
                slots_moved: Some(655),
                table_size: 65_537,
            }],
            overrides_dropped: vec![],
        };
        let v = "VIP 203.0.113.10:80/tcp";
        assert_eq!(
            diff.lines(),
            [
                "needs a restart (a reload is refused): interface".to_owned(),
                "announce.enabled false -> true".to_owned(),
                format!("{v}: allowed_sources [] -> [\"192.0.2.0/24\"]"),
                format!("{v}: backend 10.0.0.3 added (weight 1, active)"),
                format!("{v}: backend 10.0.0.2 removed"),
                format!("{v}: backend 10.0.0.1 reweighted weight 1 -> 3"),
                format!("{v}: backend 10.0.0.4 active -> drain"),
                format!("{v}: 655 of 65537 slots move to another backend (1.00%)"),
            ]
        );
        assert!(ConfigDiff::default().lines().is_empty());
    }
}
