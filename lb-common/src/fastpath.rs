// SPDX-License-Identifier: MIT OR Apache-2.0
//! The fast path's decisions (issue 30): the per-slot state that lets the Maglev table
//! decide alone, the decision for a packet given that state, and when a dirty slot may
//! turn clean. Pure and total over plain values. The XDP program calls the parts it
//! needs ([`syn_backend`], [`miss_backend`]); the daemon's cleaning walk the cleaning's.
//!
//! This module owns [`SlotState`] (what a table slot carries beside its owner, and its
//! byte layout), the table change's step ([`SlotState::republished`],
//! [`SlotState::switched`]), the packet decision ([`decide`]), the cleaning decision
//! ([`clean_check`], [`clean_commit`], [`pin_blocks_cleaning`],
//! [`held_blocks_cleaning`], [`pin_outlived_cleaning`]) and the fleet rule
//! ([`enabled`]). The rules, the invariant and the residuals are in the book's chapter
//! "The fast path" (`docs/src/design/fast-path.md`); each function says which rule it
//! carries out.
//!
//! The words are those of the glossary in the crate root and of [`crate::conntrack`]:
//! a *pin* is a conntrack entry, a *held SYN* a `SYN_CACHE` slot. A slot is *clean*
//! when every flow on it belongs to its owner: the table decides, with no lookup. A
//! slot is *dirty* from the change of its owner until the cleaning: pins, held SYNs and
//! the clean owner decide. Times are `bpf_ktime_get_coarse_ns` (ns) unless a name says
//! ticks ([`crate::types::ct_ticks`], 2^30 ns).

use crate::{
    conntrack::{DUPLICATE_SYN_WINDOW_NS, UdpIdle, udp_idle},
    types::ct_ticks,
};

#[cfg(test)]
mod tests;

/// [`SlotState::state`]: every flow on the slot belongs to its owner; the table
/// decides alone.
pub const SLOT_CLEAN: u8 = 0;
/// [`SlotState::state`]: the owner changed (or is about to) since the slot was last
/// clean; pins, held SYNs and the clean owner decide.
pub const SLOT_DIRTY: u8 = 1;
/// [`SlotState::flags`]: a two-phase rollout's first phase (*learn*) named the owner the
/// next table gives the slot, [`SlotState::pending_owner`]; the slot still forwards by
/// its owner (`crate::second_chance`, rule SC6). Any table published since clears it.
pub const SLOT_PENDING: u8 = 1;

/// What one slot of a VIP's Maglev table carries: its owner and, beside it, its state.
///
/// Layout (16 bytes, 8-byte aligned): `epoch` 0..4, `clean_owner` 4..6, `state` 6,
/// `flags` 7, `owner` 8..10, `pending_owner` 10..12, `changed_ticks` 12..16. Bytes 0..8
/// are the
/// *state word*: the cleaning commits with one 64-bit compare-and-swap on it, and the
/// XDP program bumps `epoch` with one 32-bit atomic add; both keep `owner`. Backend ids
/// fit 16 bits (below `MAX_BACKENDS`, 65,536, asserted with [`crate::types::SynEntry`]);
/// 0 means none, as everywhere. A table change publishes whole slots, owner and state
/// together, in the table buffer it switches in (one `VIPS` update).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotState {
    /// Slot epoch: one more at every change of the slot's owner or state and at every
    /// pin the data path makes, on a dirty slot, naming another backend than the owner.
    /// The cleaning's compare-and-swap fails when it moved (wraps after 2^32 changes).
    pub epoch: u32,
    /// The owner when the slot was last clean (dirty slots only): the backend of every
    /// flow that began before the change and has no pin.
    pub clean_owner: u16,
    /// [`SLOT_CLEAN`] or [`SLOT_DIRTY`].
    pub state: u8,
    /// [`SLOT_PENDING`] or 0 (the byte was padding, always zero, before the two-phase
    /// rollout: a program built before it ignores the byte).
    pub flags: u8,
    /// The backend id the table gives the slot (today's 4-byte table slot).
    pub owner: u16,
    /// With [`SLOT_PENDING`]: the owner the next table gives the slot (0 otherwise; was
    /// padding, ignored by a program built before the two-phase rollout).
    pub pending_owner: u16,
    /// When the owner last changed or the slot was marked dirty ([`ct_ticks`]).
    pub changed_ticks: u32,
}
const _: () = assert!(size_of::<SlotState>() == 16);
const _: () = assert!(crate::maps::MAX_BACKENDS <= 1 << 16);

/// A backend id as a slot stores it.
#[inline(always)]
#[must_use]
fn id16(id: u32) -> u16 {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "backend ids are below MAX_BACKENDS (65,536, asserted above)"
    )]
    let id = id as u16;
    id
}

impl SlotState {
    /// A clean slot owned by backend `owner` (0: empty), as a new table starts.
    #[inline(always)]
    #[must_use]
    pub fn clean(owner: u32) -> Self {
        Self {
            owner: id16(owner),
            ..Self::default()
        }
    }

    /// The owner's backend id.
    #[inline(always)]
    #[must_use]
    pub fn owner(&self) -> u32 {
        u32::from(self.owner)
    }

    /// The clean owner's backend id (meaningful on a dirty slot).
    #[inline(always)]
    #[must_use]
    pub fn clean_owner(&self) -> u32 {
        u32::from(self.clean_owner)
    }

    /// Whether the slot is dirty.
    #[inline(always)]
    #[must_use]
    pub fn is_dirty(&self) -> bool {
        self.state != SLOT_CLEAN
    }

    /// Rule SC6's pending owner: the backend id a rollout's *learn* phase named for the
    /// next table, when the slot is pending ([`SLOT_PENDING`]) and names one; 0 for
    /// none.
    #[inline(always)]
    #[must_use]
    pub fn pending(&self) -> u32 {
        if self.flags & SLOT_PENDING == 0 {
            0
        } else {
            u32::from(self.pending_owner)
        }
    }

