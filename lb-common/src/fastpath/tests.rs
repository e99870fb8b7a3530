// SPDX-License-Identifier: MIT OR Apache-2.0
//! Tests of the fast path's rules one by one: the slot layout, the change steps, each
//! rule of [`decide`], the cleaning. The sequences of the simulation are replayed in
//! `lb-common/tests/fastpath_model.rs`.

use super::*;
use crate::conntrack::DUPLICATE_SYN_WINDOW_NS;

const A: u32 = 1;
const C: u32 = 2;
const D: u32 = 3;
const S: u64 = 1_000_000_000;

/// Slot owned by `A`, switched to `C` at 10 s (dirty, clean owner `A`).
fn moved() -> SlotState {
    SlotState::clean(A).switched(C, 10 * S)
}

fn inputs(slot: SlotState, packet: Packet, now_ns: u64) -> Inputs {
    Inputs {
        slot,
        packet,
        pin: None,
        held: HeldView::Empty,
        owner: Liveness::Active,
        clean_owner: Liveness::Active,
        now_ns,
    }
}

/// The backend, rule, note and pin of an outcome that writes a pin.
fn pinned(outcome: Outcome) -> (u32, By, Option<Note>, PinWrite) {
    match outcome {
        Outcome::Forward {
            backend,
            by,
            note,
            write: Write::Pin(pin),
        } => (backend, by, note, pin),
        other => panic!("no pin: {other:?}"),
    }
}

fn backend_of(outcome: Outcome) -> (u32, By) {
    match outcome {
        Outcome::Forward { backend, by, .. } => (backend, by),
        Outcome::GiveUp(why) => panic!("gave up: {why:?}"),
    }
}

#[test]
fn layout_is_sixteen_bytes_with_the_state_word_first() {
    let slot = SlotState {
        epoch: 0x0403_0201,
        clean_owner: 0x0605,
        state: SLOT_DIRTY,
        flags: 0,
        owner: 0x0a09,
        pending_owner: 0,
        changed_ticks: 0x100f_0e0d,
    };
    // SAFETY: SlotState is repr(C), 16 bytes, integers only, no implicit padding.
    let bytes: [u8; 16] = unsafe { core::mem::transmute(slot) };
    let want = [1, 2, 3, 4, 5, 6, SLOT_DIRTY, 0, 9, 10, 0, 0, 13, 14, 15, 16];
    assert_eq!(bytes, want.map(u8::to_le), "little-endian layout");
    assert_eq!(align_of::<SlotState>(), 8);
}

#[test]
fn a_table_cell_holds_the_slot_in_its_byte_layout_and_the_header() {
    use crate::types::{TableCell, TableHeader};
    let slot = SlotState {
        epoch: 0x0403_0201,
        clean_owner: 0x0605,
        state: SLOT_DIRTY,
        owner: 0x0a09,
        changed_ticks: 0x100f_0e0d,
        ..SlotState::default()
    };
    let cell = TableCell::of_slot(&slot);
    // SAFETY: both types are repr(C), 16 bytes, integers only, no implicit padding.
    let (a, b): ([u8; 16], [u8; 16]) = unsafe {
        (
            core::mem::transmute::<SlotState, [u8; 16]>(slot),
            core::mem::transmute::<TableCell, [u8; 16]>(cell),
        )
    };
    assert_eq!(a, b, "the cell's words are the slot's bytes");
    assert_eq!(cell.slot(), slot);
    assert_eq!((cell.owner(), cell.is_clean()), (0x0a09, false));
    assert!(TableCell::of_slot(&SlotState::clean(7)).is_clean());
    let header = TableHeader {
        size: 65_537,
        generation: 0xdead_beef,
    };
    assert_eq!(TableCell::of_header(header).header(), header);
}

