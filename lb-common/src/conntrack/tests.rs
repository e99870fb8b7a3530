// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the connection-tracking decision: each rule of the module documentation, the
//! RST and UDP variants, the counters, and which lookups a decision makes.

use super::*;
use crate::types::{FAMILY_V4, PROTO_TCP, VipKey};

const SEED: u32 = 0x5eed;
const VIP_ID: u32 = 3;
const EPOCH: u32 = 7;
const NOW: u64 = 50_000_000_000;
/// A UDP idle timeout of 30 s.
const UDP_TIMEOUT: u64 = 30_000_000_000;

/// Backend states and the SYN cache and table as the decision sees them, counting reads.
struct State {
    /// Backend ids that may keep flows (active or draining).
    keeping: [u32; 2],
    /// The flow's SYN cache slot.
    slot: Option<SynEntry>,
    /// The backend of the flow's slot in the VIP's live table.
    table: Option<u32>,
    clock_reads: u32,
    backend_reads: u32,
    slot_reads: u32,
    table_reads: u32,
}

impl PinLookups for State {
    type Backend = u32;

    fn now_ns(&mut self) -> u64 {
        self.clock_reads += 1;
        NOW
    }

    fn keeps_flows(&mut self, id: u32) -> Option<u32> {
        self.backend_reads += 1;
        (id != 0 && self.keeping.contains(&id)).then_some(id)
    }
}

impl Lookups for State {
    type Slot = SynEntry;

    fn syn_slot(&mut self, _hash: u32) -> Option<SynEntry> {
        self.slot_reads += 1;
        self.slot
    }

    fn table_slot(&mut self, _hash: u32) -> Option<u32> {
        self.table_reads += 1;
        self.table
    }
}

