//! Runtime changes (`lb backend add|remove|drain|undrain`) as overrides of the
//! configuration file, and the rule that merges them with the file when it changes.
//!
//! An override belongs to one (VIP, backend) pair and holds two values, each a weight
//! and state or "absent": what runtime changes made of the pair (`runtime`), and what the
//! file said of it when they were made (`file`). Only pairs whose runtime value differs
//! from the file have an override; a runtime change that brings a pair back to the file's
//! value removes its override.
//!
//! The merge rule, applied at start and at every reload: **a runtime change holds until
//! it is undone at runtime or until the file itself changes that same backend; the later
//! change wins.** For each override:
//! - the file still says what it said when the override was made: the override applies
//!   (a drained backend stays drained, an added one stays, a removed one stays removed);
//! - the file now says something else of that backend (removed it, added it, changed its
//!   weight or state), or no longer has the VIP: the file applies, the override is
//!   dropped and the drop is logged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::desired::{BackendSpec, Desired};
use crate::config::Vip;
use lb_maglev::BackendKey;

/// One pair's override.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// The VIP.
    pub vip: Vip,
    /// The backend.
    pub backend: BackendKey,
    /// What runtime changes made of it (`None`: removed).
    pub runtime: Option<BackendSpec>,
    /// What the file said of it when they were made (`None`: not in the file).
    pub file: Option<BackendSpec>,
}

impl Override {
    /// The change in words: `added (weight 2)`, `removed`, `drain`, `weight 3`, ...
    pub fn describe(&self) -> String {
        let spec = |b: &BackendSpec| format!("{} (weight {})", b.state, b.weight);
        match (&self.runtime, &self.file) {
            (Some(r), None) => format!("added, {}", spec(r)),
            (None, Some(_)) => "removed".to_owned(),
            (Some(r), Some(f)) if r.state != f.state && r.weight == f.weight => r.state.to_string(),
            (Some(r), Some(_)) => spec(r),
            (None, None) => "none".to_owned(),
        }
    }

    /// What the file says, in words.
    pub fn describe_file(&self) -> String {
        self.file.map_or_else(
            || "not in the file".to_owned(),
            |f| format!("{} (weight {})", f.state, f.weight),
        )
    }
}

/// Every override, by pair.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    items: BTreeMap<(Vip, BackendKey), Override>,
}

/// The file's value of a pair.
fn file_value(file: &Desired, vip: &Vip, backend: &BackendKey) -> Option<BackendSpec> {
    file.vips
        .get(vip)
        .and_then(|v| v.backends.get(backend))
        .copied()
}

impl Overrides {
    /// The overrides `items` (as stored).
    pub fn from_items(items: impl IntoIterator<Item = Override>) -> Self {
        Self {
            items: items.into_iter().map(|o| ((o.vip, o.backend), o)).collect(),
        }
    }