#[test]
fn a_publication_switches_moved_slots_and_bumps_dirty_ones() {
    let clean = SlotState::clean(A);
    assert_eq!(
        clean.republished(A, 5 * S),
        clean,
        "a kept clean slot is copied"
    );
    let moved_now = clean.republished(C, 5 * S);
    assert_eq!(moved_now, clean.switched(C, 5 * S));
    let again = moved_now.republished(C, 9 * S);
    assert_eq!(
        again,
        moved_now.bumped(),
        "a kept dirty slot aborts a walk's commit"
    );
    assert_eq!(clean_commit(&again, moved_now.epoch), None);
    let resized = SlotState::resized(D, 5 * S);
    assert!(resized.is_dirty());
    assert_eq!((resized.owner(), resized.clean_owner()), (D, 0));
    assert_eq!(resized.changed_ticks, ct_ticks(5 * S));
}

#[test]
fn a_switch_keeps_the_first_clean_owner_and_bumps_the_epoch() {
    let slot = moved();
    assert!(slot.is_dirty());
    assert_eq!((slot.owner(), slot.clean_owner()), (C, A));
    let again = slot.switched(D, 20 * S);
    assert_eq!((again.owner(), again.clean_owner()), (D, A));
    assert_eq!(again.epoch, slot.epoch + 1);
    assert_eq!(again.changed_ticks, ct_ticks(20 * S));
    let marked = SlotState::clean(A).marked(S);
    assert_eq!((marked.owner(), marked.clean_owner()), (A, A));
}

#[test]
fn a_new_syn_within_the_lead_goes_to_the_clean_owner_and_after_it_to_the_owner() {
    // `moved`: A to C at 10 s; the lead is 4 s, rounded up by one tick (2^30 ns).
    let slot = moved();
    let lead = Config::DEFAULT.lead_ns;
    assert_eq!(syn_backend(&slot, Liveness::Active, 11 * S, lead), A);
    assert_eq!(syn_backend(&slot, Liveness::Draining, 11 * S, lead), A);
    assert_eq!(syn_backend(&slot, Liveness::Down, 11 * S, lead), C);
    assert_eq!(syn_backend(&slot, Liveness::Active, 16 * S, lead), C);
    assert_eq!(
        syn_backend(&slot, Liveness::Active, 11 * S, 0),
        C,
        "no lead"
    );
    let clean = SlotState::clean(A);
    assert_eq!(syn_backend(&clean, Liveness::Active, 11 * S, lead), A);
}

#[test]
fn a_syn_to_the_owner_of_a_dirty_slot_is_pinned_when_a_miss_goes_elsewhere() {
    // `moved`: A to C at 10 s.
    let slot = moved();
    assert!(
        syn_needs_pin(&slot, Liveness::Active, C),
        "a miss goes to A"
    );
    assert!(
        !syn_needs_pin(&slot, Liveness::Active, A),
        "a miss goes to A too"
    );
    assert!(
        syn_needs_pin(&slot, Liveness::Down, C),
        "a miss goes to C while A keeps no flows, to A once it is back (a flap)"
    );
    assert!(!syn_needs_pin(&SlotState::clean(C), Liveness::Active, C));
}

#[test]
fn the_fleet_rule_needs_the_second_chance() {
    assert!(enabled(true, false, false));
    assert!(!enabled(true, true, false));
    assert!(enabled(true, true, true));
    assert!(!enabled(false, false, true));
}

#[test]
fn a_clean_slot_forwards_to_its_owner_whatever_else() {
    let mut inp = inputs(SlotState::clean(A), Packet::Tcp { rst: false }, S);
    inp.clean_owner = Liveness::Down;
    let outcome = decide(&Config::DEFAULT, &inp);
    assert_eq!(
        outcome,
        Outcome::Forward {
            backend: A,
            by: By::CleanSlot,
            write: Write::Nothing,
            note: None
        }
    );
    let empty = inputs(SlotState::clean(0), Packet::Udp, S);
    assert_eq!(
        decide(&Config::DEFAULT, &empty),
        Outcome::GiveUp(GiveUp::NoBackend)
    );
}

#[test]
fn a_non_syn_miss_goes_to_the_clean_owner_and_pins_derivably() {
    let inp = inputs(moved(), Packet::Tcp { rst: false }, 11 * S);
    let (backend, by, _, pin) = pinned(decide(&Config::DEFAULT, &inp));
    assert_eq!((backend, by), (A, By::MissToCleanOwner));
    assert_eq!(pin.class, PinClass::Derivable);
    assert!(pin.bump_epoch, "A is not the owner");
}

