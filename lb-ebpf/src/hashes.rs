// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The flow hashes (`lb_common::hash::flow_hash`, `lb_common::hash_fields::table_hash`)
//! as global BPF functions.
//!
//! A hash is about 200 instructions of straight-line code, and the program computes one
//! at a dozen places. Inlined, the verifier walks it again at every place on every path
//! it explores there: about a third of `lb_xdp`'s verifier count. A global function
//! (exported by the linker, `build.rs`; its BTF says so) is verified once on its own,
//! for any key; a call of it costs the verifier a few instructions, and the packet a
//! BPF-to-BPF call. Its key comes as a pointer to the caller's stack, which the
//! verifier checks is readable for the whole key; the function returns 0 for a null
//! pointer, which no caller passes.

use lb_common::{
    hash,
    hash_fields::{is_five_tuple, selected_key},
    types::FlowKey,
};

/// The flow hash of `key` with `seed` (`lb_common::hash::flow_hash`).
#[inline(always)]
pub(crate) fn flow_hash(key: &FlowKey, seed: u32) -> u32 {
    lb_flow_hash(key, seed)
}

/// The hash that picks VIP `flags`' table slot for `key` with `seed`
/// (`lb_common::hash_fields::table_hash`).
#[inline(always)]
pub(crate) fn table_hash(key: &FlowKey, flags: u32, seed: u32) -> u32 {
    if is_five_tuple(flags) {
        flow_hash(key, seed)
    } else {
        lb_selected_hash(key, flags, seed)
    }
}

/// [`table_hash`] with the 5-tuple's flow hash inlined, not called: for the fast
/// path's clean-slot check, the one place every packet of a fast-path VIP passes, where
/// the verifier walks it on few paths and the packet saves the BPF-to-BPF call.
#[inline(always)]
pub(crate) fn table_hash_inlined(key: &FlowKey, flags: u32, seed: u32) -> u32 {
    if is_five_tuple(flags) {
        hash::flow_hash(key, seed)
    } else {
        lb_selected_hash(key, flags, seed)
    }
}

/// The table hash of `key` for VIP flags `flags` when its flow hash `flow` is at hand
/// (`lb_common::hash_fields::table_hash_of`).
#[inline(always)]
pub(crate) fn table_hash_of(key: &FlowKey, flags: u32, seed: u32, flow: u32) -> u32 {
    if is_five_tuple(flags) {
        flow
    } else {
        lb_selected_hash(key, flags, seed)
    }
}

/// [`flow_hash`] as a global BPF function.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn lb_flow_hash(key: *const FlowKey, seed: u32) -> u32 {
    // SAFETY: the verifier checked that a non-null `key` points to a readable key.
    unsafe { key.as_ref() }.map_or(0, |key| hash::flow_hash(key, seed))
}

/// The table hash of a VIP that hashes other fields than the 5-tuple, as a global BPF
/// function: the flow hash of `lb_common::hash_fields::selected_key`.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn lb_selected_hash(key: *const FlowKey, flags: u32, seed: u32) -> u32 {
    // SAFETY: as in `lb_flow_hash`.
    unsafe { key.as_ref() }.map_or(0, |key| hash::flow_hash(&selected_key(key, flags), seed))
}
