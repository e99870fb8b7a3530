// SPDX-License-Identifier: MIT OR Apache-2.0
//! The model both designs run in: instances with a Maglev table of a few slots, an LRU
//! conntrack, the fast path's exceptions map, a `SYN_CACHE` array and the slot states;
//! backends with sockets; flows. The decisions are lb-common's: today's
//! (`conntrack::decide`, `conntrack::decide_syn`) and the fast path's
//! (`fastpath::decide`, the cleaning functions). The model only carries them out.

use std::{borrow::Borrow, collections::BTreeMap, collections::VecDeque};

use lb_common::{
    conntrack::{self, DUPLICATE_SYN_WINDOW_NS, Decision, Lookups, PinLookups, SynDecision},
    fastpath::{
        self, By, CleanCheck, HeldView, Inputs, Liveness, Note, OnFull, Outcome, Packet, PinClass,
        PinView, PinWrite, SlotState, Write,
    },
    hash::flow_hash,
    maps::MAX_VIPS,
    stats::VipStats,
    types::{
        CT_OPEN, CtEntry, FAMILY_V4, FlowKey, LbConfig, PROTO_TCP, PROTO_UDP, SynEntry, VipEntry,
        VipKey, ct_ticks,
    },
};

/// The hash seed of the model's flows.
pub(crate) const SEED: u32 = 0x5eed;
/// The model's only VIP.
const VIP_ID: u32 = 1;
/// A freed SYN cache slot's VIP id (as lb-ebpf's `SYN_SLOT_FREE`).
const SYN_FREE: u16 = {
    assert!(MAX_VIPS < 1 << 16);
    #[expect(clippy::cast_possible_truncation, reason = "asserted above")]
    let free = MAX_VIPS as u16;
    free
};
/// Backends: ids 1..=3.
pub(crate) const A: u32 = 1;
/// Backend C.
pub(crate) const C: u32 = 2;
/// Backend D.
pub(crate) const D: u32 = 3;
/// One millisecond (ns).
pub(crate) const MS: u64 = 1_000_000;
/// One second (ns).
pub(crate) const S: u64 = 1_000 * MS;
/// The model clock's origin: events at time t happen at `T0 + t`.
const T0: u64 = 10_000 * S;

/// Which design a world runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Design {
    /// Every packet looks conntrack up; every flow is pinned (today's lb).
    Today,
    /// The fast path (issue 30), where the fleet rule allows it, else today's.
    Fast,
    /// The fast path even in a fleet (to show why the fleet rule exists).
    FastForced,
    /// The fast path as lb-ebpf runs it (`lb-ebpf/src/fast.rs`): a clean slot forwards
    /// to its owner; on a dirty slot today's decisions run, with a miss and a new SYN
    /// picked by `fastpath::miss_backend` and `syn_backend`, the exceptions map read
    /// first, and each pin written to the LRU or the exceptions map by rule M3
    /// (`fastpath::pin_class`). Where the fleet rule allows it, else today's.
    Shipped,
}

/// How a packet that no pin or held SYN decides picks its backend.
#[derive(Clone, Copy)]
enum Pick {
    /// A new connection's SYN.
    Syn,
    /// Any other packet.
    Miss { udp: bool },
}

/// An event of a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ev {
    /// A TCP SYN of flow `0` (its ISN is fixed per flow).
    Syn(usize),
    /// Any other packet of flow `0`: a TCP ACK or data segment, or a UDP datagram.
    Seg(usize),
    /// The control plane publishes these owners, one per slot, on every instance.
    Tab(Vec<u32>),
    /// Backend `0` changes state (the table is published separately).
    State(u32, Liveness),
    /// A cleaning walk on instance `inst`, committing `delay_ms` after its read.
    Walk {
        /// The instance.
        inst: usize,
        /// Read to commit (ms).
        delay_ms: u64,
    },
    /// ECMP moves flow `0` to instance `1`.
    Move(usize, usize),
    /// The daemon of instance `0` restarts; the pinned datapath (maps) stays.
    Restart(usize),
    /// Internal: a non-atomic write's state word lands (instance, slot, slot before,
    /// new owner).
    MarkDirty(usize, usize, SlotState, u32),
    /// Internal: a walk commits (instance, generation, candidates).
    Commit(usize, u32, Vec<(usize, u32)>),
}

/// The knobs of one run.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    /// Slots per table.
    pub(crate) m: usize,
    /// Instances.
    pub(crate) ninst: usize,
    /// LRU conntrack capacity (both designs).
    pub(crate) lru_cap: usize,
    /// Exceptions map capacity (fast path).
    pub(crate) exc_cap: usize,
    /// SYN cache slots (a power of two).
    pub(crate) syn_slots: usize,
    /// A change publishes owner and state at once (rule P1), or the owner 1 ms first.
    pub(crate) atomic: bool,
    /// The fast path's times.
    pub(crate) cfg: fastpath::Config,
    /// The initial owners, one per slot.
    pub(crate) owners: Vec<u32>,
    /// Initial states of A, C, D.
    pub(crate) states: [Liveness; 3],
    /// Flows: (UDP, slot, instance).
    pub(crate) flows: Vec<(bool, usize, usize)>,
}

