// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Bounds-checked access to the frame, in the shape the verifier accepts: every access
//! compares `data + offset + size` against `data_end` first.

use aya_ebpf::programs::XdpContext;

/// Pointer to a `T` at `offset` bytes into the frame, or `None` if it does not fit.
#[inline(always)]
pub(crate) fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Option<*mut T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + offset + size_of::<T>() > end {
        return None;
    }
    Some((start + offset) as *mut T)
}

/// Length of the frame in bytes.
#[inline(always)]
pub(crate) fn frame_len(ctx: &XdpContext) -> usize {
    ctx.data_end() - ctx.data()
}
