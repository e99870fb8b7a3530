//! The fast path's cleaning walk: dirty table slots turn clean once nothing on them
//! names another backend than their owner and the quiet time has passed (rules C1-C5
//! of `lb_common::fastpath`, chapter "The fast path" of the book).
//!
//! One walk ([`Cleaner::clean`]):
//! 1. reads every VIP's live slot states; a dirty slot past the quiet time is a
//!    candidate, with the state (and epoch) read (C2, C3);
//! 2. reads the backends' states and walks both conntrack maps, the exceptions map
//!    (`EXCEPTIONS`) and the SYN cache with batch lookups: a live pin or held SYN of a
//!    candidate's flows naming another backend removes the candidate (C1);
//! 3. commits each remaining candidate with a compare-and-swap on its state word, which
//!    fails if a change or a pin moved its epoch since the read (C4);
//! 4. deletes the pins of the cleaned slots that name another backend, and every
//!    exception of the cleaned slots (C5);
//! 5. deletes the exceptions made at a SYN that no later packet saw, past the SYN hold
//!    (S4's expiry, C6), and those of connections their client closed, one linger past
//!    their last packet (C7), whatever their slot.
//!
//! The walker owns duplicates of the maps' file descriptors and a handle on the table
//! buffers, so it runs on a thread of its own; it takes the tables' lock only to read
//! the states and to commit.

use std::{
    collections::{BTreeMap, HashMap},
    os::fd::{AsFd as _, OwnedFd},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use lb_common::{
    fastpath::{
        self, CleanCheck, HeldView, Liveness, PinView, SlotState, clean_check,
        closed_exception_expired, exception_outlived_cleaning, held_blocks_cleaning,
        pin_blocks_cleaning, pin_live, pin_outlived_cleaning, syn_pin_expired, tcp_pin_seen_ns,
    },
    hash_fields::table_hash,
    maps::{self, MAX_BACKENDS},
    types::{
        BACKEND_ACTIVE, BACKEND_DRAINING, BackendEntry, CtEntry, FlowKey, FlowKey4, LbConfig,
        PROTO_UDP, SynEntry,
    },
};

use super::{lock, walk::for_each};
use crate::{DataplaneError, bpf_sys, tables::TableSet};

/// One walk's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaning {
    /// Per VIP id, its slots after the walk.
    pub vips: BTreeMap<u32, SlotCounts>,
    /// Slots turned clean by this walk (C4 committed).
    pub cleaned: u64,
    /// Candidates whose commit failed: their epoch moved during the walk (C4).
    pub aborted: u64,
    /// Pins deleted after their slot turned clean (C5), exceptions included.
    pub pins_deleted: u64,
    /// Exceptions made at a SYN that no later packet saw, deleted past the SYN hold
    /// (S4's expiry, C6).
    pub syn_pins_expired: u64,
    /// Exceptions of TCP connections their client closed (FIN or RST), deleted one
    /// linger after their last packet (C7,
    /// `lb_common::fastpath::CLOSED_EXCEPTION_LINGER_NS`).
    pub closed_exceptions_expired: u64,
    /// Exceptions of VIPs removed (a VIP id without a table), deleted: the exceptions
    /// map never evicts.
    pub exceptions_orphaned: u64,
    /// How long the walk took.
    pub took: Duration,
}

/// The slots of one VIP's live table by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlotCounts {
    /// Slots of the table (its size M).
    pub slots: u64,
    /// Dirty slots.
    pub dirty: u64,
    /// Of those, younger than the quiet time (C2).
    pub recent: u64,
    /// Of those, held by a live pin or held SYN naming another backend (C1).
    pub foreign: u64,
    /// Whether the VIP takes the fast path.
    #[serde(default)]
    pub fast: bool,
    /// Pins by kind, on a fast-path VIP (zero on today's path).
    #[serde(default)]
    pub pins: PinCounts,
}