    /// Rule R1 (the rollout's *learn* phase): what the running table carries for a slot
    /// that held `self` when the next table gives it `next_owner`, at `now_ns`. The
    /// owner and state stay (as a republish of the same owner: a dirty slot's epoch is
    /// bumped, so a cleaning walk that read it before cannot commit); a slot the next
    /// table moves is pending with `next_owner`, any other is not pending.
    #[inline(always)]
    #[must_use]
    pub fn learned(self, next_owner: u32, now_ns: u64) -> Self {
        let kept = self.republished(self.owner(), now_ns);
        if next_owner == kept.owner() || next_owner == 0 {
            kept
        } else {
            Self {
                flags: kept.flags | SLOT_PENDING,
                pending_owner: id16(next_owner),
                ..kept
            }
        }
    }

    /// The same state, not pending (rule R2: a table published ends the learn phase).
    #[inline(always)]
    #[must_use]
    fn without_pending(self) -> Self {
        Self {
            flags: self.flags & !SLOT_PENDING,
            pending_owner: 0,
            ..self
        }
    }

    /// Rule P3: the slot turns dirty at `now_ns` and keeps its owner. A clean slot's
    /// owner becomes its clean owner; a dirty slot keeps its own.
    #[inline(always)]
    #[must_use]
    pub fn marked(self, now_ns: u64) -> Self {
        let clean_owner = if self.is_dirty() {
            self.clean_owner
        } else {
            self.owner
        };
        Self {
            epoch: self.epoch.wrapping_add(1),
            clean_owner,
            state: SLOT_DIRTY,
            changed_ticks: ct_ticks(now_ns),
            ..self
        }
    }

    /// Rule P1: the owner becomes `new_owner` at `now_ns` and the slot is dirty
    /// ([`Self::marked`]). Published whole, in the new table buffer.
    #[inline(always)]
    #[must_use]
    pub fn switched(self, new_owner: u32, now_ns: u64) -> Self {
        Self {
            owner: id16(new_owner),
            ..self.marked(now_ns)
        }
    }

    /// Rules P1, P3, P4 and R2 at a table change: what the new table buffer carries for
    /// a slot that held `self` and is given `owner` at `now_ns`, never pending (a
    /// rollout's switch, or any other change, ends its learn phase). A new owner
    /// switches it.
    /// A dirty slot keeping its owner keeps its state with the epoch bumped, so a
    /// cleaning walk that read it before the change cannot commit (CE5). A clean slot
    /// keeping its owner is copied as it is.
    #[inline(always)]
    #[must_use]
    pub fn republished(self, owner: u32, now_ns: u64) -> Self {
        // Rule R2: a published table ends a rollout's learn phase.
        let this = self.without_pending();
        this.republished_state(owner, now_ns)
    }

    /// [`Self::republished`] of a slot that is not pending.
    #[inline(always)]
    #[must_use]
    fn republished_state(self, owner: u32, now_ns: u64) -> Self {
        if self.owner() != owner {
            self.switched(owner, now_ns)
        } else if self.is_dirty() {
            self.bumped()
        } else {
            self
        }
    }

    /// A slot of a table whose size changed at `now_ns`: its flows come from many old
    /// slots, so it has no clean owner (0) and stays dirty until the cleaning. The
    /// chapter says how the data path treats it.
    #[inline(always)]
    #[must_use]
    pub fn resized(owner: u32, now_ns: u64) -> Self {
        Self {
            owner: id16(owner),
            ..Self::default().marked(now_ns)
        }
        .without_clean_owner()
    }

    /// Rule P1 for one slot of a table being published: slot `slot` of `size` slots,
    /// given `owner` at `now_ns`, when the table in force has the states `live` (`None`
    /// for the VIP's first table). The same size republishes the slot
    /// ([`Self::republished`]); another size has no clean owner ([`Self::resized`]); a
    /// first table starts clean.
    #[must_use]
    pub fn published(
        live: Option<&[SlotState]>,
        size: usize,
        slot: usize,
        owner: u32,
        now_ns: u64,
    ) -> Self {
        match live {
            Some(live) if live.len() == size => {
                live.get(slot).map_or(Self::resized(owner, now_ns), |old| {
                    old.republished(owner, now_ns)
                })
            }
            Some(_) => Self::resized(owner, now_ns),
            None => Self::clean(owner),
        }
    }

    /// The same state with no clean owner.
    #[inline(always)]
    #[must_use]
    fn without_clean_owner(self) -> Self {
        Self {
            clean_owner: 0,
            ..self
        }
    }

    /// Rule P4: the state after the data path pinned a flow, on this dirty slot, to a
    /// backend other than the owner (the XDP program does it with an atomic add).
    #[inline(always)]
    #[must_use]
    pub fn bumped(self) -> Self {
        Self {
            epoch: self.epoch.wrapping_add(1),
            ..self
        }
    }
}

/// The fast path's times, in ns. [`Config::DEFAULT`] holds the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Quiet time: a dirty slot may turn clean this long after its last change
    /// (rule C2). Never below `tcp_idle_ns` (rule C3).
    pub quiet_ns: u64,
    /// The established-TCP idle time: a TCP flow silent longer may lose its backend
    /// at a cleaning (residual R5). A pin not seen for this long blocks no cleaning.
    pub tcp_idle_ns: u64,
    /// The lead: for this long after a slot's change, a new connection's SYN on it
    /// goes to the clean owner if that backend keeps flows (rule P2), so that a SYN
    /// retransmitted across the change reaches the backend its first SYN reached. 0
    /// turns it off.
    pub lead_ns: u64,
    /// A held SYN is live this long after its last SYN (a retransmission refreshes
    /// it): no other SYN overwrites it, and it blocks the cleaning (rule S3).
    pub syn_hold_ns: u64,
    /// The UDP idle timeout ([`crate::types::LbConfig::udp_timeout_ns`]).
    pub udp_timeout_ns: u64,
    /// How long an exception of a TCP connection its client closed stays after its
    /// last packet (rule C7, [`CLOSED_EXCEPTION_LINGER_NS`]).
    pub closed_linger_ns: u64,
}

