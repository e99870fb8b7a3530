use std::{path::PathBuf, time::Duration};

use super::{Action, MapMigration, Migration, STEPS, plan};
use crate::pinned::{PinError, layout::Layout};

/// The eBPF object of the last build of layout 1 (tests/data/README.md).
static LAYOUT1_OBJECT: &[u8] =
    aya::include_bytes_aligned!("../../../../tests/data/lb-ebpf-layout1.o");

#[test]
fn a_step_leads_from_every_older_layout_to_this_one() {
    let ours = lb_common::maps::LAYOUT_VERSION;
    for from in 1..ours {
        let steps = plan(from, ours).expect("a way");
        let froms: Vec<u32> = steps.iter().map(|s| s.from).collect();
        assert_eq!(froms, (from..ours).collect::<Vec<_>>());
    }
    assert!(plan(ours, ours).expect("nothing to do").is_empty());
    assert_eq!(
        plan(0, ours).err().as_deref(),
        Some(
            format!(
                "map value layout version 0 (this build: {ours}), and this build cannot migrate from layout 0 to 1"
            )
            .as_str()
        )
    );
    let mut froms: Vec<u32> = STEPS.iter().map(|s| s.from).collect();
    froms.dedup();
    assert_eq!(froms.len(), STEPS.len(), "one step per version");
}

/// The layout-1 object and this build's differ exactly in the maps the 1-to-2 step
/// converts: every other map the new program reads as the old build pinned it.
#[test]
fn layout_1_differs_from_this_build_only_in_the_maps_its_step_converts() {
    let old = Layout::of_object_at(LAYOUT1_OBJECT, 1).expect("layout 1 object");
    let new = Layout::of_object(crate::EBPF_OBJECT).expect("this build's object");
    let mut differing: Vec<&str> = new
        .maps
        .iter()
        .filter(|m| old.map(&m.name) != Some(m))
        .map(|m| m.name.as_str())
        .collect();
    differing.extend(
        old.maps
            .iter()
            .filter(|m| new.map(&m.name).is_none())
            .map(|m| m.name.as_str()),
    );
    differing.sort_unstable();
    let step = STEPS.iter().find(|s| s.from == 1).expect("step 1");
    let mut converted = step.maps.to_vec();
    converted.sort_unstable();
    assert_eq!(differing, converted);
    assert_ne!(old.digest, new.digest);
    // The layout-1 stamp as that build's `lb --version` printed it.
    assert_eq!(old.stamp(), "1-a8ed7f580efe");
}

#[test]
fn a_migration_says_what_it_did_with_each_map_and_how_long_it_took() {
    let m = Migration {
        from: 1,
        to: 2,
        maps: vec![
            MapMigration {
                map: "TABLES".into(),
                action: Action::Converted,
                entries: 2,
                detail: Some("table buffers, 130 slots, 2 converted".into()),
            },
            MapMigration {
                map: "CONNTRACK_V4".into(),
                action: Action::Kept,
                entries: 100,
                detail: None,
            },
        ],
        took: Duration::from_micros(12_345),
    };
    assert_eq!(
        m.to_string(),
        "layout 1 to 2 in 12.3 ms: TABLES converted (2 entries, table buffers, 130 slots, 2 converted), CONNTRACK_V4 kept (100 entries)"
    );
}

#[test]
fn a_downgrade_names_both_versions_and_the_remedy() {
    let e = PinError::Newer {
        dir: PathBuf::from("/sys/fs/bpf/lb/netns-1/eth0"),
        interface: "eth0".into(),
        pinned: 3,
        ours: 2,
    };
    let text = e.to_string();
    for part in [
        "map layout version 3, newer than this build's 2",
        "lb run --reset",
        "leaves untouched",
        "lb detach --interface eth0",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}