impl Setup {
    /// The simulation's micro setup: one slot owned by A, one instance, Q = 100 s,
    /// lead 3 s, UDP timeout 60 s.
    pub(crate) fn micro(flows: usize) -> Setup {
        Setup {
            m: 1,
            ninst: 1,
            lru_cap: 1_000,
            exc_cap: 1_000,
            syn_slots: 1_024,
            atomic: true,
            cfg: fastpath::Config {
                quiet_ns: 100 * S,
                tcp_idle_ns: 100 * S,
                lead_ns: 3 * S,
                syn_hold_ns: 75 * S,
                udp_timeout_ns: 60 * S,
                closed_linger_ns: fastpath::CLOSED_EXCEPTION_LINGER_NS,
            },
            owners: vec![A],
            states: [Liveness::Active; 3],
            flows: vec![(false, 0, 0); flows],
        }
    }
}

/// How long a server keeps a half-open TCP connection (ns): Linux retransmits its
/// SYN-ACK for 63 s (`tcp_synack_retries` 5: 1 + 2 + 4 + 8 + 16 + 32 s).
const HALF_OPEN_NS: u64 = 63 * S;

/// Why a broken flow may break under the fast path (a documented residual).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Residual {
    /// A counted one: the decision's note for one of the flow's packets.
    Counted(Note),
    /// R5: the flow was once silent longer than the TCP idle time (not counted by the
    /// LB), and its slot could be cleaned meanwhile (even while it resumed during the
    /// walk).
    Idle,
}

impl Residual {
    /// Whether it is one of the chapter's residuals (R1-R5); `fp_repicked` counts an
    /// event that breaks nothing.
    pub(crate) fn documented(self) -> bool {
        !matches!(self, Residual::Counted(Note::Repicked))
    }
}

/// A flow's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Every packet reached its socket.
    Kept,
    /// A packet reached a backend without its socket, while the socket's was up.
    Broken,
    /// Its socket's backend went down (no design keeps it).
    Excluded,
}

/// A flow.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    key: FlowKey,
    udp: bool,
    inst: usize,
    isn: u32,
    /// The backend holding its socket.
    pub(crate) sock: Option<u32>,
    /// Its fate so far.
    pub(crate) fate: Fate,
    last_ns: Option<u64>,
    /// It was once silent longer than the TCP idle time (residual R5 may break it).
    silent: bool,
    /// When its handshake's first SYN came, while the handshake is open (no other
    /// packet yet).
    syn_ns: Option<u64>,
    /// When a backend last received one of its packets (a dropped packet refreshes
    /// no pin and no socket).
    delivered_ns: Option<u64>,
    /// The residuals its packets were counted under.
    pub(crate) residuals: Vec<Residual>,
    /// Where its packets went.
    pub(crate) trail: Vec<u32>,
}

/// An LRU hash map: front is least recently used.
#[derive(Clone, Debug, Default)]
struct Lru {
    cap: usize,
    entries: VecDeque<(FlowKey, CtEntry)>,
}

impl Lru {
    fn position(&self, key: &FlowKey) -> Option<usize> {
        self.entries.iter().position(|(k, _)| k == key)
    }

    /// Looks `key` up and marks it most recently used.
    fn get(&mut self, key: &FlowKey) -> Option<&mut CtEntry> {
        let at = self.position(key)?;
        let hit = self.entries.remove(at)?;
        self.entries.push_back(hit);
        self.entries.back_mut().map(|(_, e)| e)
    }

    /// Inserts (or replaces) `key`, evicting the least recently used entry when full;
    /// returns the evicted entry's key.
    fn insert(&mut self, key: FlowKey, entry: CtEntry) -> Option<FlowKey> {
        self.remove(&key);
        let evicted = if self.entries.len() >= self.cap {
            self.entries.pop_front().map(|(k, _)| k)
        } else {
            None
        };
        if self.cap > 0 {
            self.entries.push_back((key, entry));
        }
        evicted
    }

    fn remove(&mut self, key: &FlowKey) {
        if let Some(at) = self.position(key) {
            self.entries.remove(at);
        }
    }
}

/// The exceptions map: a hash map that refuses inserts when full (never evicts).
#[derive(Clone, Debug, Default)]
struct Exceptions {
    cap: usize,
    entries: Vec<(FlowKey, CtEntry)>,
}

impl Exceptions {
    fn get(&mut self, key: &FlowKey) -> Option<&mut CtEntry> {
        self.entries
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, e)| e)
    }

    fn insert(&mut self, key: FlowKey, entry: CtEntry) -> bool {
        if let Some(e) = self.get(&key) {
            *e = entry;
            return true;
        }
        if self.entries.len() >= self.cap {
            return false;
        }
        self.entries.push((key, entry));
        true
    }

    fn remove(&mut self, key: &FlowKey) {
        self.entries.retain(|(k, _)| k != key);
    }
}

/// One load-balancer instance.
#[derive(Clone, Debug)]
struct Inst {
    /// Today: the live table and its epoch, and when it last changed.
    owners: Vec<u32>,
    epoch: u32,
    changed_ns: u64,
    /// Fast path: the slots.
    slots: Vec<SlotState>,
    walk_gen: u32,
    lru: Lru,
    exc: Exceptions,
    syn: Vec<SynEntry>,
}

