// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Internet checksums: the one's-complement sum of 16-bit words (RFC 1071), folded with
//! every carry, its incremental update (RFC 1624; the arithmetic is
//! [`lb_common::csum`]'s, tested on the host), and sums over frame bytes with the
//! `bpf_csum_diff` helper.
//!
//! Words are summed in memory order (the 16-bit value of two wire bytes as loaded): the
//! one's-complement sum does not depend on byte order, so a checksum computed this way
//! is stored as it is (RFC 1071 section 2 (B)).

use aya_ebpf::{helpers::generated::bpf_csum_diff, programs::XdpContext};

use crate::headers::Ipv4Hdr;

/// Most bytes one `bpf_csum_diff` call sums (`sizeof(sp->diff)` in net/core/filter.c).
const CSUM_DIFF_MAX: usize = 512;

pub(crate) use lb_common::csum::{fold, update, update_nonzero};

/// The sum of a 32-bit word in memory order: its two 16-bit halves.
#[inline(always)]
pub(crate) fn word32(w: u32) -> u64 {
    u64::from(w & 0xffff) + u64::from(w >> 16)
}

/// RFC 1071 checksum of an IPv4 header without options whose checksum field is zero.
#[inline(always)]
pub(crate) fn ipv4_header(ip: &Ipv4Hdr) -> u16 {
    let words = [
        u16::from_ne_bytes([ip.vihl, ip.tos]),
        ip.tot_len,
        ip.id,
        ip.frag,
        u16::from_ne_bytes([ip.ttl, ip.proto]),
        ip.check,
    ];
    let mut sum: u64 = 0;
    for w in words {
        sum += u64::from(w);
    }
    sum += word32(ip.src) + word32(ip.dst);
    !fold(sum)
}

/// The one's-complement sum (32 bits, not folded) of `seed` and the `len` frame bytes
/// at `offset`, or `None` when they are not all in the frame. `offset` must be even and
/// `len` a multiple of 4 (the helper's unit).
#[inline(always)]
pub(crate) fn frame_sum(ctx: &XdpContext, offset: usize, len: usize, seed: u32) -> Option<u32> {
    let mut sum = seed;
    let mut done = 0;
    while done < len {
        let chunk = if len - done > CSUM_DIFF_MAX {
            CSUM_DIFF_MAX
        } else {
            len - done
        };
        let start = ctx.data() + offset + done;
        if start + chunk > ctx.data_end() {
            return None;
        }
        #[expect(
            clippy::cast_possible_truncation,
            reason = "chunk is at most CSUM_DIFF_MAX"
        )]
        // SAFETY: the `chunk` bytes at `start` are inside the frame (checked above); the
        // helper only reads them.
        let rc = unsafe {
            bpf_csum_diff(
                core::ptr::null_mut(),
                0,
                start as *mut u32,
                chunk as u32,
                sum,
            )
        };
        if rc < 0 {
            return None;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a non-negative answer is the 32-bit partial sum"
        )]
        {
            sum = rc as u32;
        }
        done += chunk;
    }
    Some(sum)
}
