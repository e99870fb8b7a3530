// SPDX-License-Identifier: MIT OR Apache-2.0
//! The cells of a VIP's table buffer (`TABLES`' inner maps): cell 0 is the header
//! ([`TableHeader`]), cells `1..=M` the slots ([`SlotState`]). One 16-byte cell type
//! for both, so the kernel's array stride is the cell and the XDP program reads a
//! slot's owner and state with one lookup.

use crate::fastpath::{SLOT_CLEAN, SlotState};

/// One element of a table buffer: two 64-bit words, read as a [`TableHeader`] (cell 0)
/// or a [`SlotState`] (cells `1..=M`) with shifts, not casts.
///
/// Layout (16 bytes, 8-byte aligned, little-endian words as on every target the
/// program runs on): `lo` 0..8, `hi` 8..16. As a slot: `lo` is the state word
/// (`epoch` bits 0..32, `clean_owner` 32..48, `state` 48..56, `flags` 56..64) and `hi`
/// holds `owner` (bits 0..16), `pending_owner` (16..32) and `changed_ticks` (32..64),
/// [`SlotState`]'s byte layout. As the header: `lo` holds the size M (bits 0..32) and
/// the generation (32..64); `hi` is 0.
///
/// `flags` and `pending_owner` (a rollout's learn phase, rule SC6 of
/// `crate::second_chance`) were zero padding before: a program or daemon built before
/// them reads a pending cell's owner, state and clean owner exactly as without the
/// mark ([`Self::owner`], [`Self::is_clean`] mask them out), so it forwards as it did
/// and carries no pending candidate; its cleaning's compare-and-swap of the state word
/// (which it reads with `flags` zero) fails on a pending slot, which then stays dirty
/// until a table without the mark is published.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCell {
    /// Bytes 0..8.
    pub lo: u64,
    /// Bytes 8..16.
    pub hi: u64,
}
const _: () = assert!(size_of::<TableCell>() == 16);
const _: () = assert!(size_of::<TableCell>() == size_of::<SlotState>());

/// Cell 0 of a table buffer. Keeping M in the same map as the slots means a packet can
/// never pair one table's size with another table's slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableHeader {
    /// The table size M (slots `1..=M` follow).
    pub size: u32,
    /// The table's generation (low 32 bits), for operators.
    pub generation: u32,
}

impl TableCell {
    /// The header cell of `header`.
    #[inline(always)]
    #[must_use]
    pub fn of_header(header: TableHeader) -> Self {
        Self {
            lo: u64::from(header.size) | u64::from(header.generation) << 32,
            hi: 0,
        }
    }

    /// This cell read as the header.
    #[inline(always)]
    #[must_use]
    pub fn header(&self) -> TableHeader {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "the two halves of the word"
        )]
        TableHeader {
            size: self.lo as u32,
            generation: (self.lo >> 32) as u32,
        }
    }

    /// The slot cell of `slot`.
    #[inline(always)]
    #[must_use]
    pub fn of_slot(slot: &SlotState) -> Self {
        Self {
            lo: u64::from(slot.epoch)
                | u64::from(slot.clean_owner) << 32
                | u64::from(slot.state) << 48
                | u64::from(slot.flags) << 56,
            hi: u64::from(slot.owner)
                | u64::from(slot.pending_owner) << 16
                | u64::from(slot.changed_ticks) << 32,
        }
    }

    /// This cell read as a slot.
    #[inline(always)]
    #[must_use]
    pub fn slot(&self) -> SlotState {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "each field is its bits of the word"
        )]
        SlotState {
            epoch: self.lo as u32,
            clean_owner: (self.lo >> 32) as u16,
            state: (self.lo >> 48) as u8,
            flags: (self.lo >> 56) as u8,
            owner: self.hi as u16,
            pending_owner: (self.hi >> 16) as u16,
            changed_ticks: (self.hi >> 32) as u32,
        }
    }

    /// The slot's owner (backend id; 0 for an empty slot): the data path's one read
    /// today.
    #[inline(always)]
    #[must_use]
    pub fn owner(&self) -> u32 {
        (self.hi & 0xffff) as u32
    }

    /// Whether the slot is clean ([`SLOT_CLEAN`]).
    #[inline(always)]
    #[must_use]
    pub fn is_clean(&self) -> bool {
        (self.lo >> 48) & 0xff == u64::from(SLOT_CLEAN)
    }
}

crate::impl_pod!(TableCell);