/// Two hours: Linux's `tcp_keepalive_time`, the longest a TCP connection with
/// keepalives on stays silent.
pub const DEFAULT_TCP_IDLE_NS: u64 = 7_200_000_000_000;
/// Four seconds: a client's first two SYN retransmissions come 1 s and 3 s after its
/// SYN (initial RTO 1 s, RFC 6298 section 2.1, doubled at each retransmission).
pub const DEFAULT_LEAD_NS: u64 = 4_000_000_000;
/// 75 s: above the 63 s over which Linux retransmits a SYN-ACK (`tcp_synack_retries`
/// 5: 1 + 2 + 4 + 8 + 16 + 32 s), so a held SYN outlives the handshake.
pub const DEFAULT_SYN_HOLD_NS: u64 = 75_000_000_000;
impl Config {
    /// The defaults: quiet time and TCP idle time two hours, lead 4 s, SYN hold 75 s,
    /// UDP idle timeout 30 s (the project's `udp_timeout_secs` default), closed
    /// connections' exceptions kept two minutes.
    pub const DEFAULT: Config = Config {
        quiet_ns: DEFAULT_TCP_IDLE_NS,
        tcp_idle_ns: DEFAULT_TCP_IDLE_NS,
        lead_ns: DEFAULT_LEAD_NS,
        syn_hold_ns: DEFAULT_SYN_HOLD_NS,
        udp_timeout_ns: 30_000_000_000,
        closed_linger_ns: CLOSED_EXCEPTION_LINGER_NS,
    };

    /// The quiet time the cleaning uses: `quiet_ns`, raised to `tcp_idle_ns` (rule C3).
    #[inline(always)]
    #[must_use]
    pub fn effective_quiet_ns(&self) -> u64 {
        if self.quiet_ns < self.tcp_idle_ns {
            self.tcp_idle_ns
        } else {
            self.quiet_ns
        }
    }
}

/// Rule F1, the fleet rule: whether a VIP's packets take the fast path. Only when the
/// operator asked for it (`requested`) and either this instance carries the VIP alone
/// (`fleet`: false) or the backends' second chance is on for the VIP. Otherwise the
/// program keeps today's path ([`crate::conntrack::decide`]) for the VIP.
#[inline(always)]
#[must_use]
pub fn enabled(requested: bool, fleet: bool, second_chance: bool) -> bool {
    requested && (!fleet || second_chance)
}

/// A backend's state as the decision sees it ([`crate::types::BackendEntry::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Takes new flows and keeps its pins.
    Active,
    /// No new flows; keeps its pins.
    Draining,
    /// Down, removed or unused: keeps nothing.
    Down,
}

impl Liveness {
    /// Whether the backend keeps its flows (active or draining).
    #[inline(always)]
    #[must_use]
    pub fn keeps_flows(self) -> bool {
        !matches!(self, Liveness::Down)
    }
}

/// The packet, as far as the decision cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// A TCP SYN (SYN set, ACK and RST clear) with its sequence number (wire bytes as a
    /// native `u32`, as [`crate::types::SynEntry::seq`]).
    Syn {
        /// The sequence number.
        seq: u32,
    },
    /// Any other TCP packet; `rst`: a RST, which writes no state.
    Tcp {
        /// The RST flag.
        rst: bool,
    },
    /// A UDP datagram.
    Udp,
}

/// The flow's pin as the decision sees it, from its [`crate::types::CtEntry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinView {
    /// [`crate::types::CtEntry::backend_id`].
    pub backend: u32,
    /// That backend's state; [`Liveness::Down`] too when the pin is of another VIP.
    pub liveness: Liveness,
    /// [`crate::types::CtEntry::stamp_ns`] (ns): UDP, last seen; TCP, when pinned.
    pub stamp_ns: u64,
    /// [`crate::types::CtEntry::isn`]: 0 when pinned without seeing the SYN.
    pub isn: u32,
}

/// The flow's `SYN_CACHE` slot as the decision sees it (in the packet's CPU's part,
/// [`crate::syn_cache::slot_index`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldView {
    /// Empty, freed, torn, or holding a SYN of another VIP.
    Empty,
    /// A whole SYN of this flow ([`crate::types::SynEntry::holds`]).
    Own {
        /// Its backend.
        backend: u32,
        /// That backend's state.
        liveness: Liveness,
        /// Its sequence number.
        seq: u32,
        /// When it was seen (ns).
        syn_ns: u64,
    },
    /// A SYN of another flow, seen at `syn_ns` (ns).
    Other {
        /// When it was seen (ns).
        syn_ns: u64,
    },
}

/// Everything [`decide`] reads: plain values, which the caller looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// The flow's slot.
    pub slot: SlotState,
    /// The packet.
    pub packet: Packet,
    /// The flow's pin; `None` when it has none or the slot is clean (not looked up).
    pub pin: Option<PinView>,
    /// The flow's SYN cache slot ([`HeldView::Empty`] when not read).
    pub held: HeldView,
    /// The slot owner's state.
    pub owner: Liveness,
    /// The clean owner's state ([`Liveness::Down`] when none).
    pub clean_owner: Liveness,
    /// Now (ns).
    pub now_ns: u64,
}

/// Where a pin goes: which map, by whether the miss rule can re-derive it (rule M3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinClass {
    /// A TCP pin naming the clean owner, which the TCP miss rule gives again: the LRU
    /// conntrack map, whose eviction loses nothing.
    Derivable,
    /// Any other pin (another backend, or UDP, whose miss rule changes with time): the
    /// exceptions map, which never evicts a live pin.
    Exception,
}

/// What the caller does when an exception pin finds its map full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFull {
    /// Drop the packet (a SYN: its client retransmits); count [`Note::SynDropped`].
    Drop,
    /// Forward, keep the held SYN, which decides the next packets; count
    /// [`Note::HeldKept`].
    KeepHeld,
    /// Forward unpinned; count [`Note::Unpinned`].
    Forward,
}

impl OnFull {
    /// The give-up the caller counts when the exceptions map refused the pin (residual
    /// R2): [`Note::SynDropped`], [`Note::HeldKept`] or [`Note::Unpinned`].
    #[inline(always)]
    #[must_use]
    pub const fn note(self) -> Note {
        match self {
            OnFull::Drop => Note::SynDropped,
            OnFull::KeepHeld => Note::HeldKept,
            OnFull::Forward => Note::Unpinned,
        }
    }
}