/// A fast-path VIP's pins by what they say against its table (rule I1 of the book's
/// chapter "The fast path": a pin matters only where it names another backend).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PinCounts {
    /// Pins naming their slot's owner: the table would choose the same backend.
    pub owner: u64,
    /// Pins naming another backend: the exceptions to the table. A change is safe for
    /// their flows only while these pins last.
    pub other: u64,
    /// Of those, live: seen within the TCP idle time (a UDP pin within its timeout).
    pub other_live: u64,
}

/// A dirty slot that may turn clean: the state the walk read.
struct Candidate {
    read: SlotState,
    foreign: bool,
}

/// What the walk knows of one VIP: its table size, whether it takes the fast path, and
/// candidates by slot index.
struct VipSlots {
    size: u32,
    fast: bool,
    /// The VIP's hash fields as `VipEntry::flags` bits (`lb_common::hash_fields`).
    hash_flags: u32,
    candidates: HashMap<u32, Candidate>,
    /// A fast-path VIP's owner by slot, to count its pins by kind.
    owners: Vec<u16>,
    pins: PinCounts,
}

/// The VIPs the walk looks at, by id.
type Walked = HashMap<u32, VipSlots>;

/// What step 2 found for the later steps to delete.
#[derive(Default)]
struct Deletions {
    /// Pins of candidate slots step 4 may delete (C5).
    outlived: Vec<Outlived>,
    /// Exceptions made at a SYN no later packet saw, past the SYN hold (C6).
    syn_expired: Vec<FlowKey>,
    /// Exceptions of closed TCP connections, past the linger (C7).
    closed: Vec<FlowKey>,
    /// Exceptions of removed VIPs.
    orphans: Vec<FlowKey>,
}

/// A pin of a candidate slot naming another backend than the owner, or any exception of
/// a candidate slot (C5, if it cleans).
struct Outlived {
    vip_id: u32,
    slot: u32,
    backend: u32,
    key: FlowKeyOf,
}

/// A conntrack key and its map.
enum FlowKeyOf {
    V4(FlowKey4),
    V6(FlowKey),
    /// In `EXCEPTIONS`.
    Exception(FlowKey),
}

/// Walks the table states, the conntrack maps and the SYN cache of one data plane and
/// cleans what it may.
pub struct Cleaner {
    tables: Arc<Mutex<TableSet>>,
    v4: OwnedFd,
    v6: OwnedFd,
    syn: OwnedFd,
    backends: OwnedFd,
    config: OwnedFd,
    exceptions: OwnedFd,
}

impl Cleaner {
    /// A cleaner over duplicates of the maps' file descriptors (`CONNTRACK_V4`,
    /// `CONNTRACK_V6`, `SYN_CACHE`, `BACKENDS`, `CONFIG`, `EXCEPTIONS`) and the table
    /// buffers.
    pub(super) fn new(tables: Arc<Mutex<TableSet>>, fds: [OwnedFd; 6]) -> Self {
        let [v4, v6, syn, backends, config, exceptions] = fds;
        Self {
            tables,
            v4,
            v6,
            syn,
            backends,
            config,
            exceptions,
        }
    }

    /// One walk (see the module documentation) with the fast path's times `cfg`.
    ///
    /// # Errors
    /// When a map cannot be read; nothing was committed then.
    pub fn clean(&self, cfg: &fastpath::Config) -> Result<Cleaning, DataplaneError> {
        let started = Instant::now();
        let now = super::conntrack_now_ns();
        let seed = self.hash_seed()?;
        let (mut vips, counts) = self.candidates(cfg, now)?;
        let liveness = self.liveness()?;
        let deletions = self.mark_foreign(cfg, &mut vips, &liveness, seed, now)?;
        let mut cleaning = Cleaning {
            vips: counts,
            ..Cleaning::default()
        };
        self.commit(&mut vips, &mut cleaning);
        cleaning.pins_deleted = self.delete_outlived(&vips, &deletions.outlived);
        cleaning.syn_pins_expired = self.delete_exceptions(&deletions.syn_expired);
        cleaning.closed_exceptions_expired = self.delete_exceptions(&deletions.closed);
        cleaning.exceptions_orphaned = self.delete_exceptions(&deletions.orphans);
        cleaning.took = started.elapsed();
        Ok(cleaning)
    }