impl Inst {
    /// Today's VIP entry and what today's decision reads of this instance at `now`.
    fn today_view<'a>(&'a self, states: &'a [Liveness; 3], now: u64) -> (VipEntry, View<'a>) {
        let vip = VipEntry {
            vip_id: VIP_ID,
            flags: 0,
            epoch: self.epoch,
        };
        let view = View {
            states,
            syn: &self.syn,
            owners: &self.owners,
            now,
        };
        (vip, view)
    }
}

/// A SYN cache slot as today's decision holds it: its index and a copy.
struct SlotRef {
    index: usize,
    entry: SynEntry,
}

impl Borrow<SynEntry> for SlotRef {
    fn borrow(&self) -> &SynEntry {
        &self.entry
    }
}

/// What today's decision reads.
struct View<'a> {
    states: &'a [Liveness; 3],
    syn: &'a [SynEntry],
    owners: &'a [u32],
    now: u64,
}

/// A backend's state (id 0 or unknown: down).
fn liveness(states: &[Liveness; 3], id: u32) -> Liveness {
    usize::try_from(id)
        .ok()
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| states.get(i).copied())
        .unwrap_or(Liveness::Down)
}

/// The slot index of hash `hash` among `len` (the model's tables and caches are tiny).
fn index(hash: u32, len: usize) -> usize {
    usize::try_from(hash).expect("usize holds u32") % len
}

impl PinLookups for View<'_> {
    type Backend = u32;

    fn now_ns(&mut self) -> u64 {
        self.now
    }

    fn keeps_flows(&mut self, id: u32) -> Option<u32> {
        liveness(self.states, id).keeps_flows().then_some(id)
    }
}

impl Lookups for View<'_> {
    type Slot = SlotRef;

    fn syn_slot(&mut self, hash: u32) -> Option<SlotRef> {
        let index = index(hash, self.syn.len());
        Some(SlotRef {
            index,
            entry: self.syn[index],
        })
    }

    fn table_slot(&mut self, hash: u32) -> Option<u32> {
        Some(self.owners[index(hash, self.owners.len())])
    }
}

/// A world: one design's instances, flows and counters, run through one sequence.
#[derive(Clone, Debug)]
pub(crate) struct World {
    fast: bool,
    /// The fast path as lb-ebpf runs it ([`Design::Shipped`]).
    shipped: bool,
    setup: Setup,
    lb: LbConfig,
    states: [Liveness; 3],
    insts: Vec<Inst>,
    /// The flows, by index.
    pub(crate) flows: Vec<Flow>,
    now: u64,
    queue: Vec<(u64, u64, Ev)>,
    seq: u64,
    /// Counters by name: the decision's notes and the model's own.
    pub(crate) counters: BTreeMap<&'static str, u32>,
}