/// Rule M3: the map a new pin of a flow on dirty `slot` naming `backend`, with ISN
/// `isn` ([`crate::types::CtEntry::isn`]: 0 for a pin made without seeing the SYN)
/// goes to. A TCP pin made by a miss (ISN 0) naming the clean owner is
/// [`PinClass::Derivable`] (the LRU conntrack map: the TCP miss rule gives that backend
/// again, so its eviction loses nothing). Every other pin is a [`PinClass::Exception`]
/// (the exceptions map, which never evicts): one naming another backend; every UDP pin
/// (the UDP miss rule changes with time); and a pin made from a SYN (a promoted held
/// SYN, or a SYN pinned at once), even to the clean owner. Such a pin recognises its
/// connection's duplicate SYNs (rule D1), which the miss rule does not cover: evicted,
/// a duplicate SYN would be a new connection's and go to the owner. The decision and
/// the data path route by this one test. A pin on a clean slot (the data path's, when
/// the slot's owner keeps no flows, or a packet that read the slot before the cleaning
/// turned it clean) goes to the LRU as on today's path: the cleaning deletes exceptions
/// only of the slots it cleans.
#[inline(always)]
#[must_use]
pub fn pin_class(slot: &SlotState, udp: bool, backend: u32, isn: u32) -> PinClass {
    let derivable = !udp && isn == 0 && slot.clean_owner != 0 && backend == slot.clean_owner();
    if !slot.is_dirty() || derivable {
        PinClass::Derivable
    } else {
        PinClass::Exception
    }
}

/// [`crate::types::CtEntry::seen_ticks`] of a pin made at a SYN (rule S4) that no later
/// packet of its flow has seen yet: 0, a tick no packet is stamped with (the coarse
/// clock's tick 0 is the first second after boot). The first later packet writes its
/// tick ([`crate::types::CtEntry::seen_ticks`] is rewritten whenever the tick differs).
pub const UNSEEN_TICKS: u32 = 0;

/// Rule S4's expiry: whether a pin made at a SYN (ISN `isn`, stamped `stamp_ns`) that no
/// later packet has seen (`seen_ticks` is [`UNSEEN_TICKS`]) is past the SYN hold at
/// `now_ns`. Its handshake never completed: the server drops a half-open connection
/// before the hold ends (rule S3). The cleaning walk deletes it, so SYNs whose handshake
/// never completes (a SYN flood) cannot fill the exceptions map, which never evicts, for
/// the quiet time.
#[inline(always)]
#[must_use]
pub fn syn_pin_expired(
    cfg: &Config,
    isn: u32,
    stamp_ns: u64,
    seen_ticks: u32,
    now_ns: u64,
) -> bool {
    seen_ticks == UNSEEN_TICKS && isn != 0 && now_ns.wrapping_sub(stamp_ns) > cfg.syn_hold_ns
}

/// The default of [`Config::closed_linger_ns`]: how long an exception of a closed TCP
/// connection (its client sent a FIN or RST) stays after its last packet: two minutes, the maximum segment lifetime of RFC 9293
/// (section 3.4.2). Past it no segment of the connection is left in the network, and
/// the client's `TIME_WAIT` (60 s on Linux) is over.
pub const CLOSED_EXCEPTION_LINGER_NS: u64 = 120_000_000_000;

/// Rule C7: whether the cleaning walk deletes the exception of a TCP connection whose
/// client closed it (`closing` is not [`crate::types::CT_OPEN`]) and that no packet has
/// reached for `cfg`'s [`Config::closed_linger_ns`] (`seen_ns`, [`tcp_pin_seen_ns`]). The
/// exceptions map never evicts: without this, a slot dirty for long would keep one
/// exception per connection closed on it until it turns clean (C5).
#[inline(always)]
#[must_use]
pub fn closed_exception_expired(cfg: &Config, closing: u8, seen_ns: u64, now_ns: u64) -> bool {
    closing != crate::types::CT_OPEN && now_ns.saturating_sub(seen_ns) > cfg.closed_linger_ns
}

/// When a TCP pin was last seen (ns) for rule C1: its `seen_ticks` in ns, or its stamp
/// (when it was made) for a pin made at a SYN that no later packet has seen.
#[inline(always)]
#[must_use]
pub fn tcp_pin_seen_ns(stamp_ns: u64, seen_ticks: u32) -> u64 {
    if seen_ticks == UNSEEN_TICKS {
        stamp_ns
    } else {
        u64::from(seen_ticks) << crate::types::CT_TICK_SHIFT
    }
}

/// A pin for the caller to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinWrite {
    /// The map.
    pub class: PinClass,
    /// Overwrite the flow's pin (it has one that no longer decides).
    pub replace: bool,
    /// [`crate::types::CtEntry::isn`]: the SYN's sequence number, or 0.
    pub isn: u32,
    /// Free the flow's held SYN once the pin is written.
    pub free_held: bool,
    /// Bump the slot's epoch ([`SlotState::bumped`]): the backend is not the owner.
    pub bump_epoch: bool,
    /// What to do when the exceptions map is full.
    pub on_full: OnFull,
}

/// What the caller writes besides forwarding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing.
    Nothing,
    /// Rewrite the UDP pin's `stamp_ns` to now ([`UdpIdle::Refresh`]).
    Stamp,
    /// Hold the SYN in the flow's SYN cache slot (backend, sequence number, now).
    HoldSyn,
    /// Rewrite the held SYN's time (`syn_ns`, and its tag) to now: a retransmission
    /// shows the handshake alive, and the hold (rule S3) counts from the last SYN.
    RefreshHeld,
    /// Write a pin.
    Pin(PinWrite),
}

/// Which rule chose the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// T1: a clean slot, the table alone.
    CleanSlot,
    /// D1: the flow's pin holds.
    Pin,
    /// D1: a duplicate SYN of the pinned connection.
    PinDuplicateSyn,
    /// D2: the pin's backend keeps no flows, and neither does the clean owner:
    /// re-picked to the owner (a stale pin otherwise falls to M1).
    Repick,
    /// S1: a retransmitted SYN follows its held SYN.
    HeldRetransmit,
    /// S2, D3: the handshake completes (or a new connection replaces a pin).
    HeldPromote,
    /// S3: a new connection's SYN goes to the owner, held; or pinned at the SYN
    /// ([`Write::Pin`]) when its SYN cache slot holds another live SYN (S4: the caller
    /// counts `fp_syn_pinned`).
    SynToOwner,
    /// P2 and S3: a new connection's SYN within the lead of its slot's change goes to
    /// the clean owner, held (or pinned at the SYN, as [`By::SynToOwner`]).
    SynToCleanOwner,
    /// M1: a non-SYN TCP miss, or a UDP miss within the idle timeout of the change
    /// (a stale or expired pin counts as a miss), goes to the clean owner.
    MissToCleanOwner,
    /// M2: a miss whose clean owner keeps no flows, or a UDP miss after the idle
    /// timeout of the change: the owner.
    MissToOwner,
}