    /// The flow hash's seed in `CONFIG`.
    fn hash_seed(&self) -> Result<u32, DataplaneError> {
        let mut value = LbConfig::default();
        // SAFETY: LbConfig is plain data; the buffer is exactly its size.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut((&raw mut value).cast::<u8>(), size_of::<LbConfig>())
        };
        bpf_sys::lookup(self.config.as_fd(), &0u32.to_ne_bytes(), bytes).map_err(|error| {
            DataplaneError::Syscall {
                op: format!("reading {}", maps::CONFIG),
                error,
            }
        })?;
        Ok(value.hash_seed)
    }

    /// Step 1: every VIP's candidates, and its slots by state.
    fn candidates(
        &self,
        cfg: &fastpath::Config,
        now: u64,
    ) -> Result<(Walked, BTreeMap<u32, SlotCounts>), DataplaneError> {
        let tables = lock(&self.tables);
        let (mut vips, mut counts) = (HashMap::new(), BTreeMap::new());
        for vip_id in tables.vip_ids() {
            let Some(states) = tables.states(vip_id)? else {
                continue;
            };
            let mut count = SlotCounts {
                slots: states.len() as u64,
                ..SlotCounts::default()
            };
            let mut candidates = HashMap::new();
            for (slot, state) in (0u32..).zip(&states) {
                match clean_check(cfg, state, now, false) {
                    CleanCheck::Clean | CleanCheck::Foreign => {}
                    CleanCheck::Recent => count.recent += 1,
                    CleanCheck::Candidate { .. } => {
                        candidates.insert(
                            slot,
                            Candidate {
                                read: *state,
                                foreign: false,
                            },
                        );
                    }
                }
                count.dirty += u64::from(state.is_dirty());
            }
            let size = u32::try_from(states.len()).unwrap_or(u32::MAX);
            let fast = tables.fast_path(vip_id);
            let owners = if fast {
                states.iter().map(|s| s.owner).collect()
            } else {
                Vec::new()
            };
            vips.insert(
                vip_id,
                VipSlots {
                    size,
                    fast,
                    hash_flags: tables.hash_fields(vip_id).flags(),
                    candidates,
                    owners,
                    pins: PinCounts::default(),
                },
            );
            counts.insert(vip_id, count);
        }
        Ok((vips, counts))
    }

    /// Every backend's [`Liveness`], by id.
    fn liveness(&self) -> Result<Vec<Liveness>, DataplaneError> {
        let mut liveness = vec![Liveness::Down; MAX_BACKENDS as usize];
        for_each::<u32, BackendEntry>(&self.backends, maps::BACKENDS, |id, entry| {
            if let Some(l) = liveness.get_mut(*id as usize) {
                *l = match entry.state {
                    BACKEND_ACTIVE => Liveness::Active,
                    BACKEND_DRAINING => Liveness::Draining,
                    _ => Liveness::Down,
                };
            }
        })?;
        Ok(liveness)
    }

    /// Deletes `keys` from `EXCEPTIONS`; returns how many were there.
    fn delete_exceptions(&self, keys: &[FlowKey]) -> u64 {
        let deleted = keys
            .iter()
            .filter(|k| bpf_sys::delete(self.exceptions.as_fd(), pod_bytes(*k)).is_ok())
            .count();
        u64::try_from(deleted).unwrap_or(u64::MAX)
    }

    /// Step 2: marks the candidates a live pin or held SYN names another backend on
    /// (C1); returns what the later steps delete ([`Deletions`]).
    fn mark_foreign(
        &self,
        cfg: &fastpath::Config,
        vips: &mut HashMap<u32, VipSlots>,
        liveness: &[Liveness],
        seed: u32,
        now: u64,
    ) -> Result<Deletions, DataplaneError> {
        let mut deletions = Deletions::default();
        let Deletions {
            outlived,
            syn_expired,
            closed,
            orphans,
        } = &mut deletions;
        let mut pin = |key: &FlowKey, entry: &CtEntry, of: FlowKeyOf| {
            let exception = matches!(of, FlowKeyOf::Exception(_));
            if exception && key.vip.proto != PROTO_UDP {
                if syn_pin_expired(cfg, entry.isn, entry.stamp_ns, entry.seen_ticks, now) {
                    syn_expired.push(*key);
                    return;
                }
                let seen_ns = tcp_pin_seen_ns(entry.stamp_ns, entry.seen_ticks);
                if closed_exception_expired(cfg, entry.closing, seen_ns, now) {
                    closed.push(*key);
                    return;
                }
            }
            // An exception of a VIP id with no table (the VIP was removed) is an orphan.
            // One of a VIP on today's path is not: the fast path may have been turned
            // on since the walk read the VIPs.
            let Some(vip) = vips.get_mut(&entry.vip_id) else {
                if exception {
                    orphans.push(*key);
                }
                return;
            };
            // One table hash per pin, for its kind and its candidate slot.
            let Some(slot) = vip.slot_of(key, seed) else {
                return;
            };
            let udp = key.vip.proto == PROTO_UDP;
            let seen_ns = if udp {
                entry.stamp_ns
            } else {
                tcp_pin_seen_ns(entry.stamp_ns, entry.seen_ticks)
            };
            vip.count_pin(slot, entry.backend_id, pin_live(cfg, udp, seen_ns, now));
            let Some(candidate) = vip.candidates.get_mut(&slot) else {
                return;
            };
            if entry.backend_id == candidate.read.owner() {
                if exception {
                    outlived.push(Outlived {
                        vip_id: entry.vip_id,
                        slot,
                        backend: entry.backend_id,
                        key: of,
                    });
                }
                return;
            }
            let view = PinView {
                backend: entry.backend_id,
                liveness: backend_liveness(liveness, entry.backend_id),
                stamp_ns: entry.stamp_ns,
                isn: entry.isn,
            };
            candidate.foreign |=
                pin_blocks_cleaning(cfg, &candidate.read, &view, udp, seen_ns, now);
            outlived.push(Outlived {
                vip_id: entry.vip_id,
                slot,
                backend: entry.backend_id,
                key: of,
            });
        };
        for_each::<FlowKey4, CtEntry>(&self.v4, maps::CONNTRACK_V4, |k, e| {
            pin(&k.widen(), e, FlowKeyOf::V4(*k));
        })?;
        for_each::<FlowKey, CtEntry>(&self.v6, maps::CONNTRACK_V6, |k, e| {
            pin(k, e, FlowKeyOf::V6(*k));
        })?;
        for_each::<FlowKey, CtEntry>(&self.exceptions, maps::EXCEPTIONS, |k, e| {
            pin(k, e, FlowKeyOf::Exception(*k));
        })?;
        for_each::<u32, SynEntry>(&self.syn, maps::SYN_CACHE, |_, s| {
            if s.key.vip.family == 0 {
                return;
            }
            let vip_id = u32::from(s.vip_id);
            let Some((_, candidate)) = candidate_of(vips, vip_id, &s.key, seed) else {
                return;
            };
            let backend = u32::from(s.backend_id);
            let held = HeldView::Own {
                backend,
                liveness: backend_liveness(liveness, backend),
                seq: s.seq,
                syn_ns: s.syn_ns,
            };
            candidate.foreign |= held_blocks_cleaning(cfg, &candidate.read, &held, now);
        })?;
        Ok(deletions)
    }

    /// Step 3: commits every candidate no pin blocks (C4), and counts.
    fn commit(&self, vips: &mut HashMap<u32, VipSlots>, cleaning: &mut Cleaning) {
        let tables = lock(&self.tables);
        for (vip_id, vip) in vips.iter_mut() {
            let count = cleaning.vips.entry(*vip_id).or_default();
            (count.fast, count.pins) = (vip.fast, vip.pins);
            vip.candidates.retain(|slot, candidate| {
                if candidate.foreign {
                    count.foreign += 1;
                    return false;
                }
                let committed = tables.commit_clean(*vip_id, *slot as usize, &candidate.read);
                if committed {
                    cleaning.cleaned += 1;
                    count.dirty -= 1;
                } else {
                    cleaning.aborted += 1;
                }
                committed
            });
        }
    }

    /// Step 4: deletes the pins of cleaned slots that name another backend, and every
    /// exception of the cleaned slots (C5). The walk read them before the commit, so
    /// each was made before it. Returns how many.
    /// A VIP on today's path keeps its pins: its slots are cleaned so that their states
    /// hold when the fast path is turned on, but its flows follow their pins however long
    /// they were idle, as they did before the fast path existed.
    fn delete_outlived(&self, vips: &HashMap<u32, VipSlots>, outlived: &[Outlived]) -> u64 {
        let mut deleted = 0;
        for pin in outlived {
            let Some(candidate) = vips
                .get(&pin.vip_id)
                .filter(|v| v.fast)
                .and_then(|v| v.candidates.get(&pin.slot))
            else {
                continue;
            };
            let clean = SlotState {
                state: fastpath::SLOT_CLEAN,
                ..candidate.read
            };
            let outlived = match pin.key {
                FlowKeyOf::Exception(_) => exception_outlived_cleaning(&clean),
                FlowKeyOf::V4(_) | FlowKeyOf::V6(_) => pin_outlived_cleaning(&clean, pin.backend),
            };
            if !outlived {
                continue;
            }
            let removed = match &pin.key {
                FlowKeyOf::V4(k) => bpf_sys::delete(self.v4.as_fd(), pod_bytes(k)),
                FlowKeyOf::V6(k) => bpf_sys::delete(self.v6.as_fd(), pod_bytes(k)),
                FlowKeyOf::Exception(k) => bpf_sys::delete(self.exceptions.as_fd(), pod_bytes(k)),
            };
            deleted += u64::from(removed.is_ok());
        }
        deleted
    }
}

