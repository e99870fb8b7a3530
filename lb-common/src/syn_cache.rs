// SPDX-License-Identifier: MIT OR Apache-2.0
//! Where a held SYN lives in the `SYN_CACHE` array: the one definition of the slot index
//! that the XDP program and userspace (`lb flow`, the removal of one flow) share.
//!
//! The array is split into `2^part_bits` equal *parts*, one per CPU (issue 35): CPU `c`
//! writes and reads only part `c mod parts`, so two CPUs' SYNs never write the same
//! cache line (each 64-byte slot is one line). Within its part a flow's slot is
//! `flow_hash & (part size - 1)`. A handshake's ACK finds its SYN only on the SYN's CPU
//! (receive-side scaling hashes both to one queue); an ACK on another CPU falls back to
//! the table, which gives the same backend unless it changed in between. With one part
//! (`part_bits` 0, every configuration written before the parts existed) the slot is
//! `flow_hash & syn_cache_mask`, as before.
//!
//! The number of parts is the number of possible CPUs rounded up to a power of two, at
//! most `slots / MIN_PART_SLOTS` ([`part_bits`]); the kernel data plane writes it into
//! `LbConfig::syn_cache_part_bits` with the mask when the interface it attaches to has
//! more than one receive queue (receive-side scaling), one part otherwise.

/// The fewest slots a part keeps ([`part_bits`]): 1,024 slots of 64 bytes, 64 KiB.
///
/// A held SYN loses its slot when another SYN of its CPU takes it before the ACK: with
/// `n` handshakes in flight on a CPU and `s` slots in its part, about `1 - e^(-n/s)` of
/// them (see `crate::defaults::CT_SYN_CAPACITY`). While receive-side scaling spreads the
/// SYNs evenly, `n/s` is the same for any number of parts; a CPU that receives more
/// than its share (a hot queue) sees its part fill first. At 1,024 slots a CPU still
/// holds 100 handshakes in flight with about 10 % lost, where a part of 64 slots would
/// lose most of them; below two such parts the array stays whole.
pub const MIN_PART_SLOTS: u32 = 1_024;
const _: () = assert!(MIN_PART_SLOTS.is_power_of_two());

/// The index in `SYN_CACHE` of the slot of a flow whose flow hash is `hash`
/// ([`crate::hash::flow_hash`]) on CPU `cpu` (`bpf_get_smp_processor_id`), for an array
/// of `mask + 1` slots (a power of two, `LbConfig::syn_cache_mask`) split into
/// `2^part_bits` parts (`LbConfig::syn_cache_part_bits`).
///
/// Part `cpu mod 2^part_bits` (its first slot at `part * part size`), offset
/// `hash & (part size - 1)`. Always at most `mask`, whatever the arguments: a
/// `part_bits` larger than the array's bits (no writer sets one) leaves parts of one
/// slot. `part_bits` 0 gives `hash & mask`.
#[inline(always)]
#[must_use]
pub const fn slot_index(hash: u32, cpu: u32, mask: u32, part_bits: u8) -> u32 {
    let in_part = mask >> (part_bits & 31);
    // `in_part + 1` is the part's size, a power of two (0 when the array has 2^32
    // slots and one part: the product is then 0); `& mask` keeps the part number below
    // the number of parts, since both sizes are powers of two.
    (cpu.wrapping_mul(in_part.wrapping_add(1)) & mask) | (hash & in_part)
}

/// The offset within every part of the slot of a flow whose flow hash is `hash`: the
/// flow's slot on CPU `c` is `part_start(c) + offset`, so userspace, which does not
/// know the CPU, reads the `2^part_bits` slots [`part_slots`] lists.
#[inline(always)]
#[must_use]
pub const fn offset_in_part(hash: u32, mask: u32, part_bits: u8) -> u32 {
    hash & (mask >> (part_bits & 31))
}

/// Every slot a flow whose flow hash is `hash` may hold its SYN in, one per part, in
/// part order: [`slot_index`] for CPUs `0..2^part_bits`.
pub fn part_slots(hash: u32, mask: u32, part_bits: u8) -> impl Iterator<Item = u32> {
    let parts = parts_of(mask, part_bits);
    (0..parts).map(move |cpu| slot_index(hash, cpu, mask, part_bits))
}

/// The number of parts an array of `mask + 1` slots has with `part_bits`: `2^part_bits`,
/// at most the number of slots.
#[must_use]
pub const fn parts_of(mask: u32, part_bits: u8) -> u32 {
    let bits = (part_bits & 31) as u32;
    let slot_bits = u32::BITS - mask.leading_zeros();
    let bits = if bits < slot_bits { bits } else { slot_bits };
    1 << bits
}

/// `LbConfig::syn_cache_part_bits` for an array of `slots` slots (a power of two) on a
/// machine of `cpus` possible CPUs: log2 of the CPUs rounded up to a power of two, at
/// most log2(`slots / MIN_PART_SLOTS`), so each part keeps [`MIN_PART_SLOTS`] slots.
/// 0 (one part, the whole array) for one CPU or fewer than `2 * MIN_PART_SLOTS` slots.
#[must_use]
pub const fn part_bits(slots: u32, cpus: u32) -> u8 {
    let wanted = if cpus <= 1 {
        0
    } else {
        // ceil(log2(cpus)).
        u32::BITS - (cpus - 1).leading_zeros()
    };
    let most = if slots < MIN_PART_SLOTS {
        0
    } else {
        (slots / MIN_PART_SLOTS).trailing_zeros()
    };
    let bits = if wanted < most { wanted } else { most };
    #[expect(
        clippy::cast_possible_truncation,
        reason = "at most 31: the log2 of a u32"
    )]
    let bits = bits as u8;
    bits
}

#[cfg(test)]
mod tests;
