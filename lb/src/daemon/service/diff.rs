//! `lb config diff` and the reload's log in the service: what a reload of a file would
//! change ([`Service::diff`], planned without writing) and what one did
//! ([`Service::reload`] logs [`ConfigDiff::lines`] of the change it applied). Both
//! compute with [`crate::controller::diff::diff`], so they say it in the same words.

use std::path::Path;

use super::{Service, ServiceError, StartOnly};
use crate::{config::Loaded, control::ConfigDiff, controller::Desired};
use lb_dataplane::Dataplane;

impl<D: Dataplane> Service<D> {
    /// What a reload of `loaded` (read from `file`) would change, nothing written: the
    /// settings, and VIP by VIP the backends and the slots the planner's new tables
    /// move (health applied as a reload would apply it).
    ///
    /// # Errors
    /// A change the controller would refuse before writing (a table that cannot be
    /// built, ids or table memory exhausted).
    pub fn diff(&self, loaded: &Loaded, file: &Path) -> Result<ConfigDiff, ServiceError> {
        let file_desired = Desired::from_config(&loaded.config, self.if_mac);
        let (desired, _, dropped) = self.overrides.merge(&file_desired);
        let report = self.controller.preview(&desired)?;
        let mut diff = crate::controller::diff::diff(
            (&self.file_config, self.controller.applied()),
            (&loaded.config, &desired),
            &report,
        );
        diff.file = file.display().to_string();
        self.finish(&mut diff, loaded, dropped);
        Ok(diff)
    }

    /// Adds what only the service knows: the settings a reload refuses, and the
    /// runtime changes it drops.
    pub(super) fn finish(&self, diff: &mut ConfigDiff, loaded: &Loaded, dropped: Vec<String>) {
        diff.restart_needed = self
            .start_only
            .changed(&StartOnly::of(&loaded.config))
            .into_iter()
            .map(str::to_owned)
            .collect();
        diff.overrides_dropped = dropped;
        diff.changed |= !diff.restart_needed.is_empty() || !diff.overrides_dropped.is_empty();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{
        config::Config,
        controller::Controller,
        daemon::test_fixture::{FILE, start_service},
    };
    use lb_dataplane::FakeDataplane;

    fn service() -> Service<FakeDataplane> {
        let (controller, _) = Controller::adopt(FakeDataplane::new()).unwrap();
        start_service(controller, FILE, None)
    }

    fn diff_of(s: &Service<FakeDataplane>, text: &str) -> ConfigDiff {
        let loaded = Config::from_toml(text).unwrap();
        s.diff(&loaded, Path::new("lb.toml")).unwrap()
    }

    #[test]
    fn the_same_file_changes_nothing() {
        let s = service();
        let d = diff_of(&s, FILE);
        assert!(!d.changed, "{:?}", d.lines());
        assert!(d.lines().is_empty());
    }

    #[test]
    fn backends_sources_announce_and_slots_are_reported() {
        let s = service();
        let text =
            FILE.replace(
                "address = \"198.51.100.12\"",
                "address = \"198.51.100.13\"\nweight = 2",
            )
            .replace(
                "table_size = 1009",
                "table_size = 1009\nallowed_sources = [\"192.0.2.0/24\"]",
            ) + "[announce]\nenabled = true\n";
        let d = diff_of(&s, &text);
        assert!(d.changed);
        let lines = d.lines();
        let v = "VIP 203.0.113.10:80/tcp";
        for want in [
            "announce.enabled false -> true".to_owned(),
            format!("{v}: allowed_sources [] -> [\"192.0.2.0/24\"]"),
            format!("{v}: backend 198.51.100.13 added (weight 2, active)"),
            format!("{v}: backend 198.51.100.12 removed"),
        ] {
            assert!(lines.contains(&want), "{want:?} not in {lines:#?}");
        }
        let moved = d.vips[0].slots_moved.expect("the table is rebuilt");
        // .12's third of the slots goes, .13 takes two thirds: at least a third moves.
        assert!((336..1009).contains(&moved), "{moved}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("{v}: {moved} of 1009 slots move"))),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_reweight_and_a_start_only_setting_are_reported() {
        let s = service();
        let text = FILE
            .replace("interface = \"eth0\"", "interface = \"eth1\"")
            .replace(
                "address = \"198.51.100.11\"",
                "address = \"198.51.100.11\"\nweight = 3",
            );
        let d = diff_of(&s, &text);
        assert_eq!(d.restart_needed, ["interface"]);
        let lines = d.lines();
        assert!(
            lines.contains(
                &"VIP 203.0.113.10:80/tcp: backend 198.51.100.11 reweighted weight 1 -> 3"
                    .to_owned()
            ),
            "{lines:#?}"
        );
    }
}