/// A TCP or UDP flow key of the model's VIP, from client port `sport`.
fn flow_key(udp: bool, sport: u16) -> FlowKey {
    FlowKey {
        vip: VipKey {
            addr: [203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port: 80u16.to_be(),
            proto: if udp { PROTO_UDP } else { PROTO_TCP },
            family: FAMILY_V4,
        },
        src: [192, 0, 2, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        sport: sport.to_be(),
        _pad: [0; 2],
    }
}

/// The key of flow `fid` that hashes into slot `slot` of `m`.
fn key_in_slot(fid: usize, udp: bool, slot: usize, m: usize) -> FlowKey {
    let base = u16::try_from(10_000 + fid * 1_000).expect("few flows");
    (base..base + 1_000)
        .map(|port| flow_key(udp, port))
        .find(|key| index(flow_hash(key, SEED), m) == slot)
        .expect("some port hashes into the slot")
}

impl World {
    /// A world of `design` for `setup`.
    pub(crate) fn new(design: Design, setup: &Setup) -> World {
        let fast = match design {
            Design::Today => false,
            Design::Fast => fastpath::enabled(true, setup.ninst > 1, false),
            Design::FastForced => true,
            Design::Shipped => fastpath::enabled(true, setup.ninst > 1, false),
        };
        let shipped = fast && design == Design::Shipped;
        let inst = Inst {
            owners: setup.owners.clone(),
            epoch: 1,
            changed_ns: 0,
            slots: setup.owners.iter().map(|&o| SlotState::clean(o)).collect(),
            walk_gen: 0,
            lru: Lru {
                cap: setup.lru_cap,
                ..Lru::default()
            },
            exc: Exceptions {
                cap: setup.exc_cap,
                ..Exceptions::default()
            },
            syn: vec![SynEntry::default(); setup.syn_slots],
        };
        let flows = (setup.flows.iter().enumerate())
            .map(|(fid, &(udp, slot, inst))| Flow {
                key: key_in_slot(fid, udp, slot, setup.m),
                udp,
                inst,
                isn: 0x1000_0000 + u32::try_from(fid).expect("few flows"),
                sock: None,
                fate: Fate::Kept,
                last_ns: None,
                silent: false,
                syn_ns: None,
                delivered_ns: None,
                residuals: Vec::new(),
                trail: Vec::new(),
            })
            .collect();
        World {
            fast,
            shipped,
            lb: LbConfig {
                hash_seed: SEED,
                udp_timeout_ns: setup.cfg.udp_timeout_ns,
                syn_cache_mask: u32::try_from(setup.syn_slots - 1).expect("small cache"),
                ..LbConfig::default()
            },
            setup: setup.clone(),
            states: setup.states,
            insts: vec![inst; setup.ninst],
            flows,
            now: T0,
            queue: Vec::new(),
            seq: 0,
            counters: BTreeMap::new(),
        }
    }

    /// Schedules `ev` at `ms` milliseconds after the origin.
    pub(crate) fn at(&mut self, ms: u64, ev: Ev) {
        self.at_ns(T0 + ms * MS, ev);
    }

    fn at_ns(&mut self, ns: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push((ns, self.seq, ev));
    }

    /// Runs every event in time order (ties: scheduling order).
    pub(crate) fn run(&mut self) {
        loop {
            let next = (self.queue.iter().enumerate())
                .min_by_key(|(_, (t, seq, _))| (*t, *seq))
                .map(|(i, _)| i);
            let Some(next) = next else {
                return;
            };
            let (t, _, ev) = self.queue.swap_remove(next);
            self.now = t;
            self.handle(ev);
        }
    }

    fn count(&mut self, name: &'static str) {
        *self.counters.entry(name).or_default() += 1;
    }

    /// A counter's value.
    pub(crate) fn counter(&self, name: &str) -> u32 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// Whether slot `slot` of instance `inst` is dirty.
    pub(crate) fn dirty(&self, inst: usize, slot: usize) -> bool {
        self.insts[inst].slots[slot].is_dirty()
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Syn(fid) => self.packet(fid, true),
            Ev::Seg(fid) => self.packet(fid, false),
            Ev::Tab(owners) => (0..self.insts.len()).for_each(|i| self.table(i, &owners)),
            Ev::State(id, state) => {
                let i = usize::try_from(id - 1).expect("small id");
                self.states[i] = state;
            }
            Ev::Walk { inst, delay_ms } => self.walk(inst, delay_ms),
            Ev::Move(fid, inst) => self.flows[fid].inst = inst,
            Ev::Restart(inst) => self.restart(inst),
            Ev::MarkDirty(inst, slot, before, owner) => {
                self.insts[inst].slots[slot] = before.switched(owner, self.now);
            }
            Ev::Commit(inst, generation, cands) => self.commit(inst, generation, &cands),
        }
    }

    /// A packet of flow `fid`: decided, carried out, delivered.
    fn packet(&mut self, fid: usize, syn: bool) {
        let flow = &self.flows[fid];
        if flow.fate != Fate::Kept || (!syn && !flow.udp && flow.sock.is_none()) {
            return;
        }
        let packet = if flow.udp {
            Packet::Udp
        } else if syn {
            Packet::Syn { seq: flow.isn }
        } else {
            Packet::Tcp { rst: false }
        };
        let inst = flow.inst;
        let idle = self.setup.cfg.tcp_idle_ns;
        if flow.last_ns.is_some_and(|last| self.now - last > idle) {
            self.flows[fid].silent = true;
        }
        let target = if self.shipped {
            self.shipped_packet(inst, fid, packet)
        } else if self.fast {
            self.fast_packet(inst, fid, packet)
        } else {
            self.today_packet(inst, fid, packet)
        };
        if let Some(backend) = target {
            self.deliver(fid, backend, syn);
        }
        let flow = &mut self.flows[fid];
        flow.last_ns = Some(self.now);
        flow.syn_ns = if syn {
            flow.syn_ns.or(Some(self.now))
        } else {
            None
        };
    }

    /// Delivers a packet of flow `fid` to `backend`: a SYN or a UDP flow's first
    /// datagram makes the socket; any other packet must reach it. A UDP flow silent
    /// about the UDP idle timeout since a backend last received it starts again as a
    /// new flow (in both designs its pin has expired: no design keeps it).
    fn deliver(&mut self, fid: usize, backend: u32, syn: bool) {
        let udp_idle = self.setup.cfg.udp_timeout_ns;
        let now = self.now;
        let states = self.states;
        let flow = &mut self.flows[fid];
        flow.trail.push(backend);
        // A pin's stamp is refreshed at most once a second, so it may expire up to a
        // second before the flow's own silence reaches the timeout.
        let expired = |last: u64| now - last + conntrack::UDP_REFRESH_NS > udp_idle;
        if flow.udp && flow.delivered_ns.replace(now).is_some_and(expired) {
            flow.sock = None;
        }
        // A server drops a half-open connection once its SYN-ACK retries end: a later
        // handshake ACK finds no socket in either design, and a later SYN opens a new
        // one wherever it goes.
        if !flow.udp && flow.syn_ns.is_some_and(|at| now - at > HALF_OPEN_NS) {
            flow.sock = None;
            if !syn {
                return;
            }
        }
        let Some(sock) = flow.sock else {
            if syn || flow.udp {
                flow.sock = Some(backend);
            }
            return;
        };
        if backend == sock {
            return;
        }
        if !liveness(&states, sock).keeps_flows() {
            flow.fate = Fate::Excluded;
            return;
        }
        flow.fate = Fate::Broken;
        if flow.silent && !flow.udp {
            flow.residuals.push(Residual::Idle);
        }
    }

    /// Today's path for a SYN: `conntrack::decide_syn`, holding a new connection's SYN.
    fn today_syn(&mut self, i: usize, fid: usize, seq: u32) -> Option<u32> {
        let key = &self.flows[fid].key.clone();
        let now = self.now;
        let inst = &mut self.insts[i];
        // The program reads the pin for a SYN only in the window after a change.
        let recent = now.saturating_sub(inst.changed_ns) < DUPLICATE_SYN_WINDOW_NS;
        let entry = if recent {
            self.ct_get(i, key).copied()
        } else {
            None
        };
        let inst = &mut self.insts[i];
        let (vip, mut view) = inst.today_view(&self.states, now);
        match conntrack::decide_syn(&mut view, key, seq, &vip, entry.as_ref(), &self.lb) {
            SynDecision::Pin(b) => {
                // lb-ebpf notes the SYN in the pin (`note_activity`), unless the pin was
                // made at a SYN and no later packet saw it: a SYN is no sign of a
                // completed handshake (rule S4's expiry).
                if let Some(e) = self.ct_get(i, key)
                    && e.seen_ticks != fastpath::UNSEEN_TICKS
                {
                    e.seen_ticks = ct_ticks(now);
                }
                Some(b)
            }
            SynDecision::HeldSyn(b) => Some(b),
            SynDecision::Table { hash, table } => {
                let (b, pin) = self.pick(i, fid, table, Pick::Syn)?;
                if pin {
                    // `select::pin_syn`: an existing pin wins if its backend keeps flows.
                    if let Some(e) = self.ct_get(i, key) {
                        let winner = e.backend_id;
                        return Some(if self.keeps(winner) { winner } else { b });
                    }
                    let mut entry = syn_pin(b, self.insts[i].epoch, seq, now);
                    entry.seen_ticks = fastpath::UNSEEN_TICKS;
                    if !self.ct_pin(i, key, entry, false) {
                        // R2: the exceptions map is full; the client retransmits.
                        self.note(fid, OnFull::Drop.note());
                        return None;
                    }
                    return Some(b);
                }
                let inst = &mut self.insts[i];
                let slot = index(hash, inst.syn.len());
                inst.syn[slot] = held(key, hash, b, inst.epoch, seq, now);
                Some(b)
            }
        }
    }

    /// The backend of a packet no pin or held SYN decides, if any, and whether a SYN
    /// is pinned at once (`fastpath::syn_needs_pin`): today's the table's; the shipped
    /// fast path's by lb-ebpf's `fast::pick_by`. A SYN sent to the owner that may split
    /// a handshake is noted for flow `fid` (residual R1, which lb-ebpf does not count
    /// yet).
    fn pick(&mut self, i: usize, fid: usize, hash: u32, pick: Pick) -> Option<(u32, bool)> {
        let inst = &self.insts[i];
        if !self.shipped {
            let b = inst.owners[index(hash, inst.owners.len())];
            return (b != 0).then_some((b, false));
        }
        let slot = inst.slots[index(hash, self.setup.m)];
        let (cfg, now) = (&self.setup.cfg, self.now);
        let clean = slot.clean_owner();
        let clean_liveness = match liveness(&self.states, clean) {
            Liveness::Down => Liveness::Down,
            _ if clean == 0 => Liveness::Down,
            _ => Liveness::Active,
        };
        let id = match pick {
            Pick::Syn => {
                let id = fastpath::syn_backend(&slot, clean_liveness, now, cfg.lead_ns);
                if slot.is_dirty()
                    && id == slot.owner()
                    && fastpath::syn_maybe_split(&slot, clean_liveness, now)
                {
                    self.note(fid, Note::SynMaybeSplit);
                }
                id
            }
            Pick::Miss { udp } => {
                fastpath::miss_backend(&slot, udp, clean_liveness, now, cfg.udp_timeout_ns)
            }
        };
        let state = liveness(&self.states, id);
        let ok = if id == slot.owner() {
            state == Liveness::Active
        } else {
            state.keeps_flows()
        };
        let pin = matches!(pick, Pick::Syn) && fastpath::syn_needs_pin(&slot, clean_liveness, id);
        (id != 0 && ok).then_some((id, pin))
    }

    /// The shipped fast path for a packet: a clean slot's owner (rule T1), else today's
    /// path with [`World::pick`].
    fn shipped_packet(&mut self, i: usize, fid: usize, packet: Packet) -> Option<u32> {
        let hash = flow_hash(&self.flows[fid].key, SEED);
        let slot = self.insts[i].slots[index(hash, self.setup.m)];
        let owner = liveness(&self.states, slot.owner());
        let takes = match packet {
            Packet::Syn { .. } => owner == Liveness::Active,
            _ => owner.keeps_flows(),
        };
        if !slot.is_dirty() && slot.owner() != 0 && takes {
            self.count("clean_slot");
            return Some(slot.owner());
        }
        self.today_packet(i, fid, packet)
    }

    /// Whether backend `id` keeps flows.
    fn keeps(&self, id: u32) -> bool {
        liveness(&self.states, id).keeps_flows()
    }

    /// The flow's pin as the program reads it: the LRU conntrack map; on the shipped
    /// fast path the exceptions map first (lb-ebpf's `conntrack::lookup_fast`).
    fn ct_get(&mut self, i: usize, key: &FlowKey) -> Option<&mut CtEntry> {
        let inst = &mut self.insts[i];
        if self.shipped && inst.exc.get(key).is_some() {
            return inst.exc.get(key);
        }
        inst.lru.get(key)
    }

    /// Writes a pin as the program does: today's in the LRU; the shipped fast path's by
    /// rule M3 (`fastpath::pin_class`, lb-ebpf's `fast::pin`), removing the flow's pin
    /// from the other map. False when the exceptions map refused it (full).
    fn ct_pin(&mut self, i: usize, key: &FlowKey, entry: CtEntry, udp: bool) -> bool {
        let m = self.setup.m;
        let inst = &mut self.insts[i];
        if !self.shipped {
            let _evicted = inst.lru.insert(*key, entry);
            return true;
        }
        let slot = inst.slots[index(flow_hash(key, SEED), m)];
        match fastpath::pin_class(&slot, udp, entry.backend_id, entry.isn) {
            PinClass::Derivable => {
                inst.exc.remove(key);
                // A derivable pin: the miss rule names its backend again.
                let _evicted = inst.lru.insert(*key, entry);
            }
            PinClass::Exception => {
                if !inst.exc.insert(*key, entry) {
                    return false;
                }
                inst.lru.remove(key);
            }
        }
        true
    }

    /// lb-ebpf's `fast::note_pin` (rule P4) before a pin naming `backend` for a flow
    /// of hash `hash`: a dirty slot owned by another backend moves its epoch.
    fn note_pin(&mut self, i: usize, hash: u32, backend: u32) {
        if !self.shipped {
            return;
        }
        let s = index(hash, self.setup.m);
        let slot = &mut self.insts[i].slots[s];
        if slot.is_dirty() && slot.owner() != backend {
            *slot = slot.bumped();
        }
    }

    /// Today's path for a packet: [`World::today_syn`] for a SYN, else
    /// `conntrack::decide`, carried out.
    fn today_packet(&mut self, i: usize, fid: usize, packet: Packet) -> Option<u32> {
        let key = self.flows[fid].key;
        if let Packet::Syn { seq } = packet {
            return self.today_syn(i, fid, seq);
        }
        let now = self.now;
        let udp = self.flows[fid].udp;
        let entry = self.ct_get(i, &key).copied();
        let inst = &mut self.insts[i];
        let (vip, mut view) = inst.today_view(&self.states, now);
        let mut stats = VipStats::default();
        let decision = conntrack::decide(
            &mut view,
            &key,
            false,
            &vip,
            entry.as_ref(),
            &self.lb,
            &mut stats,
        );
        match decision {
            Decision::Pin { backend, touch } => {
                if let Some(e) = self.ct_get(i, &key) {
                    touch.apply(e);
                    e.seen_ticks = ct_ticks(now);
                }
                Some(backend)
            }
            Decision::HeldSyn {
                backend,
                slot,
                record,
            } => {
                if let Some(record) = record {
                    self.note_pin(i, flow_hash(&key, SEED), backend);
                    if self.ct_pin(i, &key, record.entry(backend), udp) {
                        self.insts[i].syn[slot.index].vip_id = SYN_FREE;
                    } else {
                        // R2: the held SYN stays and decides.
                        self.note(fid, OnFull::KeepHeld.note());
                    }
                }
                Some(backend)
            }
            Decision::Table {
                hash,
                record,
                stale_slot,
            } => {
                if let Some(slot) = stale_slot {
                    inst.syn[slot.index].vip_id = SYN_FREE;
                }
                let (b, _) = self.pick(i, fid, hash, Pick::Miss { udp })?;
                if let Some(record) = record {
                    self.note_pin(i, hash, b);
                    if !self.ct_pin(i, &key, record.entry(b), udp) {
                        // R2: forwarded unpinned.
                        self.note(fid, OnFull::Forward.note());
                    }
                }
                Some(b)
            }
        }
    }

    /// The fast path for a packet: `fastpath::decide`, carried out.
    fn fast_packet(&mut self, i: usize, fid: usize, packet: Packet) -> Option<u32> {
        let key = self.flows[fid].key;
        let hash = flow_hash(&key, SEED);
        let s = index(hash, self.setup.m);
        let slot = self.insts[i].slots[s];
        let (pin, held_view) = if slot.is_dirty() {
            (self.pin_view(i, &key), self.held_view(i, &key, hash))
        } else {
            (None, HeldView::Empty)
        };
        let inputs = Inputs {
            slot,
            packet,
            pin,
            held: held_view,
            owner: liveness(&self.states, slot.owner()),
            clean_owner: liveness(&self.states, slot.clean_owner()),
            now_ns: self.now,
        };
        let Outcome::Forward {
            backend,
            by,
            write,
            note,
        } = fastpath::decide(&self.setup.cfg, &inputs)
        else {
            self.count("fp_no_backend");
            return None;
        };
        if let Some(note) = note {
            self.note(fid, note);
        }
        if let (By::SynToOwner, Write::Pin(_)) = (by, write) {
            self.count("fp_syn_pinned");
        }
        let now = self.now;
        match write {
            Write::Nothing => self.touch(i, &key, false, matches!(packet, Packet::Syn { .. })),
            Write::Stamp => self.touch(i, &key, true, false),
            Write::RefreshHeld => {
                let inst = &mut self.insts[i];
                let at = index(hash, inst.syn.len());
                let e = inst.syn[at];
                let backend = u32::from(e.backend_id);
                inst.syn[at] = held(&key, hash, backend, e.epoch, e.seq, now);
            }
            Write::HoldSyn => {
                let seq = self.flows[fid].isn;
                let inst = &mut self.insts[i];
                let at = index(hash, inst.syn.len());
                inst.syn[at] = held(&key, hash, backend, 0, seq, now);
            }
            Write::Pin(pw) => {
                let syn = matches!(packet, Packet::Syn { .. });
                if !self.fast_pin(i, &key, s, backend, pw, syn) {
                    self.note(fid, pw.on_full.note());
                    if pw.on_full == OnFull::Drop {
                        return None;
                    }
                }
            }
        }
        Some(backend)
    }

    /// Counts `note` and records it against flow `fid`.
    fn note(&mut self, fid: usize, note: Note) {
        self.count(note.counter());
        self.flows[fid].residuals.push(Residual::Counted(note));
    }

    /// The flow's pin as the decision sees it (exceptions map first, then the LRU).
    fn pin_view(&mut self, i: usize, key: &FlowKey) -> Option<PinView> {
        let inst = &mut self.insts[i];
        let entry = match inst.exc.get(key) {
            Some(e) => *e,
            None => *inst.lru.get(key)?,
        };
        Some(PinView {
            backend: entry.backend_id,
            liveness: liveness(&self.states, entry.backend_id),
            stamp_ns: entry.stamp_ns,
            isn: entry.isn,
        })
    }

    /// The flow's SYN cache slot as the decision sees it.
    fn held_view(&self, i: usize, key: &FlowKey, hash: u32) -> HeldView {
        let inst = &self.insts[i];
        let e = inst.syn[index(hash, inst.syn.len())];
        if u32::from(e.vip_id) != VIP_ID {
            return HeldView::Empty;
        }
        if e.holds(key, hash) {
            let backend = u32::from(e.backend_id);
            return HeldView::Own {
                backend,
                liveness: liveness(&self.states, backend),
                seq: e.seq,
                syn_ns: e.syn_ns,
            };
        }
        HeldView::Other { syn_ns: e.syn_ns }
    }

    /// A pin's activity: last seen now, and (UDP) its stamp when `stamp`. A SYN does not
    /// mark a pin made at a SYN as seen (rule S4's expiry).
    fn touch(&mut self, i: usize, key: &FlowKey, stamp: bool, syn: bool) {
        let now = self.now;
        let inst = &mut self.insts[i];
        let entry = match inst.exc.get(key) {
            Some(e) => Some(e),
            None => inst.lru.get(key),
        };
        if let Some(e) = entry {
            if syn && e.seen_ticks == fastpath::UNSEEN_TICKS {
                return;
            }
            e.seen_ticks = ct_ticks(now);
            if stamp {
                e.stamp_ns = now;
            }
        }
    }

    /// Writes the fast path's pin (at a SYN: not yet seen by a later packet); false when
    /// the exceptions map is full.
    fn fast_pin(
        &mut self,
        i: usize,
        key: &FlowKey,
        s: usize,
        backend: u32,
        pw: PinWrite,
        syn: bool,
    ) -> bool {
        let now = self.now;
        let inst = &mut self.insts[i];
        let entry = CtEntry {
            backend_id: backend,
            vip_id: VIP_ID,
            stamp_ns: now,
            epoch: 0,
            isn: pw.isn,
            seen_ticks: if syn {
                fastpath::UNSEEN_TICKS
            } else {
                ct_ticks(now)
            },
            closing: CT_OPEN,
            _pad: [0; 3],
        };
        match pw.class {
            PinClass::Derivable => {
                inst.exc.remove(key);
                // A derivable pin: the miss rule names its backend again.
                let _evicted = inst.lru.insert(*key, entry);
            }
            PinClass::Exception => {
                if !inst.exc.insert(*key, entry) {
                    return false;
                }
                inst.lru.remove(key);
            }
        }
        if pw.free_held {
            let at = index(flow_hash(key, SEED), inst.syn.len());
            inst.syn[at].vip_id = SYN_FREE;
        }
        if pw.bump_epoch {
            inst.slots[s] = inst.slots[s].bumped();
        }
        true
    }

    /// A table change on instance `i`: both designs switch at once; the fast path's
    /// writes each moved slot whole (atomic) or its owner first and its state a
    /// millisecond later (not atomic, CE10). The lead (rule P2) is read from the slot.
    fn table(&mut self, i: usize, owners: &[u32]) {
        let now = self.now;
        let atomic = self.setup.atomic;
        let inst = &mut self.insts[i];
        inst.owners = owners.to_vec();
        inst.epoch += 1;
        inst.changed_ns = now;
        if !self.fast {
            return;
        }
        let mut late = Vec::new();
        for (s, &owner) in owners.iter().enumerate() {
            let slot = inst.slots[s];
            if slot.owner() == owner {
                continue;
            }
            if atomic || slot.is_dirty() {
                inst.slots[s] = slot.switched(owner, now);
            } else {
                inst.slots[s].owner = u16::try_from(owner).expect("small id");
                late.push(Ev::MarkDirty(i, s, slot, owner));
            }
        }
        for ev in late {
            self.at_ns(now + MS, ev);
        }
    }

    /// The daemon restarts: its walk in progress is lost. Nothing else is pending: the
    /// slots, conntrack and the SYN cache are in the pinned maps.
    fn restart(&mut self, i: usize) {
        self.insts[i].walk_gen += 1;
    }

    /// A cleaning walk's read: the dirty slots that may turn clean, with their epochs.
    fn walk(&mut self, i: usize, delay_ms: u64) {
        if !self.fast {
            return;
        }
        let (cfg, now, m) = (self.setup.cfg, self.now, self.setup.m);
        // Rule S4's expiry: pins made at a SYN that no later packet saw, past the hold.
        self.insts[i].exc.entries.retain(|(_, e)| {
            !fastpath::syn_pin_expired(&cfg, e.isn, e.stamp_ns, e.seen_ticks, now)
        });
        let inst = &self.insts[i];
        let mut foreign = vec![false; m];
        let pins = inst.lru.entries.iter().chain(inst.exc.entries.iter());
        for (key, e) in pins {
            let s = index(flow_hash(key, SEED), m);
            let udp = key.vip.proto == PROTO_UDP;
            let pin = PinView {
                backend: e.backend_id,
                liveness: liveness(&self.states, e.backend_id),
                stamp_ns: e.stamp_ns,
                isn: e.isn,
            };
            let seen = if udp {
                e.stamp_ns
            } else {
                fastpath::tcp_pin_seen_ns(e.stamp_ns, e.seen_ticks)
            };
            foreign[s] |= fastpath::pin_blocks_cleaning(&cfg, &inst.slots[s], &pin, udp, seen, now);
        }
        for e in &inst.syn {
            let hash = flow_hash(&e.key, SEED);
            if u32::from(e.vip_id) == VIP_ID && e.holds(&e.key, hash) {
                let s = index(hash, m);
                let backend = u32::from(e.backend_id);
                let view = HeldView::Own {
                    backend,
                    liveness: liveness(&self.states, backend),
                    seq: e.seq,
                    syn_ns: e.syn_ns,
                };
                foreign[s] |= fastpath::held_blocks_cleaning(&cfg, &inst.slots[s], &view, now);
            }
        }
        let cands: Vec<(usize, u32)> = (0..m)
            .filter_map(
                |s| match fastpath::clean_check(&cfg, &inst.slots[s], now, foreign[s]) {
                    CleanCheck::Candidate { epoch } => Some((s, epoch)),
                    CleanCheck::Clean | CleanCheck::Recent | CleanCheck::Foreign => None,
                },
            )
            .collect();
        let generation = inst.walk_gen;
        if delay_ms == 0 {
            self.commit(i, generation, &cands);
        } else {
            self.at_ns(now + delay_ms * MS, Ev::Commit(i, generation, cands));
        }
    }

    /// A walk's commit: compare-and-swap on each candidate's epoch; then the cleaned
    /// slots' pins naming another backend are deleted (rule C5).
    fn commit(&mut self, i: usize, generation: u32, cands: &[(usize, u32)]) {
        if generation != self.insts[i].walk_gen {
            return;
        }
        for &(s, epoch) in cands {
            match fastpath::clean_commit(&self.insts[i].slots[s], epoch) {
                Some(clean) => {
                    let (m, inst) = (self.setup.m, &mut self.insts[i]);
                    inst.slots[s] = clean;
                    let dead = |key: &FlowKey, e: &CtEntry| {
                        index(flow_hash(key, SEED), m) == s
                            && fastpath::pin_outlived_cleaning(&clean, e.backend_id)
                    };
                    inst.lru.entries.retain(|(k, e)| !dead(k, e));
                    // Every exception of the slot (rule C5 for the exceptions map).
                    inst.exc.entries.retain(|(k, _)| {
                        index(flow_hash(k, SEED), m) != s
                            || !fastpath::exception_outlived_cleaning(&clean)
                    });
                    self.count("fp_slots_cleaned");
                }
                None => self.count("fp_clean_aborted"),
            }
        }
    }
}

/// The pin of a SYN `seq` sent to `backend` at `now` under table `epoch`, as lb-ebpf's
/// `select::pin_syn` writes it.
fn syn_pin(backend: u32, epoch: u32, seq: u32, now: u64) -> CtEntry {
    let record = conntrack::Record {
        replace: false,
        vip_id: VIP_ID,
        stamp_ns: now,
        epoch,
        isn: seq,
    };
    record.entry(backend)
}

/// A whole SYN cache element for SYN `seq` of flow `key` (hash `hash`) sent to `backend`.
fn held(key: &FlowKey, hash: u32, backend: u32, epoch: u32, seq: u32, now: u64) -> SynEntry {
    let backend_id = u16::try_from(backend).expect("small id");
    let vip_id = u16::try_from(VIP_ID).expect("small id");
    SynEntry {
        key: *key,
        backend_id,
        vip_id,
        epoch,
        tag: SynEntry::tag_of(hash, backend_id, vip_id, epoch, now, seq),
        seq,
        syn_ns: now,
    }
}

/// Runs `events` (ms, event) in a world of `design`.
pub(crate) fn run(design: Design, setup: &Setup, events: &[(u64, Ev)]) -> World {
    let mut world = World::new(design, setup);
    for (ms, ev) in events {
        world.at(*ms, ev.clone());
    }
    world.run();
    world
}

/// The flows the fast path breaks that today's design keeps, without a residual: must
/// be empty.
pub(crate) fn worse_than_today(today: &World, fast: &World) -> Vec<usize> {
    (0..fast.flows.len())
        .filter(|&f| {
            fast.flows[f].fate == Fate::Broken
                && today.flows[f].fate != Fate::Broken
                && !fast.flows[f].residuals.iter().any(|r| r.documented())
        })
        .collect()
}