#[test]
fn a_miss_whose_clean_owner_is_down_goes_to_the_owner_as_an_exception() {
    let mut inp = inputs(moved(), Packet::Tcp { rst: false }, 11 * S);
    inp.clean_owner = Liveness::Down;
    let (backend, _, _, pin) = pinned(decide(&Config::DEFAULT, &inp));
    assert_eq!(
        (backend, pin.class, pin.bump_epoch),
        (C, PinClass::Exception, false)
    );
}

#[test]
fn a_new_syn_goes_to_the_clean_owner_in_the_lead_then_to_the_owner_counted() {
    let inp = inputs(moved(), Packet::Syn { seq: 7 }, 12 * S);
    assert_eq!(
        decide(&Config::DEFAULT, &inp),
        Outcome::Forward {
            backend: A,
            by: By::SynToCleanOwner,
            write: Write::HoldSyn,
            note: None
        }
    );
    let after_lead = inputs(moved(), Packet::Syn { seq: 7 }, 17 * S);
    let outcome = decide(&Config::DEFAULT, &after_lead);
    assert_eq!(
        outcome,
        Outcome::Forward {
            backend: C,
            by: By::SynToOwner,
            write: Write::HoldSyn,
            note: Some(Note::SynMaybeSplit)
        }
    );
    let later = inputs(
        moved(),
        Packet::Syn { seq: 7 },
        10 * S + DUPLICATE_SYN_WINDOW_NS + 3 * S,
    );
    assert!(matches!(
        decide(&Config::DEFAULT, &later),
        Outcome::Forward { note: None, .. }
    ));
}

#[test]
fn a_retransmitted_syn_follows_its_held_syn_and_the_ack_promotes_it() {
    let mut inp = inputs(moved(), Packet::Syn { seq: 7 }, 12 * S);
    inp.held = HeldView::Own {
        backend: A,
        liveness: Liveness::Active,
        seq: 7,
        syn_ns: 9 * S,
    };
    assert_eq!(
        backend_of(decide(&Config::DEFAULT, &inp)),
        (A, By::HeldRetransmit)
    );
    inp.packet = Packet::Tcp { rst: false };
    let (backend, _, _, pin) = pinned(decide(&Config::DEFAULT, &inp));
    assert_eq!((backend, pin.isn, pin.free_held), (A, 7, true));
}

#[test]
fn a_syn_whose_cache_slot_is_live_is_pinned_at_the_syn() {
    // Past the duplicate-SYN window of the switch: no residual note comes first.
    let now = 10 * S + DUPLICATE_SYN_WINDOW_NS + 3 * S;
    let mut inp = inputs(moved(), Packet::Syn { seq: 7 }, now);
    inp.held = HeldView::Other { syn_ns: now - S };
    let (backend, _, note, pin) = pinned(decide(&Config::DEFAULT, &inp));
    assert_eq!((backend, pin.isn, pin.class), (C, 7, PinClass::Exception));
    assert_eq!((pin.on_full, note), (OnFull::Drop, None));
    inp.held = HeldView::Other {
        syn_ns: now - DEFAULT_SYN_HOLD_NS - S,
    };
    assert!(matches!(
        decide(&Config::DEFAULT, &inp),
        Outcome::Forward {
            write: Write::HoldSyn,
            ..
        }
    ));
}

#[test]
fn a_udp_miss_goes_to_the_clean_owner_only_within_the_idle_timeout() {
    let cfg = Config::DEFAULT;
    let mut inp = inputs(moved(), Packet::Udp, 11 * S);
    inp.clean_owner = Liveness::Draining;
    let Outcome::Forward { backend, note, .. } = decide(&cfg, &inp) else {
        panic!("gave up");
    };
    assert_eq!((backend, note), (A, Some(Note::UdpToDraining)));
    inp.now_ns = 10 * S + cfg.udp_timeout_ns + 3 * S;
    assert_eq!(backend_of(decide(&cfg, &inp)), (C, By::MissToOwner));
}

