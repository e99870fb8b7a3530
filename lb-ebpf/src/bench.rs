// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Benchmark harness programs and their maps, in the object only with the
//! `test-harness` feature (the `lb` binary's object has none of them).
//!
//! `BPF_PROG_TEST_RUN` with `repeat` reuses one buffer, so from the second repetition an
//! encapsulating program would see its own output. `lb_bench` restores the frame from
//! `BENCH_FRAME` before every repetition (shrinking the headroom back first, then
//! rewriting the Ethernet header, the only original bytes an encapsulation overwrites;
//! the benchmark verifies every long run's action against a single run), optionally
//! stamps a value into it so that repetitions are different flows (a new one each time,
//! or one drawn from a population listed in `BENCH_SEQ`), optionally alternates two
//! versions of one word (a connection's SYN, then its ACK), then tail-calls the program
//! under test in `BENCH_PROGS[0]`. `BENCH_FRAME` is per CPU, so runs on several CPUs at
//! once each keep their own repetition counter. Measuring it in front of `lb_empty` gives the harness
//! cost to subtract (`lb_tx`, which returns `XDP_TX`, is the reference of the live-frames
//! packet rate). `lb_empty` also gives a test bed's veth peer the XDP program it needs
//! to receive frames sent with `XDP_TX`; `lb_sink` drops them instead, the cheapest
//! receiver for a packet-rate benchmark.

use aya_ebpf::{
    bindings::xdp_action,
    btf_maps::{Array, PerCpuArray, ProgramArray},
    helpers::generated::bpf_xdp_adjust_head,
    macros::{btf_map, xdp},
    programs::XdpContext,
};
use lb_common::types::{BENCH_FRAME_MAX, BENCH_OUTER_RESTORED, BENCH_SEQ_MAX, BenchFrame};

use crate::packet::{frame_len, ptr_at};

/// The frame to restore before every repetition (`lb_common::maps::BENCH_FRAME`), one
/// copy per CPU: two runs on two CPUs at once (the concurrent benchmark) each count
/// their own repetitions and share no written cache line.
#[btf_map]
static BENCH_FRAME: PerCpuArray<BenchFrame, 1> = PerCpuArray::new();

/// The program under benchmark (`lb_common::maps::BENCH_PROGS`).
#[btf_map]
static BENCH_PROGS: ProgramArray<1> = ProgramArray::new();

/// The values stamped per repetition (`lb_common::maps::BENCH_SEQ`).
#[btf_map]
static BENCH_SEQ: Array<u32, { BENCH_SEQ_MAX as usize }> = Array::new();

/// Returns `XDP_PASS`: the reference program of the benchmarks.
#[xdp]
fn lb_empty(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// Returns `XDP_TX`: the reference of the live-frames packet rate.
#[xdp]
fn lb_tx(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_TX
}

/// Bytes `lb_tx_encap` pushes: an outer IPv4 header's.
const ENCAP_PUSH: u8 = 20;

/// Pushes [`ENCAP_PUSH`] bytes of headroom, copies the Ethernet header to the new
/// front and returns `XDP_TX`: the live-frames limit of a program that encapsulates
/// (what every IP-in-IP program pays besides its own work: the head adjustment, and in
/// the live-frames loop the frame's reset after it). `XDP_ABORTED` when the headroom
/// cannot grow.
#[xdp]
fn lb_tx_encap(ctx: XdpContext) -> u32 {
    // SAFETY: ctx is the program's context; a negative delta grows the headroom.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -i32::from(ENCAP_PUSH)) } != 0 {
        return xdp_action::XDP_ABORTED;
    }
    let (Some(front), Some(eth)) = (
        ptr_at::<[u16; 7]>(&ctx, 0),
        ptr_at::<[u16; 7]>(&ctx, usize::from(ENCAP_PUSH)),
    ) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: ptr_at checked both 14-byte ranges; they do not overlap (20 bytes apart).
    unsafe { core::ptr::write_volatile(front, *eth) };
    xdp_action::XDP_TX
}

/// Returns `XDP_DROP`: the receiver of a packet-rate benchmark's frames.
#[xdp]
fn lb_sink(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_DROP
}