/// A counter the decision asks the caller to increment: an event the book names, most
/// of them a residual's count (see the chapter's "Residuals").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// `fp_syn_maybe_split` (R1): a SYN took the owner of a slot whose owner switched
    /// less than [`DUPLICATE_SYN_WINDOW_NS`] ago, with no pin or held SYN of its own; it
    /// may retransmit (or duplicate) a SYN the clean owner got before the switch.
    SynMaybeSplit,
    /// `fp_syn_over_pin` (R1): a SYN took the owner over a pin made without a SYN (ISN
    /// 0, a miss's pin); it may duplicate that connection's SYN, or open a new one.
    SynOverPin,
    /// `fp_syn_dropped` (R2): the exceptions map was full too; the SYN was dropped.
    SynDropped,
    /// `fp_held_kept` (R2): the exceptions map was full at the handshake's ACK; the held
    /// SYN decides until it is overwritten.
    HeldKept,
    /// `fp_unpinned` (R2): the exceptions map was full for a miss's pin.
    Unpinned,
    /// `fp_udp_drained_clean_owner` (R3): a UDP miss went to a draining clean owner
    /// (within the idle timeout of the change; it may be a new flow).
    UdpToDraining,
    /// `fp_syn_drained_owner` (R3): a new connection went to a draining owner: the
    /// slot is in its lead (rule P2), and the owner's drain switches it at its end.
    SynToDraining,
    /// `fp_repicked` (D2): a TCP pin whose backend keeps no flows was re-picked
    /// (today's `ct_stale_repicked`).
    Repicked,
}

/// Number of [`Note`]s that count a give-up ([`Note::give_up`]): the length of
/// [`crate::stats::VipStats::fp_give_ups`].
pub const GIVE_UP_COUNT: usize = 7;

impl Note {
    /// The notes that count a give-up of the chapter's residuals R1-R3, in the order of
    /// [`crate::stats::VipStats::fp_give_ups`] ([`Note::give_up`] is the index).
    pub const GIVE_UPS: [Note; GIVE_UP_COUNT] = [
        Note::SynMaybeSplit,
        Note::SynOverPin,
        Note::SynDropped,
        Note::HeldKept,
        Note::Unpinned,
        Note::SynToDraining,
        Note::UdpToDraining,
    ];

    /// The note's index in [`crate::stats::VipStats::fp_give_ups`]; `None` for
    /// [`Note::Repicked`], which today's `ct_stale_repicked` counts.
    #[must_use]
    pub const fn give_up(self) -> Option<usize> {
        match self {
            Note::SynMaybeSplit => Some(0),
            Note::SynOverPin => Some(1),
            Note::SynDropped => Some(2),
            Note::HeldKept => Some(3),
            Note::Unpinned => Some(4),
            Note::SynToDraining => Some(5),
            Note::UdpToDraining => Some(6),
            Note::Repicked => None,
        }
    }

    /// The residual of the chapter's table the note counts (`R1`-`R3`); `None` for
    /// [`Note::Repicked`].
    #[must_use]
    pub const fn residual(self) -> Option<&'static str> {
        match self {
            Note::SynMaybeSplit | Note::SynOverPin => Some("R1"),
            Note::SynDropped | Note::HeldKept | Note::Unpinned => Some("R2"),
            Note::SynToDraining | Note::UdpToDraining => Some("R3"),
            Note::Repicked => None,
        }
    }

    /// The counter's name.
    #[must_use]
    pub fn counter(self) -> &'static str {
        match self {
            Note::SynMaybeSplit => "fp_syn_maybe_split",
            Note::SynOverPin => "fp_syn_over_pin",
            Note::SynDropped => "fp_syn_dropped",
            Note::HeldKept => "fp_held_kept",
            Note::Unpinned => "fp_unpinned",
            Note::UdpToDraining => "fp_udp_drained_clean_owner",
            Note::SynToDraining => "fp_syn_drained_owner",
            Note::Repicked => "fp_repicked",
        }
    }
}

/// Why [`decide`] gives up on a packet (the caller drops it and counts the reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// The rule's backend is none or keeps no flows: today's `drop_no_backend`.
    NoBackend,
}

/// The decision for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Forward to `backend`, write `write`, count `note`.
    Forward {
        /// The backend id.
        backend: u32,
        /// The rule.
        by: By,
        /// What to write.
        write: Write,
        /// What to count.
        note: Option<Note>,
    },
    /// Drop the packet.
    GiveUp(GiveUp),
}

/// Forward by rule `by` with `write`, nothing counted.
#[inline(always)]
fn forward(backend: u32, by: By, write: Write) -> Outcome {
    Outcome::Forward {
        backend,
        by,
        write,
        note: None,
    }
}

/// Adds `note` to a forwarding outcome.
#[inline(always)]
fn noted(outcome: Outcome, note: Note) -> Outcome {
    match outcome {
        Outcome::Forward {
            backend, by, write, ..
        } => Outcome::Forward {
            backend,
            by,
            write,
            note: Some(note),
        },
        give_up => give_up,
    }
}

/// Decides a packet of a VIP whose fast path is on ([`enabled`]). See the chapter's
/// rules: T1 (clean slot), D1-D3 (pins), S1-S4 (SYNs), M1-M3 (misses).
///
/// On a clean slot it reads nothing but the slot: the caller passes no pin and an
/// empty held view, and looks neither up. Total: every input gives an outcome.
#[inline(always)]
#[must_use]
pub fn decide(cfg: &Config, inp: &Inputs) -> Outcome {
    if !inp.slot.is_dirty() {
        return to_owner(inp, By::CleanSlot, Write::Nothing);
    }
    match inp.packet {
        Packet::Syn { seq } => decide_syn(cfg, inp, seq),
        Packet::Tcp { rst } => decide_tcp(inp, rst),
        Packet::Udp => decide_udp(cfg, inp),
    }
}

