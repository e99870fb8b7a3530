// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The outer headers and the FIB lookup of the IP-in-IP encapsulation, built alike for
//! client packets ([`forward`](crate::forward), XDP) and for tunnel-mode health probes
//! ([`probe`](crate::probe), TC egress).
//!
//! Outer IPv4 ([`ipv4!`], RFC 2003, protocol 4): TTL 64, TOS, identification and DF
//! copied from the inner IPv4 header, then the header checksum (`csum`, a full carry
//! fold, RFC 1071). Outer IPv6 ([`ipv6!`], RFC 2473, next header 41, or 4 for
//! IPv4-in-IPv6): hop limit 64, its first word (version, traffic class, flow label)
//! given by the caller. MACs are held as three 2-byte words in memory order
//! ([`mac_words`]).
//!
//! The FIB lookup asks `bpf_fib_lookup` with `BPF_FIB_LOOKUP_OUTPUT` (the LB originates
//! the outer packet) for the route from the configured encap source to the backend
//! ([`fib_params`], [`fib_lookup`]). Each program acts on the answer in its own way:
//! the XDP path drops a packet whose neighbour is unresolved, the probe lets
//! `bpf_redirect_neigh` resolve it.
//!
//! The outer source: a client packet takes its flow's ([`source_v4`], [`source_v6`]),
//! the configured address or, with a source prefix, the prefix with host bits from the
//! flow hash. A health probe always takes the configured address: it is one flow of the
//! LB's own, with no client flows to spread over a backend's receive queues, and the TC
//! program does not parse the packet to hash it. So a backend must accept tunnels from
//! the configured address as well as from the prefix. The FIB lookup takes the
//! configured address for both.

use core::{mem::MaybeUninit, num::TryFromIntError};

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, BPF_FIB_LOOKUP_OUTPUT,
        bpf_fib_lookup as FibParams,
    },
    helpers::generated::bpf_fib_lookup,
    programs::{TcContext, XdpContext},
};
use lb_common::types::{
    BackendEntry, CONFIG_SOURCE_PREFIX_V4, CONFIG_SOURCE_PREFIX_V6, GUE_HDR_LEN, GUE_UDP_LEN,
    LbConfig,
};

use crate::headers::{Ipv4Hdr, Ipv6Hdr, UdpGueHdr, addr_words};

/// Bytes of an outer IPv4 header.
pub(crate) const IPV4_LEN: u32 = 20;
/// Bytes of an outer IPv6 header.
pub(crate) const IPV6_LEN: u32 = 40;
/// Size of `struct bpf_fib_lookup` as the helper's `int plen`.
const FIB_PARAMS_LEN: i32 = 64;
const _: () = assert!(
    IPV4_LEN as usize == size_of::<Ipv4Hdr>()
        && IPV6_LEN as usize == size_of::<Ipv6Hdr>()
        && FIB_PARAMS_LEN as usize == size_of::<FibParams>()
);
/// TTL and hop limit of the outer header.
pub(crate) const OUTER_TTL: u8 = 64;
/// IP-in-IP: an IPv4 packet inside.
pub(crate) const IPPROTO_IPIP: u8 = 4;
/// An IPv6 packet inside.
pub(crate) const IPPROTO_IPV6: u8 = 41;
/// UDP: the outer protocol of GUE.
pub(crate) const IPPROTO_UDP: u8 = 17;
/// Bytes GUE adds after the outer IP header: UDP (8) and the GUE base header (4).
pub(crate) const GUE_LEN: u32 = GUE_UDP_LEN + GUE_HDR_LEN;
/// [`GUE_LEN`] as a `u16`, for header length fields.
pub(crate) const GUE_LEN_U16: u16 = 12;
/// An outer IPv4 header and the GUE headers, as a `u16`.
pub(crate) const IPV4_GUE_LEN_U16: u16 = 32;
const _: () = assert!(
    GUE_LEN as usize == size_of::<UdpGueHdr>()
        && GUE_LEN_U16 as u32 == GUE_LEN
        && IPV4_GUE_LEN_U16 as u32 == IPV4_LEN + GUE_LEN
);
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// EtherType IPv4, wire order.
pub(crate) const ETH_P_IP: u16 = 0x0800_u16.to_be();
/// EtherType IPv6, wire order.
pub(crate) const ETH_P_IPV6: u16 = 0x86dd_u16.to_be();
/// [`fib_lookup`]: found.
pub(crate) const FIB_FOUND: u32 = BPF_FIB_LKUP_RET_SUCCESS;
/// [`fib_lookup`]: a route, but its neighbour is unresolved.
pub(crate) const FIB_NO_NEIGH: u32 = BPF_FIB_LKUP_RET_NO_NEIGH;
/// IPv4 "don't fragment" bit in the flags/fragment-offset field (RFC 791), wire order.
pub(crate) const IPV4_DF: u16 = 0x4000_u16.to_be();