/// Writes the first `WORDS` 2-byte words of `frame`'s bytes back at the front of the
/// packet; `None` when the packet is shorter. Volatile stores: a plain copy becomes a
/// `memmove` call, a byte loop in a BPF subprogram.
#[inline(always)]
fn restore<const WORDS: usize>(ctx: &XdpContext, frame: &BenchFrame) -> Option<()> {
    let data = ptr_at::<[u16; WORDS]>(ctx, 0)?.cast::<u16>();
    let original = frame.bytes.as_ptr().cast::<u16>();
    // SAFETY: ptr_at checked the 2 * WORDS bytes written; `bytes` (128 bytes at offset 8
    // of the 8-aligned map value) holds at least that many, 2-byte aligned.
    unsafe {
        for i in 0..WORDS {
            core::ptr::write_volatile(data.add(i), *original.add(i));
        }
    }
    Some(())
}

/// Benchmark harness: restores the frame, then tail-calls the program under test.
#[xdp]
fn lb_bench(ctx: XdpContext) -> u32 {
    restore_and_call(&ctx)
}

/// Restores the frame and tail-calls the program under test; `XDP_ABORTED` when the
/// harness itself fails (the benchmark checks the action).
#[inline(always)]
fn restore_and_call(ctx: &XdpContext) -> u32 {
    let Some(frame) = BENCH_FRAME.get_ptr_mut(0) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: this CPU's copy of the single element; a program runs to completion on
    // its CPU.
    let frame = unsafe { &mut *frame };
    let grown = frame_len(ctx).wrapping_sub(BENCH_FRAME_MAX);
    if grown != 0 {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_possible_wrap,
            reason = "the program under test grows or shrinks the frame by a few headers"
        )]
        let delta = grown as i32;
        // SAFETY: ctx is the program's context; a positive delta shrinks the headroom.
        if unsafe { bpf_xdp_adjust_head(ctx.ctx, delta) } != 0 {
            return xdp_action::XDP_ABORTED;
        }
    }
    // The load balancer pushes at most an Ethernet and an IP header in front of the
    // unchanged inner packet: only the Ethernet header differs once the headroom is
    // back. The agent rewrites or strips the outer headers: BENCH_OUTER_RESTORED bytes.
    let restored = if frame.outer_rewritten != 0 {
        restore::<{ BENCH_OUTER_RESTORED / 2 }>(ctx, frame)
    } else {
        restore::<7>(ctx, frame)
    };
    if restored.is_none() {
        return xdp_action::XDP_ABORTED;
    }
    let counter = frame.counter;
    let pair_at = frame.pair_offset as usize;
    let mut index = counter;
    if pair_at != 0 && pair_at + 4 <= BENCH_FRAME_MAX {
        index = counter >> 1;
        let word = if counter & 1 == 0 {
            // SAFETY: the bounds check above keeps the 4 bytes inside `bytes`.
            unsafe { *frame.bytes.as_ptr().add(pair_at).cast::<[u8; 4]>() }
        } else {
            frame.pair_word
        };
        let Some(field) = ptr_at::<[u8; 4]>(ctx, pair_at) else {
            return xdp_action::XDP_ABORTED;
        };
        // SAFETY: ptr_at checked the four bytes.
        unsafe { *field = word };
        frame.counter = counter.wrapping_add(1);
    }
    let at = frame.vary_offset as usize;
    if at != 0 && at + 4 <= BENCH_FRAME_MAX {
        frame.counter = counter.wrapping_add(1);
        let entries = frame.seq_entries;
        let value = if entries == 0 {
            index.to_be_bytes()
        } else {
            let Some(value) = BENCH_SEQ.get(index & entries.wrapping_sub(1)) else {
                return xdp_action::XDP_ABORTED;
            };
            value.to_ne_bytes()
        };
        let Some(field) = ptr_at::<[u8; 4]>(ctx, at) else {
            return xdp_action::XDP_ABORTED;
        };
        // SAFETY: ptr_at checked the four bytes.
        unsafe { *field = value };
    }
    // SAFETY: tail_call replaces this program on success and returns on failure.
    unsafe { BENCH_PROGS.tail_call(ctx, 0) };
    xdp_action::XDP_ABORTED
}