/// Forward to the owner by rule `by`, or give up when it keeps no flows. A clean slot's
/// owner comes from the live table, which names no backend that is down.
#[inline(always)]
fn to_owner(inp: &Inputs, by: By, write: Write) -> Outcome {
    let owner = inp.slot.owner();
    if owner == 0 || (inp.slot.is_dirty() && !inp.owner.keeps_flows()) {
        return Outcome::GiveUp(GiveUp::NoBackend);
    }
    forward(owner, by, write)
}

/// Whether the flow's pin holds (rule D1): its backend keeps flows and, for UDP, it is
/// not idle past the timeout. `Some(refresh)` when it holds.
#[inline(always)]
fn pin_holds(cfg: &Config, inp: &Inputs, pin: &PinView) -> Option<bool> {
    if !pin.liveness.keeps_flows() {
        return None;
    }
    if inp.packet != Packet::Udp {
        return Some(false);
    }
    match udp_idle(pin.stamp_ns, inp.now_ns, cfg.udp_timeout_ns) {
        UdpIdle::Fresh => Some(false),
        UdpIdle::Refresh => Some(true),
        UdpIdle::Expired => None,
    }
}

/// The pin to write for a flow sent to `backend` on a dirty slot (rule M3: derivable
/// only when it names the clean owner and is TCP), with
/// `isn`, `replace`, `free_held`, and `on_full` for the exceptions map.
#[inline(always)]
fn pin_to(inp: &Inputs, backend: u32, replace: bool, isn: u32, on_full: OnFull) -> Write {
    let class = pin_class(&inp.slot, inp.packet == Packet::Udp, backend, isn);
    Write::Pin(PinWrite {
        class,
        replace,
        isn,
        free_held: matches!(inp.held, HeldView::Own { .. }),
        bump_epoch: backend != inp.slot.owner(),
        on_full,
    })
}

/// Rules S1-S4: a TCP SYN with sequence number `seq` on a dirty slot.
#[inline(always)]
fn decide_syn(cfg: &Config, inp: &Inputs, seq: u32) -> Outcome {
    if let Some(pin) = inp.pin
        && pin.isn != 0
        && pin.isn == seq
        && pin.liveness.keeps_flows()
    {
        return forward(pin.backend, By::PinDuplicateSyn, Write::Nothing);
    }
    let other_live = match inp.held {
        HeldView::Own {
            backend,
            liveness,
            seq: held_seq,
            ..
        } if held_seq == seq && liveness.keeps_flows() => {
            return forward(backend, By::HeldRetransmit, Write::RefreshHeld);
        }
        HeldView::Other { syn_ns } => inp.now_ns.wrapping_sub(syn_ns) <= cfg.syn_hold_ns,
        HeldView::Own { .. } | HeldView::Empty => false,
    };
    let lead = in_lead(&inp.slot, inp.clean_owner, inp.now_ns, cfg.lead_ns);
    let (backend, liveness, by) = if lead {
        (inp.slot.clean_owner(), inp.clean_owner, By::SynToCleanOwner)
    } else {
        (inp.slot.owner(), inp.owner, By::SynToOwner)
    };
    if backend == 0 || !liveness.keeps_flows() {
        return Outcome::GiveUp(GiveUp::NoBackend);
    }
    let write = if other_live {
        pin_to(inp, backend, inp.pin.is_some(), seq, OnFull::Drop)
    } else {
        Write::HoldSyn
    };
    let outcome = forward(backend, by, write);
    if let Some(pin) = inp.pin
        && pin.isn == 0
        && pin.liveness.keeps_flows()
    {
        return noted(outcome, Note::SynOverPin);
    }
    match syn_give_up(&inp.slot, inp.clean_owner, backend, inp.now_ns) {
        Some(note) => noted(outcome, note),
        None => outcome,
    }
}

/// The give-up a new connection's SYN counts (no pin or held SYN of its own decided),
/// sent to `backend` on `slot`, whose clean owner's state is `clean_owner`:
/// [`Note::SynToDraining`] (R3) when it went to a draining clean owner within the lead
/// (rule P2: `backend` is the clean owner, not the owner);
/// [`Note::SynMaybeSplit`] (R1) when it went to the owner and [`syn_maybe_split`]
/// holds. Nothing on a clean slot (rule T1). The decision and the data path count by
/// this one test.
#[inline(always)]
#[must_use]
pub fn syn_give_up(
    slot: &SlotState,
    clean_owner: Liveness,
    backend: u32,
    now_ns: u64,
) -> Option<Note> {
    if !slot.is_dirty() {
        return None;
    }
    if backend != slot.owner() {
        return (clean_owner == Liveness::Draining).then_some(Note::SynToDraining);
    }
    syn_maybe_split(slot, clean_owner, now_ns).then_some(Note::SynMaybeSplit)
}

/// The give-up a UDP miss counts (rule M1), sent to `backend` on a dirty `slot` whose
/// clean owner's state is `clean_owner`: [`Note::UdpToDraining`] (R3) when it went to
/// the clean owner and that backend is draining (it may be a new flow).
#[inline(always)]
#[must_use]
pub fn udp_give_up(slot: &SlotState, clean_owner: Liveness, backend: u32) -> Option<Note> {
    (slot.is_dirty() && backend == slot.clean_owner() && clean_owner == Liveness::Draining)
        .then_some(Note::UdpToDraining)
}

/// Rule P2 (the lead): whether a new connection's SYN on `slot` at `now_ns` goes to
/// the clean owner: the slot is dirty, changed less than `lead_ns` ago (rounded up to
/// a tick), and its clean owner is another backend than the owner and keeps flows.
#[inline(always)]
fn in_lead(slot: &SlotState, clean_owner: Liveness, now_ns: u64, lead_ns: u64) -> bool {
    lead_ns > 0
        && slot.is_dirty()
        && slot.clean_owner != 0
        && slot.clean_owner != slot.owner
        && clean_owner.keeps_flows()
        && within_ticks(slot.changed_ticks, now_ns, lead_ns)
}

/// Rules P2 and S3 as the data path applies them to a new connection's SYN on a
/// fast-path VIP's slot (no pin or held SYN of its own decides): within the lead of a
/// dirty slot's change, its clean owner when that backend keeps flows (`clean_owner`);
/// otherwise the owner. Returns the backend id (0: none).
#[inline(always)]
#[must_use]
pub fn syn_backend(slot: &SlotState, clean_owner: Liveness, now_ns: u64, lead_ns: u64) -> u32 {
    if in_lead(slot, clean_owner, now_ns, lead_ns) {
        slot.clean_owner()
    } else {
        slot.owner()
    }
}