#[test]
fn a_stale_pin_falls_to_the_miss_rule_and_to_the_owner_without_a_clean_owner() {
    let mut inp = inputs(moved(), Packet::Tcp { rst: false }, 11 * S);
    inp.clean_owner = Liveness::Down;
    inp.pin = Some(PinView {
        backend: D,
        liveness: Liveness::Down,
        stamp_ns: S,
        isn: 0,
    });
    let (backend, by, note, pin) = pinned(decide(&Config::DEFAULT, &inp));
    assert_eq!(
        (backend, by, note, pin.replace),
        (C, By::Repick, Some(Note::Repicked), true)
    );
}

#[test]
fn cleaning_waits_for_the_quiet_time_and_aborts_when_the_epoch_moved() {
    let cfg = Config {
        quiet_ns: 100 * S,
        tcp_idle_ns: 100 * S,
        ..Config::DEFAULT
    };
    let slot = moved();
    assert_eq!(clean_check(&cfg, &slot, 50 * S, false), CleanCheck::Recent);
    assert_eq!(clean_check(&cfg, &slot, 200 * S, true), CleanCheck::Foreign);
    let CleanCheck::Candidate { epoch } = clean_check(&cfg, &slot, 200 * S, false) else {
        panic!("not a candidate");
    };
    assert_eq!(clean_commit(&slot.bumped(), epoch), None);
    let clean = clean_commit(&slot, epoch).expect("commits");
    assert!(!clean.is_dirty());
    assert_eq!((clean.owner(), clean.clean_owner()), (C, C));
}

#[test]
fn the_quiet_time_is_never_below_the_tcp_idle_time() {
    let cfg = Config {
        quiet_ns: S,
        ..Config::DEFAULT
    };
    assert_eq!(cfg.effective_quiet_ns(), DEFAULT_TCP_IDLE_NS);
}

#[test]
fn only_live_pins_and_held_syns_naming_another_backend_block_cleaning_whatever_its_health() {
    let cfg = Config::DEFAULT;
    let slot = moved();
    let pin = PinView {
        backend: A,
        liveness: Liveness::Active,
        stamp_ns: S,
        isn: 0,
    };
    assert!(pin_blocks_cleaning(
        &cfg,
        &slot,
        &pin,
        false,
        20 * S,
        30 * S
    ));
    let idle = 20 * S + cfg.tcp_idle_ns + S;
    assert!(!pin_blocks_cleaning(&cfg, &slot, &pin, false, 20 * S, idle));
    // A backend down now may come back within the idle time (a health flap).
    let down = PinView {
        liveness: Liveness::Down,
        ..pin
    };
    assert!(pin_blocks_cleaning(
        &cfg,
        &slot,
        &down,
        false,
        20 * S,
        30 * S
    ));
    let owners = PinView { backend: C, ..pin };
    assert!(!pin_blocks_cleaning(
        &cfg,
        &slot,
        &owners,
        false,
        20 * S,
        30 * S
    ));
    let held = HeldView::Own {
        backend: A,
        liveness: Liveness::Active,
        seq: 1,
        syn_ns: 20 * S,
    };
    assert!(held_blocks_cleaning(&cfg, &slot, &held, 30 * S));
    assert!(!held_blocks_cleaning(&cfg, &slot, &held, 200 * S));
}

#[test]
fn a_new_syn_during_a_drains_lead_reaches_the_draining_clean_owner_counted() {
    let mut inp = inputs(moved(), Packet::Syn { seq: 7 }, 11 * S);
    inp.clean_owner = Liveness::Draining;
    assert_eq!(
        decide(&Config::DEFAULT, &inp),
        Outcome::Forward {
            backend: A,
            by: By::SynToCleanOwner,
            write: Write::HoldSyn,
            note: Some(Note::SynToDraining)
        }
    );
    // After the lead the owner takes it.
    let mut later = inputs(moved(), Packet::Syn { seq: 7 }, 20 * S);
    later.clean_owner = Liveness::Draining;
    let Outcome::Forward { backend, by, .. } = decide(&Config::DEFAULT, &later) else {
        panic!("forwarded");
    };
    assert_eq!((backend, by), (C, By::SynToOwner));
}