/// The outer IPv4 header (an expression), `$tot_len` bytes in all (`u16`, host order),
/// over an inner IPv4 header's `$tos`, `$id` and `$frag`, from `$src` to `$dst` (wire
/// order), of protocol `$proto` ([`IPPROTO_IPIP`], or [`IPPROTO_UDP`] for GUE); `check`
/// is 0 until the caller sets it
/// ([`csum::ipv4_header`](crate::csum::ipv4_header)).
///
/// Macros, not functions, so that each header stays one struct literal in its caller:
/// returned by a function, the same header compiled to other instruction orders and
/// changed the verifier's instruction counts.
macro_rules! ipv4 {
    ($tos:expr, $id:expr, $frag:expr, $tot_len:expr, $proto:expr, $src:expr, $dst:expr $(,)?) => {
        $crate::headers::Ipv4Hdr {
            vihl: 0x45,
            tos: $tos,
            tot_len: $tot_len.to_be(),
            id: $id,
            frag: $frag & $crate::encap::IPV4_DF,
            ttl: $crate::encap::OUTER_TTL,
            proto: $proto,
            check: 0,
            src: $src,
            dst: $dst,
        }
    };
}
pub(crate) use ipv4;

/// The outer IPv6 header (an expression) with first word `$vtcfl` (wire order) over
/// `$plen` bytes (`u16`, host order) of an inner packet of kind `$next`, from `$src` to
/// `$dst` (wire order). A macro for the reason [`ipv4!`] gives.
macro_rules! ipv6 {
    ($vtcfl:expr, $plen:expr, $next:expr, $src:expr, $dst:expr $(,)?) => {
        $crate::headers::Ipv6Hdr {
            vtcfl: $vtcfl,
            plen: $plen.to_be(),
            next: $next,
            hop_limit: $crate::encap::OUTER_TTL,
            src: $src,
            dst: $dst,
        }
    };
}
pub(crate) use ipv6;

/// The UDP and GUE headers (an expression) after the outer IP header: source port
/// `$sport`, destination port `$dport` (both wire order), over an inner packet of
/// `$inner_len` bytes (`u16`, host order) of kind `$inner` ([`IPPROTO_IPIP`] or
/// [`IPPROTO_IPV6`], the GUE variant 0 header's Proto/ctype field, whose other fields
/// are zero: version 0, C 0, Hlen 0, no flags). The UDP checksum is 0: "no checksum"
/// for IPv4 (RFC 768), and allowed for IPv6 tunnels by RFC 6935 and RFC 6936 (the
/// backend's decapsulator must accept it, as a Linux `fou` socket does; see the GUE
/// design note). A macro for the reason [`ipv4!`] gives.
macro_rules! udp_gue {
    ($sport:expr, $dport:expr, $inner_len:expr, $inner:expr $(,)?) => {
        $crate::headers::UdpGueHdr {
            sport: $sport,
            dport: $dport,
            len: ($inner_len + $crate::encap::GUE_LEN_U16).to_be(),
            check: 0,
            gue: u32::from_ne_bytes([0, $inner, 0, 0]),
        }
    };
}
pub(crate) use udp_gue;

/// A client packet's outer IPv4 source: the configured address, or the prefix with the
/// flow hash in its host bits.
#[inline(always)]
pub(crate) fn source_v4(cfg: &LbConfig, hash: u32) -> u32 {
    if cfg.flags & CONFIG_SOURCE_PREFIX_V4 == 0 {
        return u32::from_ne_bytes(cfg.src_v4);
    }
    let mask = cfg.src_host_mask_v4;
    (u32::from_ne_bytes(cfg.src_prefix_v4) & !mask) | (hash.to_be() & mask)
}

/// A client packet's outer IPv6 source (as [`source_v4`], host bits in the last word).
#[inline(always)]
pub(crate) fn source_v6(cfg: &LbConfig, hash: u32) -> [u32; 4] {
    if cfg.flags & CONFIG_SOURCE_PREFIX_V6 == 0 {
        return addr_words(&cfg.src_v6);
    }
    let mut src = addr_words(&cfg.src_prefix_v6);
    let mask = cfg.src_host_mask_v6;
    src[3] = (src[3] & !mask) | (hash.to_be() & mask);
    src
}

/// A MAC address as three 2-byte words in memory order.
#[inline(always)]
pub(crate) fn mac_words(m: &[u8; 6]) -> [u16; 3] {
    [
        u16::from_ne_bytes([m[0], m[1]]),
        u16::from_ne_bytes([m[2], m[3]]),
        u16::from_ne_bytes([m[4], m[5]]),
    ]
}

/// [`mac_words`] of a MAC that is 2-byte aligned, read as three words: byte reads each
/// take a register, which a caller short of registers spills to its stack.
///
/// # Safety
/// `m` must be 2-byte aligned.
#[inline(always)]
pub(crate) unsafe fn aligned_mac_words(m: &[u8; 6]) -> [u16; 3] {
    let w = m.as_ptr().cast::<u16>();
    // SAFETY: three aligned words inside the 6 bytes (the caller's contract).
    unsafe { [*w, *w.add(1), *w.add(2)] }
}

