// SPDX-License-Identifier: MIT OR Apache-2.0
//! The load balancer's side of the second chance (issue 31, stage 3; the book's chapter
//! "Several instances: what still breaks"): which backend a packet names as a
//! *candidate*, so that the backend agent (`lb agent run`) can hand it on when the
//! backend it reached holds no socket for it. The wire format is
//! [`SecondChance`](crate::types::SecondChance).
//!
//! The rules, built on the fast path's slot state ([`SlotState`]) rather than a second
//! history:
//!
//! - **SC1 (who carries).** A TCP packet other than a SYN of a VIP with
//!   [`VIP_SECOND_CHANCE`](crate::types::VIP_SECOND_CHANCE) that no pin and no held SYN
//!   decides (a conntrack miss, or a stale pin being replaced). A pin, a held SYN, a SYN
//!   and UDP carry none: this instance chose their backend, or the agent could not use
//!   a candidate (UDP has no socket per flow).
//! - **SC2 (the window).** Only on a dirty slot: a clean slot has one possible owner.
//!   The slot stays dirty from its owner's change until the cleaning walk turns it
//!   clean (at least the quiet time, `conntrack.quiet_secs`, two hours by default).
//! - **SC3 (the candidate).** The slot names two possible owners: the owner and the
//!   clean owner. The backend the miss rule decided is the destination; the other is
//!   the candidate ([`offer`]). A slot with no clean owner (a resized table) names
//!   none.
//! - **SC4 (no pin).** A packet that carries a candidate is not pinned: the load
//!   balancer cannot know which of the two holds the flow, so a pin would name a
//!   guess and the next packet, a conntrack hit, would carry no candidate. Every packet
//!   of the flow misses again and carries the same candidate while the slot stays dirty.
//!   A VIP with the fast path carries none and keeps its pin (rule M3 of
//!   `crate::fastpath`): its cleaning walk must see the flow (rule C1), and the fast
//!   path runs on one instance only (rule F1), where a flow without a pin on a dirty
//!   slot is on the clean owner the miss rule takes (invariant I2). How pins and
//!   candidates combine once F1 admits fleets is the fleet-cleaning stage's to decide.
//! - **SC5 (given up).** The state keeps two owners. A slot whose owner changes again
//!   while it is dirty forgets the owner in between ([`owner_given_up`]; the daemon
//!   counts them per table it publishes, [`owners_given_up`]): a flow that began on
//!   that owner, on another instance, has no candidate left. A candidate that
//!   no longer keeps flows (removed or down) or is of another family than the
//!   destination cannot be carried either; the data path counts those packets.
//! - **SC6 (a pending slot).** A two-phase rollout's first phase (*learn*, rule R1 of
//!   [`SlotState::learned`]) marks each slot the next table moves *pending*, with the
//!   next owner, without switching: the slot still forwards by its owner, and a packet
//!   SC1 names whose destination is not the pending owner carries the pending owner as
//!   its candidate, where the flows that instances already at phase 2 opened live. The
//!   pending owner takes the one candidate before a dirty slot's clean owner, which is
//!   then given up. Any table published since (phase 2, *switch*) ends it (rule R2):
//!   the moved slots turn dirty, the old owner their clean owner (SC3).

use crate::fastpath::SlotState;

/// What a packet that missed conntrack offers the backends (rule SC3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The candidate's backend id, 0 for none.
    pub candidate: u32,
    /// Possible owners the slot names that are neither the destination nor carried (0
    /// or 1: when the destination is neither of the slot's two owners, only the clean
    /// owner fits the one candidate the data path carries).
    pub given_up: u32,
}

/// Rules SC2 and SC3: the candidate of a packet on `slot` sent to backend `decided`.
/// A clean slot offers none. A dirty slot offers its other possible owner: the clean
/// owner when `decided` is the owner (today's miss rule), the owner when `decided` is
/// the clean owner (the fast path's rule M1). Should `decided` be neither, the clean
/// owner (where the flows that began before the change are) is offered and the owner
/// given up.
///
/// Rule SC6 first: a pending slot offers its pending owner (unless it is `decided`);
/// a dirty slot's clean owner not carried then is given up.
#[inline(always)]
#[must_use]
pub fn offer(slot: &SlotState, decided: u32) -> Offer {
    let pending = slot.pending();
    if pending != 0 && pending != decided {
        let clean = slot.clean_owner();
        let given_up =
            u32::from(slot.is_dirty() && clean != 0 && clean != decided && clean != pending);
        return Offer {
            candidate: pending,
            given_up,
        };
    }
    if !slot.is_dirty() {
        return Offer {
            candidate: 0,
            given_up: 0,
        };
    }
    let (owner, clean) = (slot.owner(), slot.clean_owner());
    let candidate = if decided == clean { owner } else { clean };
    let given_up = u32::from(decided != owner && decided != clean && owner != clean && owner != 0);
    Offer {
        candidate: if candidate == decided { 0 } else { candidate },
        given_up,
    }
}

/// Rule SC5 at a table change: the owner a dirty slot `old` forgets when it is given
/// `new_owner` (`Some(id)`), if any. A clean slot forgets nothing (its owner becomes the
/// clean owner); nor does a dirty one whose owner stays, or whose owner is its clean
/// owner (it is still named).
#[must_use]
pub fn owner_given_up(old: &SlotState, new_owner: u32) -> Option<u32> {
    let forgotten = old.owner();
    (old.is_dirty() && forgotten != new_owner && forgotten != old.clean_owner() && forgotten != 0)
        .then_some(forgotten)
}

/// Rule SC5 over a whole table: how many slots of the table in force (its states
/// `live`, `None` before the VIP's first table) forget an owner ([`owner_given_up`])
/// when the table `next` (each slot's new owner) is published. A table of another size
/// counts none: its slots get no clean owner ([`SlotState::resized`]), so every dirty
/// slot's candidate goes, not one owner of a slot that keeps two.
#[must_use]
pub fn owners_given_up<T: Copy + Into<u32>>(live: Option<&[SlotState]>, next: &[T]) -> u32 {
    let Some(live) = live.filter(|l| l.len() == next.len()) else {
        return 0;
    };
    let forgotten = live
        .iter()
        .zip(next)
        .filter(|(old, owner)| owner_given_up(old, (**owner).into()).is_some())
        .count();
    u32::try_from(forgotten).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