#[test]
fn cleaning_deletes_the_pins_naming_another_backend() {
    let slot = moved();
    assert!(
        !pin_outlived_cleaning(&slot, A),
        "dirty: nothing is deleted"
    );
    let clean = clean_commit(&slot, slot.epoch).expect("commits");
    assert!(pin_outlived_cleaning(&clean, A));
    assert!(!pin_outlived_cleaning(&clean, C));
}

#[test]
fn cleaning_deletes_every_exception_of_a_cleaned_slot() {
    let slot = moved();
    assert!(
        !exception_outlived_cleaning(&slot),
        "dirty: nothing is deleted"
    );
    let clean = clean_commit(&slot, slot.epoch).expect("commits");
    assert!(exception_outlived_cleaning(&clean), "the owner's too");
}

#[test]
fn m3_routes_tcp_miss_pins_naming_the_clean_owner_to_the_lru_and_every_other_to_exceptions() {
    let slot = moved();
    assert_eq!(pin_class(&slot, false, A, 0), PinClass::Derivable);
    assert_eq!(
        pin_class(&slot, false, A, 7),
        PinClass::Exception,
        "from a SYN"
    );
    assert_eq!(pin_class(&slot, false, C, 0), PinClass::Exception);
    assert_eq!(pin_class(&slot, false, D, 0), PinClass::Exception);
    assert_eq!(pin_class(&slot, true, A, 0), PinClass::Exception, "UDP");
    let resized = SlotState::resized(C, 10 * S);
    assert_eq!(pin_class(&resized, false, C, 0), PinClass::Exception);
    let clean = SlotState::clean(A);
    assert_eq!(pin_class(&clean, true, A, 7), PinClass::Derivable, "clean");
}

#[test]
fn decide_routes_its_pins_by_pin_class() {
    let cfg = Config::DEFAULT;
    let now = 200 * S;
    for packet in [Packet::Tcp { rst: false }, Packet::Udp] {
        for clean_owner in [Liveness::Active, Liveness::Down] {
            let inp = Inputs {
                clean_owner,
                ..inputs(moved(), packet, now)
            };
            let (backend, _, _, pin) = pinned(decide(&cfg, &inp));
            assert_eq!(
                pin.class,
                pin_class(&inp.slot, packet == Packet::Udp, backend, pin.isn),
                "{packet:?} {clean_owner:?}"
            );
        }
    }
}

#[test]
fn a_full_exceptions_map_counts_r2() {
    assert_eq!(OnFull::Drop.note(), Note::SynDropped);
    assert_eq!(OnFull::KeepHeld.note(), Note::HeldKept);
    assert_eq!(OnFull::Forward.note(), Note::Unpinned);
    for on_full in [OnFull::Drop, OnFull::KeepHeld, OnFull::Forward] {
        assert_eq!(on_full.note().residual(), Some("R2"));
    }
}

#[test]
fn s4_pins_expire_past_the_syn_hold_unless_a_later_packet_saw_them() {
    let cfg = Config::DEFAULT;
    let made = 100 * S;
    let after = made + cfg.syn_hold_ns + 1;
    assert!(!syn_pin_expired(
        &cfg,
        7,
        made,
        UNSEEN_TICKS,
        made + cfg.syn_hold_ns
    ));
    assert!(syn_pin_expired(&cfg, 7, made, UNSEEN_TICKS, after));
    assert!(
        !syn_pin_expired(&cfg, 7, made, ct_ticks(made + S), after),
        "seen"
    );
    assert!(
        !syn_pin_expired(&cfg, 0, made, UNSEEN_TICKS, after),
        "a miss's pin"
    );
    assert_eq!(tcp_pin_seen_ns(made, UNSEEN_TICKS), made);
    assert_eq!(tcp_pin_seen_ns(made, 3), 3 << crate::types::CT_TICK_SHIFT);
}