/// The MACs of a FIB answer, `(dmac, smac)`, as [`mac_words`].
#[inline(always)]
pub(crate) fn fib_macs(params: &FibParams) -> ([u16; 3], [u16; 3]) {
    // SAFETY: both sit at even offsets of the 4-byte aligned struct (asserted below).
    unsafe {
        (
            aligned_mac_words(&params.dmac),
            aligned_mac_words(&params.smac),
        )
    }
}

const _: () = assert!(
    core::mem::offset_of!(FibParams, dmac) % 2 == 0
        && core::mem::offset_of!(FibParams, smac) % 2 == 0
        && align_of::<FibParams>() >= 2
);

/// Inverse of [`mac_words`].
#[inline(always)]
pub(crate) fn words_mac(w: [u16; 3]) -> [u8; 6] {
    let [a, b] = w[0].to_ne_bytes();
    let [c, d] = w[1].to_ne_bytes();
    let [e, f] = w[2].to_ne_bytes();
    [a, b, c, d, e, f]
}

/// A program context whose packet's interface the FIB lookup starts from.
pub(crate) trait Interface: EbpfContext {
    /// The interface index: where an XDP packet arrived, where a TC egress packet leaves.
    fn ifindex(&self) -> u32;
}

impl Interface for XdpContext {
    #[inline(always)]
    fn ifindex(&self) -> u32 {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "interface indexes are u32 in the kernel"
        )]
        let ifindex = self.ingress_ifindex() as u32;
        ifindex
    }
}

impl Interface for TcContext {
    #[inline(always)]
    fn ifindex(&self) -> u32 {
        // SAFETY: the context's skb pointer is valid for the program's run.
        unsafe { (*self.skb.skb).ifindex }
    }
}

/// The parameters of the FIB lookup of an outer packet (IPv4 when `v4`) from the
/// configured source to `backend`, from `ctx`'s interface, written into `params`.
///
/// Written as sixteen whole words (the layout is checked below), in place: `mem::zeroed`
/// and field stores compile to a call of `memset`, a byte loop that the verifier walks
/// 64 times at every FIB lookup it explores, and a value built elsewhere and moved here
/// costs another 64 bytes of the stack. The stores are volatile, so LLVM cannot merge the
/// zero words back into `memset`.
#[inline(always)]
pub(crate) fn fib_params<'a, C: Interface>(
    ctx: &C,
    v4: bool,
    backend: &BackendEntry,
    cfg: &LbConfig,
    params: &'a mut MaybeUninit<FibParams>,
) -> &'a mut FibParams {
    let (family, proto) = if v4 {
        (AF_INET, IPPROTO_IPIP)
    } else {
        (AF_INET6, IPPROTO_IPV6)
    };
    let dst = addr_words(&backend.addr);
    let words = params.as_mut_ptr().cast::<u32>();
    let put = |i: usize, word: u32| {
        // SAFETY: `i` < 16 words of 4 bytes, within the 64-byte struct, which is 4-byte
        // aligned (its fields are at most 4 bytes wide).
        unsafe { words.add(i).write_volatile(word) };
    };
    put(0, u32::from(family) | u32::from(proto) << 8);
    put(1, 0);
    put(2, ctx.ifindex());
    put(3, 0);
    if v4 {
        put(4, u32::from_ne_bytes(cfg.src_v4));
        put(8, dst[0]);
        for i in 1..4 {
            put(4 + i, 0);
            put(8 + i, 0);
        }
    } else {
        let src = addr_words(&cfg.src_v6);
        for i in 0..4 {
            put(4 + i, src[i]);
            put(8 + i, dst[i]);
        }
    }
    for i in 12..16 {
        put(i, 0);
    }
    // SAFETY: every byte was written; all bit patterns are a valid bpf_fib_lookup (plain
    // old data).
    unsafe { params.assume_init_mut() }
}

// The word layout `fib_params` builds (`struct bpf_fib_lookup`, little-endian BPF).
const _: () = assert!(
    core::mem::offset_of!(FibParams, family) == 0
        && core::mem::offset_of!(FibParams, l4_protocol) == 1
        && core::mem::offset_of!(FibParams, ifindex) == 8
        && core::mem::offset_of!(FibParams, __bindgen_anon_3) == 16
        && core::mem::offset_of!(FibParams, __bindgen_anon_4) == 32
);

/// Looks the next hop of `params` up from program context `ctx`; the helper writes its
/// answer into `params` and returns [`FIB_FOUND`] (both MACs and the egress
/// interface), [`FIB_NO_NEIGH`] (a route whose neighbour is unresolved: the egress
/// interface) or another code (no route, or the lookup failed).
#[inline(always)]
pub(crate) fn fib_lookup<C: EbpfContext>(
    ctx: &C,
    params: &mut FibParams,
) -> Result<u32, TryFromIntError> {
    // SAFETY: the context is the program's and params a valid, initialised struct of
    // the size passed.
    let rc = unsafe {
        bpf_fib_lookup(
            ctx.as_ptr(),
            &raw mut *params,
            FIB_PARAMS_LEN,
            BPF_FIB_LOOKUP_OUTPUT,
        )
    };
    u32::try_from(rc)
}