/// Rule S4 as the data path applies it: whether a new connection's SYN sent to
/// `backend` on a fast-path VIP's slot is pinned at once rather than held in the SYN
/// cache. It is when the slot is dirty and a miss would take another backend
/// ([`miss_backend`] for TCP): should another SYN overwrite the held one, the
/// handshake's ACK would go there. The SYN cache is shared with today's VIPs, whose
/// SYNs overwrite, so the data path cannot keep a held SYN as S4 asks. A clean owner
/// that keeps no flows now counts as one that does (`_clean_owner` is not read): it may
/// come back (a flap) while the handshake is open, and the miss rule then takes it,
/// while the held SYN may be gone (freed when its own backend was down for a packet).
#[inline(always)]
#[must_use]
pub fn syn_needs_pin(slot: &SlotState, _clean_owner: Liveness, backend: u32) -> bool {
    slot.is_dirty() && miss_backend(slot, false, Liveness::Active, 0, 0) != backend
}

/// Residual R1's test: the owner switched less than [`DUPLICATE_SYN_WINDOW_NS`] ago
/// (today's window for duplicate SYNs: retransmissions and network duplicates) away
/// from a clean owner that still keeps flows, so a SYN without state may repeat one the
/// clean owner got. `clean_owner` is the clean owner's state.
#[inline(always)]
#[must_use]
pub fn syn_maybe_split(slot: &SlotState, clean_owner: Liveness, now_ns: u64) -> bool {
    slot.owner != slot.clean_owner
        && clean_owner.keeps_flows()
        && within_ticks(slot.changed_ticks, now_ns, DUPLICATE_SYN_WINDOW_NS)
}

/// Whether `now_ns` is at most `span_ns` after the time `ticks` ([`ct_ticks`]),
/// rounded up by one tick (a tick truncates up to 2^30 ns).
#[inline(always)]
fn within_ticks(ticks: u32, now_ns: u64, span_ns: u64) -> bool {
    let elapsed = ct_ticks(now_ns).wrapping_sub(ticks);
    u64::from(elapsed) <= (span_ns >> crate::types::CT_TICK_SHIFT) + 1
}

/// Rules D1-D3 and M1-M3: a TCP packet other than a SYN on a dirty slot.
#[inline(always)]
fn decide_tcp(inp: &Inputs, rst: bool) -> Outcome {
    let held = match inp.held {
        HeldView::Own {
            backend,
            liveness,
            seq,
            syn_ns,
        } if liveness.keeps_flows() => Some((backend, seq, syn_ns)),
        _ => None,
    };
    if let Some(pin) = inp.pin
        && pin.liveness.keeps_flows()
    {
        // D3: a SYN held since the pin was made, with another ISN, opened a new
        // connection on the 4-tuple (crate::conntrack's rule 2).
        if let Some((backend, seq, syn_ns)) = held
            && syn_ns >= pin.stamp_ns
            && seq != pin.isn
        {
            return promote(inp, backend, seq, rst, true);
        }
        return forward(pin.backend, By::Pin, Write::Nothing);
    }
    let replace = inp.pin.is_some();
    if let Some((backend, seq, _)) = held {
        return promote(inp, backend, seq, rst, replace);
    }
    // D2: a stale pin tells nothing (the flow may have gone on while the slot was
    // clean): the miss rule decides, and the owner stands in for a clean owner that
    // keeps no flows, as today's re-pick takes the table.
    let by = if replace { By::Repick } else { By::MissToOwner };
    let outcome = miss(inp, rst, replace, true, by);
    if replace {
        return noted(outcome, Note::Repicked);
    }
    outcome
}

/// Rules S2 and D3: the held SYN's backend decides and becomes the flow's pin (none for
/// a RST); on a full exceptions map the held SYN stays and decides.
#[inline(always)]
fn promote(inp: &Inputs, backend: u32, seq: u32, rst: bool, replace: bool) -> Outcome {
    let write = if rst {
        Write::Nothing
    } else {
        pin_to(inp, backend, replace, seq, OnFull::KeepHeld)
    };
    forward(backend, By::HeldPromote, write)
}

/// Rules M1 and M2 for a miss (or a pin that no longer decides, `replace`): the clean
/// owner when `to_clean` and it keeps flows, else the owner by rule `otherwise`, pinned
/// (no pin for a RST).
#[inline(always)]
fn miss(inp: &Inputs, rst: bool, replace: bool, to_clean: bool, otherwise: By) -> Outcome {
    let (backend, by) = if to_clean && inp.clean_owner.keeps_flows() {
        (inp.slot.clean_owner(), By::MissToCleanOwner)
    } else {
        (inp.slot.owner(), otherwise)
    };
    if by != By::MissToCleanOwner && !inp.owner.keeps_flows() {
        return Outcome::GiveUp(GiveUp::NoBackend);
    }
    let write = if rst {
        Write::Nothing
    } else {
        pin_to(inp, backend, replace, 0, OnFull::Forward)
    };
    forward(backend, by, write)
}

/// Rules D1, D2, M1 and M2 for UDP on a dirty slot: a pin that holds decides; a miss
/// (or an expired or stale pin) within the idle timeout of the change goes to the clean
/// owner, a later one (a new flow, or one today's pin would have lost) to the owner.
#[inline(always)]
fn decide_udp(cfg: &Config, inp: &Inputs) -> Outcome {
    if let Some(pin) = inp.pin
        && let Some(refresh) = pin_holds(cfg, inp, &pin)
    {
        let write = if refresh {
            Write::Stamp
        } else {
            Write::Nothing
        };
        return forward(pin.backend, By::Pin, write);
    }
    // An expired or stale pin tells nothing (its flow may have gone on, unrefreshed,
    // while the slot was clean): the miss rule decides.
    let replace = inp.pin.is_some();
    let recent = within_ticks(inp.slot.changed_ticks, inp.now_ns, cfg.udp_timeout_ns);
    let outcome = miss(inp, false, replace, recent, By::MissToOwner);
    if let Outcome::Forward {
        by: By::MissToCleanOwner,
        backend,
        ..
    } = outcome
        && let Some(note) = udp_give_up(&inp.slot, inp.clean_owner, backend)
    {
        return noted(outcome, note);
    }
    outcome
}