#[test]
fn c7_deletes_a_closed_connections_exception_one_linger_after_its_last_packet() {
    use crate::types::{CT_FIN, CT_OPEN, CT_RST};
    let cfg = Config::DEFAULT;
    assert_eq!(cfg.closed_linger_ns, CLOSED_EXCEPTION_LINGER_NS);
    let seen = 500 * S;
    let at_linger = seen + CLOSED_EXCEPTION_LINGER_NS;
    for closing in [CT_FIN, CT_RST] {
        assert!(
            !closed_exception_expired(&cfg, closing, seen, at_linger),
            "{closing}"
        );
        assert!(
            closed_exception_expired(&cfg, closing, seen, at_linger + 1),
            "{closing}"
        );
    }
    assert!(
        !closed_exception_expired(&cfg, CT_OPEN, seen, at_linger + 3_600 * S),
        "an open connection's exception waits for its slot's cleaning (C5)"
    );
    assert!(
        !closed_exception_expired(&cfg, CT_FIN, seen + S, seen),
        "a clock behind the stamp expires nothing"
    );
}

#[test]
fn the_data_paths_miss_rule_takes_the_clean_owner_on_a_dirty_slot_only() {
    let udp_timeout = 30 * S;
    let active = Liveness::Active;
    let clean = SlotState::clean(A);
    assert_eq!(miss_backend(&clean, false, active, 20 * S, udp_timeout), A);
    let slot = moved();
    assert_eq!(
        miss_backend(&slot, false, active, 20 * S, udp_timeout),
        A,
        "M1"
    );
    assert_eq!(
        miss_backend(&slot, false, Liveness::Down, 20 * S, udp_timeout),
        C,
        "M2"
    );
    assert_eq!(
        miss_backend(&slot, true, active, 20 * S, udp_timeout),
        A,
        "UDP, recent"
    );
    assert_eq!(
        miss_backend(&slot, true, active, 100 * S, udp_timeout),
        C,
        "UDP, later"
    );
    let resized = SlotState::resized(D, 10 * S);
    assert_eq!(
        miss_backend(&resized, false, active, 20 * S, udp_timeout),
        D
    );
}

/// The data path counts a new SYN's and a UDP miss's give-up by `syn_give_up` and
/// `udp_give_up` on the backend it chose; `decide` notes the same, over slots in and
/// out of the lead and of the duplicate-SYN window, with every state of the clean
/// owner.
#[test]
fn the_data_paths_give_up_tests_note_what_decide_notes() {
    let cfg = Config::DEFAULT;
    let states = [Liveness::Active, Liveness::Draining, Liveness::Down];
    let times = [11 * S, 30 * S, 10 * S + DUPLICATE_SYN_WINDOW_NS + 5 * S];
    let slots = [
        moved(),
        SlotState::clean(A),
        SlotState::clean(A).marked(10 * S),
    ];
    let mut seen = [false; 3];
    for (slot, clean, now) in slots
        .into_iter()
        .flat_map(|s| states.into_iter().map(move |c| (s, c)))
        .flat_map(|(s, c)| times.into_iter().map(move |t| (s, c, t)))
    {
        let mut inp = inputs(slot, Packet::Syn { seq: 7 }, now);
        inp.clean_owner = clean;
        if let Outcome::Forward { backend, note, .. } = decide(&cfg, &inp) {
            assert_eq!(
                note,
                syn_give_up(&slot, clean, backend, now),
                "{slot:?} {clean:?} {now}"
            );
            seen[0] |= note == Some(Note::SynMaybeSplit);
            seen[1] |= note == Some(Note::SynToDraining);
        }
        inp.packet = Packet::Udp;
        if let Outcome::Forward {
            backend, note, by, ..
        } = decide(&cfg, &inp)
        {
            let counted = (by == By::MissToCleanOwner)
                .then(|| udp_give_up(&slot, clean, backend))
                .flatten();
            assert_eq!(note, counted, "UDP {slot:?} {clean:?} {now}");
            seen[2] |= note == Some(Note::UdpToDraining);
        }
    }
    assert_eq!(seen, [true; 3], "each give-up occurs in the grid");
}