impl VipSlots {
    /// The slot of flow `key` when the walk needs it (the VIP counts its pins or has
    /// candidates): its table hash modulo the size.
    fn slot_of(&self, key: &FlowKey, seed: u32) -> Option<u32> {
        if self.size == 0 || (self.owners.is_empty() && self.candidates.is_empty()) {
            return None;
        }
        Some(table_hash(key, self.hash_flags, seed) % self.size)
    }

    /// Counts a pin on `slot` naming `backend` by kind ([`PinCounts`]), on a fast-path
    /// VIP; `live` whether it was seen within its idle time.
    fn count_pin(&mut self, slot: u32, backend: u32, live: bool) {
        let Some(&owner) = self.owners.get(slot as usize) else {
            return;
        };
        if u32::from(owner) == backend {
            self.pins.owner += 1;
        } else {
            self.pins.other += 1;
            self.pins.other_live += u64::from(live);
        }
    }
}

/// The candidate slot of flow `key` of VIP `vip_id`, if its slot is one.
fn candidate_of<'a>(
    vips: &'a mut HashMap<u32, VipSlots>,
    vip_id: u32,
    key: &FlowKey,
    seed: u32,
) -> Option<(u32, &'a mut Candidate)> {
    let vip = vips.get_mut(&vip_id)?;
    if vip.candidates.is_empty() {
        return None;
    }
    let slot = vip.slot_of(key, seed)?;
    vip.candidates.get_mut(&slot).map(|c| (slot, c))
}

fn backend_liveness(liveness: &[Liveness], id: u32) -> Liveness {
    liveness.get(id as usize).copied().unwrap_or(Liveness::Down)
}

/// The bytes of a map key.
pub(super) fn pod_bytes<T: aya::Pod>(value: &T) -> &[u8] {
    // SAFETY: T is plain data (aya::Pod); the slice covers exactly its bytes.
    unsafe { std::slice::from_raw_parts(std::ptr::from_ref(value).cast::<u8>(), size_of::<T>()) }
}