/// Rules M1 and M2 as the data path applies them to a miss on a fast-path VIP's slot
/// (no pin that holds, no held SYN of the flow; a stale or expired pin counts as a
/// miss): on a dirty slot, the clean owner when it keeps flows (`clean_owner`), a UDP
/// flow only within the UDP idle timeout of the slot's last change; otherwise, and on a
/// clean slot, the owner. Returns the backend id (0: none).
#[inline(always)]
#[must_use]
pub fn miss_backend(
    slot: &SlotState,
    udp: bool,
    clean_owner: Liveness,
    now_ns: u64,
    udp_timeout_ns: u64,
) -> u32 {
    let to_clean = slot.is_dirty()
        && slot.clean_owner != 0
        && clean_owner.keeps_flows()
        && (!udp || within_ticks(slot.changed_ticks, now_ns, udp_timeout_ns));
    if to_clean {
        slot.clean_owner()
    } else {
        slot.owner()
    }
}

/// What the cleaning walk found for one slot ([`clean_check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanCheck {
    /// The slot is clean already.
    Clean,
    /// Its last change is younger than the quiet time (rule C2).
    Recent,
    /// A live pin or held SYN on it names another backend than the owner (rule C1).
    Foreign,
    /// It may turn clean: commit with [`clean_commit`] against this epoch, read before
    /// the walk looked at the pins (rule C4).
    Candidate {
        /// The slot epoch read.
        epoch: u32,
    },
}

/// Rules C1-C3: whether dirty `slot` may turn clean at `now_ns`; `foreign`: the walk,
/// after reading `slot`, found a pin ([`pin_blocks_cleaning`]) or held SYN
/// ([`held_blocks_cleaning`]) of the slot's flows that blocks it.
#[inline(always)]
#[must_use]
pub fn clean_check(cfg: &Config, slot: &SlotState, now_ns: u64, foreign: bool) -> CleanCheck {
    if !slot.is_dirty() {
        return CleanCheck::Clean;
    }
    let quiet_ticks = cfg.effective_quiet_ns() >> crate::types::CT_TICK_SHIFT;
    // One tick more than the quiet time: the stamp truncates up to one tick.
    let elapsed = ct_ticks(now_ns).wrapping_sub(slot.changed_ticks);
    if u64::from(elapsed) <= quiet_ticks + 1 {
        return CleanCheck::Recent;
    }
    if foreign {
        return CleanCheck::Foreign;
    }
    CleanCheck::Candidate { epoch: slot.epoch }
}

/// Rule C4: the commit of a candidate read with epoch `epoch`, given the slot's state
/// now: the clean state to compare-and-swap in (state word only), or `None` when the
/// epoch moved (a change, or a foreign pin made since the read), and the walk aborts.
/// Across instances (rule F2) the commit is two-phase; see the chapter.
#[inline(always)]
#[must_use]
pub fn clean_commit(now: &SlotState, epoch: u32) -> Option<SlotState> {
    if !now.is_dirty() || now.epoch != epoch {
        return None;
    }
    Some(SlotState {
        epoch: epoch.wrapping_add(1),
        clean_owner: now.owner,
        state: SLOT_CLEAN,
        ..*now
    })
}

/// Rule C1 for a pin of a flow on `slot`: whether it blocks the cleaning. It does when
/// it names another backend than the owner and it is live: a UDP pin within the idle
/// timeout, a TCP pin seen within the TCP idle time (`seen_ns`, from
/// [`crate::types::CtEntry::seen_ticks`]). Its backend's health does not matter: one
/// down now may come back within the idle time (a flap) and keep the flow.
#[inline(always)]
#[must_use]
pub fn pin_blocks_cleaning(
    cfg: &Config,
    slot: &SlotState,
    pin: &PinView,
    udp: bool,
    seen_ns: u64,
    now_ns: u64,
) -> bool {
    pin.backend != slot.owner() && pin_live(cfg, udp, seen_ns, now_ns)
}

/// Whether a pin last seen at `seen_ns` is live at `now_ns` (rule C1): a UDP pin within
/// the UDP idle timeout, a TCP pin within the TCP idle time.
#[inline(always)]
#[must_use]
pub fn pin_live(cfg: &Config, udp: bool, seen_ns: u64, now_ns: u64) -> bool {
    let idle_ns = if udp {
        cfg.udp_timeout_ns
    } else {
        cfg.tcp_idle_ns
    };
    now_ns.wrapping_sub(seen_ns) <= idle_ns
}

/// Rule C1 for a held SYN (`held`) of a flow on `slot`: it blocks the cleaning while
/// live (within the SYN hold time) and naming another backend than the owner, whatever
/// that backend's health.
#[inline(always)]
#[must_use]
pub fn held_blocks_cleaning(cfg: &Config, slot: &SlotState, held: &HeldView, now_ns: u64) -> bool {
    match *held {
        HeldView::Own {
            backend, syn_ns, ..
        } => backend != slot.owner() && now_ns.wrapping_sub(syn_ns) <= cfg.syn_hold_ns,
        HeldView::Empty | HeldView::Other { .. } => false,
    }
}

/// Rule C5: whether the walk deletes, once `slot` turned clean, a pin of one of its
/// flows naming `backend` and made before the commit. It does when the pin names another
/// backend than the owner: by C1 no such pin was live, and left in place it would decide
/// for a new connection on its 4-tuple once the slot turns dirty again.
#[inline(always)]
#[must_use]
pub fn pin_outlived_cleaning(slot: &SlotState, backend: u32) -> bool {
    !slot.is_dirty() && backend != slot.owner()
}

/// Rule C5 for the exceptions map: whether the walk deletes, once `slot` turned clean,
/// an exception of one of its flows made before the commit. It deletes every one: one
/// naming another backend as [`pin_outlived_cleaning`]; one naming the owner (a SYN
/// pinned at the owner by rule S4) is never read on a clean slot (rule T1), and the
/// exceptions map, which never evicts, would keep it for good.
#[inline(always)]
#[must_use]
pub fn exception_outlived_cleaning(slot: &SlotState) -> bool {
    !slot.is_dirty()
}