fn key(proto: u8) -> FlowKey {
    FlowKey {
        vip: VipKey {
            addr: [203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port: 80u16.to_be(),
            proto,
            family: FAMILY_V4,
        },
        src: [192, 0, 2, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        sport: 40_000u16.to_be(),
        _pad: [0; 2],
    }
}

fn vip() -> VipEntry {
    VipEntry {
        vip_id: VIP_ID,
        flags: 0,
        epoch: EPOCH,
    }
}

fn cfg() -> LbConfig {
    LbConfig {
        hash_seed: SEED,
        udp_timeout_ns: UDP_TIMEOUT,
        ..LbConfig::default()
    }
}

/// A pin of the test VIP on `backend_id`, made at `stamp_ns` from the table of `epoch`
/// for the connection with ISN `isn`.
fn pin(backend_id: u32, stamp_ns: u64, epoch: u32, isn: u32) -> CtEntry {
    CtEntry {
        backend_id,
        vip_id: VIP_ID,
        stamp_ns,
        epoch,
        isn,
        seen_ticks: ct_ticks(stamp_ns),
        ..CtEntry::default()
    }
}

/// A whole SYN of the TCP test flow to the test VIP, sent to `backend_id` at `syn_ns`
/// with sequence number `seq`, picked from the table of `epoch`.
fn syn(backend_id: u16, syn_ns: u64, seq: u32, epoch: u32) -> SynEntry {
    let key = key(PROTO_TCP);
    let hash = flow_hash(&key, SEED);
    #[expect(clippy::cast_possible_truncation, reason = "the test VIP id is small")]
    let vip_id = VIP_ID as u16;
    SynEntry {
        key,
        backend_id,
        vip_id,
        epoch,
        tag: SynEntry::tag_of(hash, backend_id, vip_id, epoch, syn_ns, seq),
        seq,
        syn_ns,
    }
}

fn lookups(keeping: [u32; 2], slot: Option<SynEntry>, table: Option<u32>) -> State {
    State {
        keeping,
        slot,
        table,
        clock_reads: 0,
        backend_reads: 0,
        slot_reads: 0,
        table_reads: 0,
    }
}

/// The pin a decision asks to write for the test VIP at `NOW`.
fn record(replace: bool, epoch: u32, isn: u32) -> Record {
    Record {
        replace,
        vip_id: VIP_ID,
        stamp_ns: NOW,
        epoch,
        isn,
    }
}

fn run(
    state: &mut State,
    proto: u8,
    rst: bool,
    entry: Option<&CtEntry>,
) -> (Decision<u32, SynEntry>, VipStats) {
    let mut stats = VipStats::default();
    let decision = decide(state, &key(proto), rst, &vip(), entry, &cfg(), &mut stats);
    (decision, stats)
}

fn hash(proto: u8) -> u32 {
    flow_hash(&key(proto), SEED)
}

#[test]
fn a_tcp_pin_from_the_current_table_decides_without_reading_the_syn_cache() {
    let mut state = lookups([2, 0], Some(syn(3, NOW, 99, EPOCH)), None);
    let entry = pin(2, NOW - 5, EPOCH, 11);
    let (decision, stats) = run(&mut state, PROTO_TCP, false, Some(&entry));
    assert_eq!(
        decision,
        Decision::Pin {
            backend: 2,
            touch: Touch::Nothing
        }
    );
    assert_eq!(stats.ct_hits, 1);
    assert_eq!(
        (state.slot_reads, state.table_reads, state.clock_reads),
        (0, 0, 0)
    );
}

#[test]
fn after_a_table_change_a_held_syn_of_a_new_connection_replaces_the_pin() {
    let held = syn(3, NOW - 10, 99, EPOCH);
    let mut state = lookups([2, 3], Some(held), None);
    let entry = pin(2, NOW - 20, EPOCH - 1, 11);
    let (decision, stats) = run(&mut state, PROTO_TCP, false, Some(&entry));
    assert_eq!(
        decision,
        Decision::HeldSyn {
            backend: 3,
            slot: held,
            record: Some(record(true, EPOCH, 99)),
        }
    );
    assert_eq!(stats.ct_hits, 1);
    assert_eq!(state.table_reads, 0);
    let Decision::HeldSyn {
        record: Some(record),
        ..
    } = decision
    else {
        unreachable!()
    };
    assert_eq!(record.entry(3), pin(3, NOW, EPOCH, 99));
}

/// The client closed the connection of a pin from the current table (a FIN or a RST):
/// the pin still decides (the connection's last ACKs follow it), but the SYN cache is
/// consulted, and a new connection on the 4-tuple replaces it with an open pin, which
/// the live connection counts see.
#[test]
fn a_closing_pin_from_the_current_table_is_replaced_by_a_new_connection() {
    for closing in [crate::types::CT_FIN, crate::types::CT_RST] {
        let entry = CtEntry {
            closing,
            ..pin(2, NOW - 20, EPOCH, 11)
        };
        let mut state = lookups([2, 0], None, Some(2));
        let (decision, _) = run(&mut state, PROTO_TCP, false, Some(&entry));
        assert!(
            matches!(decision, Decision::Pin { backend: 2, .. }),
            "{decision:?}"
        );
        assert_eq!(state.slot_reads, 1, "the SYN cache is consulted");
        let held = syn(3, NOW - 10, 99, EPOCH);
        let mut state = lookups([2, 3], Some(held), None);
        let (decision, _) = run(&mut state, PROTO_TCP, false, Some(&entry));
        let Decision::HeldSyn {
            backend: 3,
            record: Some(record),
            ..
        } = decision
        else {
            panic!("{decision:?}")
        };
        assert_eq!(record.entry(3).closing, CT_OPEN);
    }
}

#[test]
fn after_a_table_change_a_held_syn_that_is_no_new_connection_leaves_the_pin_deciding() {
    let entry = pin(2, NOW - 20, EPOCH - 1, 11);
    for (case, keeping, held) in [
        // The connection's own SYN retransmitted: the pin's ISN.
        ("late duplicate", [2, 3], syn(3, NOW - 10, 11, EPOCH)),
        // Seen before the pin was made.
        ("older SYN", [2, 3], syn(3, NOW - 30, 99, EPOCH)),
        // A new connection, but its backend went away.
        ("backend gone", [2, 0], syn(3, NOW - 10, 99, EPOCH)),
    ] {
        let mut state = lookups(keeping, Some(held), Some(3));
        let (decision, _) = run(&mut state, PROTO_TCP, false, Some(&entry));
        assert_eq!(
            decision,
            Decision::Pin {
                backend: 2,
                touch: Touch::Nothing
            },
            "{case}"
        );
    }
}

#[test]
fn a_pin_from_an_older_table_is_relabelled_only_when_the_current_table_agrees() {
    let entry = pin(2, NOW - 20, EPOCH - 1, 11);
    let mut agrees = lookups([2, 0], None, Some(2));
    assert_eq!(
        run(&mut agrees, PROTO_TCP, false, Some(&entry)).0,
        Decision::Pin {
            backend: 2,
            touch: Touch::Relabel(EPOCH)
        }
    );
    let mut moved = lookups([2, 0], None, Some(3));
    assert_eq!(
        run(&mut moved, PROTO_TCP, false, Some(&entry)).0,
        Decision::Pin {
            backend: 2,
            touch: Touch::Nothing
        }
    );
    let mut relabelled = entry;
    Touch::Relabel(EPOCH).apply(&mut relabelled);
    assert_eq!(relabelled, pin(2, NOW - 20, EPOCH, 11));
}

#[test]
fn without_a_pin_the_held_syn_decides_and_is_promoted() {
    let held = syn(3, NOW - 10, 99, EPOCH);
    let mut state = lookups([3, 0], Some(held), None);
    let (decision, stats) = run(&mut state, PROTO_TCP, false, None);
    assert_eq!(
        decision,
        Decision::HeldSyn {
            backend: 3,
            slot: held,
            record: Some(record(false, EPOCH, 99)),
        }
    );
    assert_eq!((stats.ct_hits, stats.ct_misses_non_syn), (1, 0));
}

#[test]
fn a_stale_pin_gives_way_to_the_held_syn_which_overwrites_it() {
    // The pin's backend is down; the handshake's SYN went to backend 3.
    let mut state = lookups([3, 0], Some(syn(3, NOW - 10, 99, EPOCH)), None);
    let entry = pin(2, NOW - 20, EPOCH, 11);
    let (decision, stats) = run(&mut state, PROTO_TCP, false, Some(&entry));
    let Decision::HeldSyn {
        backend: 3,
        record: Some(record),
        ..
    } = decision
    else {
        panic!("{decision:?}")
    };
    assert!(record.replace);
    assert_eq!((stats.ct_stale_repicked, stats.ct_hits), (1, 1));
}

#[test]
fn a_slot_of_another_vip_or_torn_by_two_writers_is_no_held_syn() {
    let mut other_vip = syn(3, NOW - 10, 99, EPOCH);
    other_vip.vip_id += 1;
    let mut torn = syn(3, NOW - 10, 99, EPOCH);
    torn.backend_id = 2;
    for slot in [other_vip, torn] {
        let mut state = lookups([2, 3], Some(slot), None);
        let (decision, stats) = run(&mut state, PROTO_TCP, false, None);
        assert!(
            matches!(
                decision,
                Decision::Table {
                    stale_slot: None,
                    ..
                }
            ),
            "{decision:?}"
        );
        assert_eq!(stats.ct_misses_non_syn, 1);
    }
}

#[test]
fn a_held_syn_whose_backend_went_away_is_freed_and_the_table_decides() {
    let held = syn(3, NOW - 10, 99, EPOCH);
    let mut state = lookups([2, 0], Some(held), None);
    let (decision, stats) = run(&mut state, PROTO_TCP, false, None);
    assert_eq!(
        decision,
        Decision::Table {
            hash: hash(PROTO_TCP),
            record: Some(record(false, EPOCH, 0)),
            stale_slot: Some(held),
        }
    );
    // Not a miss: the flow's SYN was seen.
    assert_eq!((stats.ct_hits, stats.ct_misses_non_syn), (0, 0));
}

#[test]
fn mid_flow_tcp_without_any_state_is_a_miss_pinned_from_the_table() {
    let mut state = lookups([0, 0], None, None);
    let (decision, stats) = run(&mut state, PROTO_TCP, false, None);
    assert_eq!(
        decision,
        Decision::Table {
            hash: hash(PROTO_TCP),
            record: Some(record(false, EPOCH, 0)),
            stale_slot: None,
        }
    );
    assert_eq!(stats.ct_misses_non_syn, 1);
}

#[test]
fn a_rst_is_forwarded_by_the_same_rule_but_records_nothing() {
    // Without state: the table, nothing pinned.
    let mut state = lookups([0, 0], None, None);
    let (decision, _) = run(&mut state, PROTO_TCP, true, None);
    assert!(matches!(decision, Decision::Table { record: None, .. }));
    // Between a SYN and its ACK: the SYN's backend, the slot left in place.
    let mut state = lookups([3, 0], Some(syn(3, NOW - 10, 99, EPOCH)), None);
    let (decision, _) = run(&mut state, PROTO_TCP, true, None);
    assert!(matches!(
        decision,
        Decision::HeldSyn {
            backend: 3,
            record: None,
            ..
        }
    ));
    // After a table change, on a new connection: its backend, the pin left in place.
    let mut state = lookups([2, 3], Some(syn(3, NOW - 10, 99, EPOCH)), None);
    let entry = pin(2, NOW - 20, EPOCH - 1, 11);
    let (decision, _) = run(&mut state, PROTO_TCP, true, Some(&entry));
    assert!(matches!(
        decision,
        Decision::HeldSyn {
            backend: 3,
            record: None,
            ..
        }
    ));
}

#[test]
fn a_pin_of_another_vip_or_on_a_removed_backend_is_repicked() {
    let mut other_vip = pin(2, NOW - 20, EPOCH, 11);
    other_vip.vip_id += 1;
    let removed = pin(4, NOW - 20, EPOCH, 11);
    for entry in [other_vip, removed] {
        let mut state = lookups([2, 3], None, None);
        let (decision, stats) = run(&mut state, PROTO_TCP, false, Some(&entry));
        let Decision::Table {
            record: Some(record),
            stale_slot: None,
            ..
        } = decision
        else {
            panic!("{decision:?}")
        };
        assert!(record.replace, "the stale entry is overwritten");
        assert_eq!((stats.ct_stale_repicked, stats.ct_misses_non_syn), (1, 0));
    }
    // Another VIP's pin is stale without a look at its backend.
    let mut state = lookups([2, 3], None, None);
    run(&mut state, PROTO_TCP, false, Some(&other_vip));
    assert_eq!(state.backend_reads, 0);
}

#[test]
fn a_udp_pin_holds_until_the_idle_timeout_and_is_refreshed_at_most_once_a_second() {
    let mut state = lookups([2, 0], None, None);
    let fresh = pin(2, NOW - 500_000_000, 0, 0);
    assert_eq!(
        run(&mut state, PROTO_UDP, false, Some(&fresh)).0,
        Decision::Pin {
            backend: 2,
            touch: Touch::Nothing
        }
    );
    let busy = pin(2, NOW - 2_000_000_000, 0, 0);
    let (decision, stats) = run(&mut state, PROTO_UDP, false, Some(&busy));
    assert_eq!(
        decision,
        Decision::Pin {
            backend: 2,
            touch: Touch::Stamp(NOW)
        }
    );
    assert_eq!(stats.ct_hits, 1);
    let mut stamped = busy;
    Touch::Stamp(NOW).apply(&mut stamped);
    assert_eq!(stamped.stamp_ns, NOW);
    // UDP never reads the SYN cache.
    assert_eq!(state.slot_reads, 0);
}

#[test]
fn an_idle_udp_pin_expires_and_the_table_decides_again() {
    let mut state = lookups([2, 0], None, None);
    let idle = pin(2, NOW - UDP_TIMEOUT - 1, 0, 0);
    let (decision, stats) = run(&mut state, PROTO_UDP, false, Some(&idle));
    assert_eq!(
        decision,
        Decision::Table {
            hash: hash(PROTO_UDP),
            record: Some(record(true, 0, 0)),
            stale_slot: None,
        }
    );
    assert_eq!((stats.ct_udp_expired, stats.ct_hits), (1, 0));
    assert_eq!(state.slot_reads, 0);
}

#[test]
fn a_new_udp_flow_is_pinned_from_the_table_without_counting_a_miss() {
    let mut state = lookups([0, 0], None, None);
    let (decision, stats) = run(&mut state, PROTO_UDP, false, None);
    assert!(matches!(
        decision,
        Decision::Table {
            record: Some(Record { epoch: 0, .. }),
            ..
        }
    ));
    assert_eq!(stats, VipStats::default());
    assert_eq!(state.slot_reads, 0);
}

#[test]
fn udp_idle_refreshes_after_a_second_or_half_the_timeout_whichever_is_shorter() {
    let s = 1_000_000_000;
    // 30 s timeout: refresh after 1 s.
    assert_eq!(udp_idle(0, s, 30 * s), UdpIdle::Fresh);
    assert_eq!(udp_idle(0, s + 1, 30 * s), UdpIdle::Refresh);
    assert_eq!(udp_idle(0, 30 * s, 30 * s), UdpIdle::Refresh);
    assert_eq!(udp_idle(0, 30 * s + 1, 30 * s), UdpIdle::Expired);
    // 300 ms timeout: refresh after 150 ms.
    let ms = 1_000_000;
    assert_eq!(udp_idle(0, 150 * ms, 300 * ms), UdpIdle::Fresh);
    assert_eq!(udp_idle(0, 150 * ms + 1, 300 * ms), UdpIdle::Refresh);
    assert_eq!(udp_idle(0, 300 * ms + 1, 300 * ms), UdpIdle::Expired);
}

#[test]
fn the_fast_path_check_reads_only_the_pins_backend_and_for_udp_the_clock() {
    let mut state = lookups([2, 0], None, None);
    let entry = pin(2, NOW - 20, EPOCH, 11);
    assert_eq!(
        pin_state(&mut state, &entry, VIP_ID, EPOCH, false, UDP_TIMEOUT),
        PinState::Holds {
            backend: 2,
            touch: Touch::Nothing
        }
    );
    assert_eq!(
        pin_state(&mut state, &entry, VIP_ID, EPOCH + 1, false, UDP_TIMEOUT),
        PinState::OlderTable(2)
    );
    assert_eq!((state.backend_reads, state.clock_reads), (2, 0));
    assert_eq!(
        pin_state(&mut state, &entry, VIP_ID, EPOCH, true, UDP_TIMEOUT),
        PinState::Holds {
            backend: 2,
            touch: Touch::Nothing
        }
    );
    assert_eq!(state.clock_reads, 1);
}

fn run_syn(state: &mut State, seq: u32, entry: Option<&CtEntry>) -> SynDecision<u32> {
    decide_syn(state, &key(PROTO_TCP), seq, &vip(), entry, &cfg())
}

#[test]
fn a_duplicate_syn_of_an_established_connection_follows_its_pin_across_a_table_change() {
    // Pinned at an older epoch from a SYN with ISN 11; the SYN cache holds another SYN.
    let mut state = lookups([2, 3], Some(syn(3, NOW, 99, EPOCH)), Some(3));
    let entry = pin(2, NOW - 20, EPOCH - 1, 11);
    assert_eq!(run_syn(&mut state, 11, Some(&entry)), SynDecision::Pin(2));
    assert_eq!((state.slot_reads, state.table_reads), (0, 0));
}

#[test]
fn a_syn_with_another_isn_over_a_pin_is_a_new_connection() {
    let mut state = lookups([2, 3], None, None);
    let entry = pin(2, NOW - 20, EPOCH - 1, 11);
    assert_eq!(
        run_syn(&mut state, 12, Some(&entry)),
        SynDecision::Table {
            hash: hash(PROTO_TCP),
            table: hash(PROTO_TCP)
        }
    );
}

#[test]
fn a_retransmitted_syn_follows_its_held_syn_across_a_table_change() {
    let mut state = lookups([2, 3], Some(syn(3, NOW - 10, 99, EPOCH - 1)), Some(2));
    assert_eq!(run_syn(&mut state, 99, None), SynDecision::HeldSyn(3));
    assert_eq!(state.table_reads, 0);
    // Another sequence number: another connection attempt, the table decides.
    assert_eq!(
        run_syn(&mut state, 100, None),
        SynDecision::Table {
            hash: hash(PROTO_TCP),
            table: hash(PROTO_TCP)
        }
    );
}

#[test]
fn a_syn_follows_no_pin_made_without_a_syn_nor_of_another_vip_nor_on_a_down_backend() {
    let table = SynDecision::Table {
        hash: hash(PROTO_TCP),
        table: hash(PROTO_TCP),
    };
    // A pin made mid-flow has no ISN: a SYN with sequence number 0 is not its duplicate.
    let mut state = lookups([2, 3], None, None);
    assert_eq!(run_syn(&mut state, 0, Some(&pin(2, NOW, EPOCH, 0))), table);
    let mut other_vip = pin(2, NOW, EPOCH, 11);
    other_vip.vip_id = VIP_ID + 1;
    assert_eq!(run_syn(&mut state, 11, Some(&other_vip)), table);
    // Backend 2 down: neither its pin nor its held SYN is followed.
    let mut state = lookups([3, 0], Some(syn(2, NOW, 11, EPOCH)), None);
    assert_eq!(
        run_syn(&mut state, 11, Some(&pin(2, NOW, EPOCH, 11))),
        table
    );
    // A torn slot (its tag does not match) is no held SYN.
    let mut torn = syn(3, NOW, 11, EPOCH);
    torn.backend_id = 2;
    let mut state = lookups([2, 3], Some(torn), None);
    assert_eq!(run_syn(&mut state, 11, None), table);
}
