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

/// The eBPF object of the last build of layout 2 (tests/data/README.md).
static LAYOUT2_OBJECT: &[u8] =
    aya::include_bytes_aligned!("../../../../tests/data/lb-ebpf-layout2.o");

/// The maps in which the object of layout `from` and this build's differ, sorted, and
/// those the steps from `from` convert.
fn differing_and_converted(object: &[u8], from: u32) -> (Vec<String>, Vec<&'static str>) {
    let old = Layout::of_object_at(object, from).expect("old object");
    let new = Layout::of_object(crate::EBPF_OBJECT).expect("this build's object");
    let mut differing: Vec<String> = new
        .maps
        .iter()
        .filter(|m| old.map(&m.name) != Some(m))
        .map(|m| m.name.clone())
        .collect();
    differing.extend(
        old.maps
            .iter()
            .filter(|m| new.map(&m.name).is_none())
            .map(|m| m.name.clone()),
    );
    differing.sort_unstable();
    let mut converted: Vec<&str> = plan(from, lb_common::maps::LAYOUT_VERSION)
        .expect("a way")
        .iter()
        .flat_map(|s| s.maps.iter().copied())
        .collect();
    converted.sort_unstable();
    converted.dedup();
    assert_ne!(old.digest, new.digest);
    (differing, converted)
}

/// The layout-1 object and this build's differ exactly in the maps the steps from
/// layout 1 convert: every other map the new program reads as the old build pinned it.
#[test]
fn layout_1_differs_from_this_build_only_in_the_maps_its_steps_convert() {
    let (differing, converted) = differing_and_converted(LAYOUT1_OBJECT, 1);
    assert_eq!(differing, converted);
    // The layout-1 stamp as that build's `lb --version` printed it.
    let old = Layout::of_object_at(LAYOUT1_OBJECT, 1).expect("layout 1 object");
    assert_eq!(old.stamp(), "1-a8ed7f580efe");
}

/// As for layout 1: the layout-2 object (main at b627aeb) and this build's differ
/// exactly in the maps the 2-to-3 step converts.
#[test]
fn layout_2_differs_from_this_build_only_in_the_maps_its_step_converts() {
    let (differing, converted) = differing_and_converted(LAYOUT2_OBJECT, 2);
    assert_eq!(differing, converted);
    let old = Layout::of_object_at(LAYOUT2_OBJECT, 2).expect("layout 2 object");
    assert_eq!(old.stamp(), "1-75d54978ffe3");
}

/// The eBPF object of the last build of layout 3 (tests/data/README.md).
static LAYOUT3_OBJECT: &[u8] =
    aya::include_bytes_aligned!("../../../../tests/data/lb-ebpf-layout3.o");

/// As for layout 1: the layout-3 object (main at 8be2ab5) and this build's differ
/// exactly in the map the 3-to-4 step creates, the two the 4-to-5 step converts and the
/// one the 5-to-6 step creates.
#[test]
fn layout_3_differs_from_this_build_only_in_the_maps_its_steps_convert() {
    let (differing, converted) = differing_and_converted(LAYOUT3_OBJECT, 3);
    assert_eq!(differing, converted);
    assert_eq!(
        converted,
        [
            "BACKEND_STATS",
            "EXCEPTIONS",
            "NEXTHOP_CACHE",
            "TABLES_STD",
            "VIP_CACHE"
        ]
    );
    let old = Layout::of_object_at(LAYOUT3_OBJECT, 3).expect("layout 3 object");
    assert_eq!(old.stamp(), "1-ea05b8e39491");
}

/// The eBPF object of the last build of layout 4 (tests/data/README.md).
static LAYOUT4_OBJECT: &[u8] =
    aya::include_bytes_aligned!("../../../../tests/data/lb-ebpf-layout4.o");

/// As for layout 1: the layout-4 object (main at 5e104f2) and this build's differ
/// exactly in the maps the 4-to-5 step converts (the per-CPU arrays of a backend id's
/// range, now CPU rows) and the one the 5-to-6 step creates.
#[test]
fn layout_4_differs_from_this_build_only_in_the_maps_its_steps_convert() {
    let (differing, converted) = differing_and_converted(LAYOUT4_OBJECT, 4);
    assert_eq!(differing, converted);
    assert_eq!(
        converted,
        ["BACKEND_STATS", "NEXTHOP_CACHE", "TABLES_STD", "VIP_CACHE"]
    );
}

/// The eBPF object of the last build of layout 5 (tests/data/README.md).
static LAYOUT5_OBJECT: &[u8] =
    aya::include_bytes_aligned!("../../../../tests/data/lb-ebpf-layout5.o");

/// As for layout 1: the layout-5 object (main at 3d4fd1b) and this build's differ
/// exactly in the maps the 5-to-6 step creates (the outer map of the standard-size
/// table buffers, the VIP cache); `TABLES` itself is unchanged.
#[test]
fn layout_5_differs_from_this_build_only_in_the_maps_its_step_creates() {
    let (differing, converted) = differing_and_converted(LAYOUT5_OBJECT, 5);
    assert_eq!(differing, converted);
    assert_eq!(converted, ["TABLES_STD", "VIP_CACHE"]);
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