    /// The overrides, in (VIP, backend) order.
    pub fn items(&self) -> impl Iterator<Item = &Override> {
        self.items.values()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The override of a pair, if any.
    pub fn get(&self, vip: &Vip, backend: &BackendKey) -> Option<&Override> {
        self.items.get(&(*vip, *backend))
    }

    /// The merge rule (module documentation): the desired state of `file` with the
    /// overrides that still hold, the overrides kept, and a line for each one dropped.
    pub fn merge(&self, file: &Desired) -> (Desired, Self, Vec<String>) {
        let mut desired = file.clone();
        let mut kept = Self::default();
        let mut dropped = Vec::new();
        for o in self.items.values() {
            let now = file_value(file, &o.vip, &o.backend);
            let Some(spec) = desired.vips.get_mut(&o.vip) else {
                dropped.push(format!(
                    "VIP {} is no longer in the file: the runtime change of backend {} ({}) is dropped",
                    o.vip,
                    o.backend,
                    o.describe()
                ));
                continue;
            };
            if now != o.file {
                dropped.push(format!(
                    "the file changed backend {} of VIP {} (was {}, now {}): the runtime change ({}) is dropped, the file applies",
                    o.backend,
                    o.vip,
                    o.describe_file(),
                    Override { file: now, ..*o }.describe_file(),
                    o.describe()
                ));
                continue;
            }
            match o.runtime {
                Some(r) => {
                    spec.backends.insert(o.backend, r);
                }
                None => {
                    spec.backends.remove(&o.backend);
                }
            }
            kept.items.insert((o.vip, o.backend), *o);
        }
        (desired, kept, dropped)
    }

    /// Records that runtime changes made `desired` of `backend` in `vip` while the file
    /// says `file`: an override when they differ, none when they agree.
    pub fn record(&mut self, file: &Desired, desired: &Desired, vip: &Vip, backend: &BackendKey) {
        let runtime = file_value(desired, vip, backend);
        let in_file = file_value(file, vip, backend);
        if runtime == in_file {
            self.items.remove(&(*vip, *backend));
        } else {
            self.items.insert(
                (*vip, *backend),
                Override {
                    vip: *vip,
                    backend: *backend,
                    runtime,
                    file: in_file,
                },
            );
        }
    }

    /// Drops every override.
    pub fn clear(&mut self) {
        self.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BackendState, Config};

    fn desired(backends: &[(&str, u32, &str)]) -> Desired {
        let mut text = String::from(
            "interface = \"eth0\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n\
             [[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\n",
        );
        for (addr, weight, state) in backends {
            text.push_str(&format!(
                "[[vip.backend]]\naddress = \"{addr}\"\nweight = {weight}\nstate = \"{state}\"\n"
            ));
        }
        Desired::from_config(&Config::from_toml(&text).unwrap().config, [0; 6])
    }

    fn vip() -> Vip {
        "203.0.113.10:80/tcp".parse().unwrap()
    }

    fn key(last: u8) -> BackendKey {
        format!("198.51.100.{last}").parse().unwrap()
    }

    fn state_of(d: &Desired, k: u8) -> Option<BackendState> {
        d.vips[&vip()].backends.get(&key(k)).map(|b| b.state)
    }

    /// A runtime drain, then the same file again: the drain holds.
    #[test]
    fn a_drain_holds_while_the_file_says_the_same() {
        let file = desired(&[
            ("198.51.100.11", 1, "active"),
            ("198.51.100.12", 1, "active"),
        ]);
        let mut runtime = file.clone();
        runtime
            .set_backend(&vip(), &key(11), BackendState::Drain, None)
            .unwrap();
        let mut o = Overrides::default();
        o.record(&file, &runtime, &vip(), &key(11));
        assert_eq!(o.items().count(), 1);
        assert_eq!(o.items().next().unwrap().describe(), "drain");
        let (merged, kept, dropped) = o.merge(&file);
        assert_eq!(state_of(&merged, 11), Some(BackendState::Drain));
        assert_eq!(kept, o);
        assert!(dropped.is_empty());
        // A change elsewhere in the file keeps it too.
        let other = desired(&[
            ("198.51.100.11", 1, "active"),
            ("198.51.100.12", 5, "active"),
        ]);
        let (merged, kept, _) = o.merge(&other);
        assert_eq!(state_of(&merged, 11), Some(BackendState::Drain));
        assert_eq!(kept.items().count(), 1);
    }

    /// The file removes a backend drained at runtime: it is removed, the override is
    /// dropped and the drop is described.
    #[test]
    fn the_file_removing_a_drained_backend_wins() {
        let file = desired(&[
            ("198.51.100.11", 1, "active"),
            ("198.51.100.12", 1, "active"),
        ]);
        let mut runtime = file.clone();
        runtime
            .set_backend(&vip(), &key(11), BackendState::Drain, None)
            .unwrap();
        let mut o = Overrides::default();
        o.record(&file, &runtime, &vip(), &key(11));
        let edited = desired(&[("198.51.100.12", 1, "active")]);
        let (merged, kept, dropped) = o.merge(&edited);
        assert_eq!(state_of(&merged, 11), None);
        assert!(kept.is_empty());
        assert_eq!(
            dropped,
            [
                "the file changed backend 198.51.100.11 of VIP 203.0.113.10:80/tcp (was active (weight 1), now not in the file): the runtime change (drain) is dropped, the file applies"
            ]
        );
    }

    /// A backend added at runtime that the file then adds itself: the file's value
    /// applies. A backend removed at runtime stays removed while the file keeps it.
    #[test]
    fn adds_and_removes_follow_the_same_rule() {
        let file = desired(&[("198.51.100.11", 1, "active")]);
        let mut runtime = file.clone();
        runtime.add_backend(&vip(), key(13), 2).unwrap();
        runtime.remove_backend(&vip(), &key(11)).unwrap();
        let mut o = Overrides::default();
        o.record(&file, &runtime, &vip(), &key(13));
        o.record(&file, &runtime, &vip(), &key(11));
        let (merged, kept, dropped) = o.merge(&file);
        assert_eq!(merged, runtime);
        assert_eq!(kept.items().count(), 2);
        assert!(dropped.is_empty());
        let edited = desired(&[
            ("198.51.100.11", 1, "active"),
            ("198.51.100.13", 7, "active"),
        ]);
        let (merged, kept, dropped) = o.merge(&edited);
        assert_eq!(
            merged.vips[&vip()].backends[&key(13)].weight,
            7,
            "the file's add"
        );
        assert_eq!(state_of(&merged, 11), None, "the runtime removal holds");
        assert_eq!((kept.items().count(), dropped.len()), (1, 1));
    }

    /// Undoing a runtime change at runtime removes its override.
    #[test]
    fn undoing_a_change_leaves_no_override() {
        let file = desired(&[("198.51.100.11", 1, "active")]);
        let mut runtime = file.clone();
        runtime
            .set_backend(&vip(), &key(11), BackendState::Drain, None)
            .unwrap();
        let mut o = Overrides::default();
        o.record(&file, &runtime, &vip(), &key(11));
        runtime
            .set_backend(&vip(), &key(11), BackendState::Active, None)
            .unwrap();
        o.record(&file, &runtime, &vip(), &key(11));
        assert!(o.is_empty());
    }
}
