//! Backend-side decapsulation: a tiny XDP program, assembled here by hand and loaded
//! with `bpf(2)`, that strips the outer IPv4 header of IPv4-in-IPv4 (protocol 4) and the
//! outer IPv6 header of IPv6-in-IPv6 (next header 41) frames, and the outer IP, UDP and
//! GUE headers of GUE frames (draft-ietf-intarea-gue variant 0, to the GUE port:
//! IPv4-in-UDP-in-IPv4, IPv6-in-UDP-in-IPv6, IPv4-in-UDP-in-IPv6), and passes the inner
//! packet to the backend's stack as if it had arrived directly. What it accepts is
//! chosen at load ([`Accept`]): a test can prove that packets came by GUE by accepting
//! nothing else.
//!
//! Why not ipip / ip6tnl devices: the project's kernels (Firecracker builds, no loadable
//! modules) are configured without `CONFIG_NET_IPIP`, `CONFIG_IPV6_TUNNEL`, FOU, GRE and
//! the tc tunnel actions, so `ip link add ... type ipip` fails with "Unknown device
//! type". The only general decapsulation left is BPF, and since the test crate has no
//! BPF toolchain of its own (no clang; lb-ebpf belongs to the data plane) the program is
//! written out below. It accepts exactly what the load balancer emits:
//! an outer IPv4 header without options (IHL 5) with protocol 4, or an outer IPv6 header
//! with next header 41 and no extension headers; for GUE, the outer header of protocol /
//! next header 17, UDP to the GUE port (its checksum is not checked: the LB sends 0), a
//! GUE header with version 0 and no options (first byte 0) whose Proto/ctype is 4 or
//! 41 (4 only inside IPv4). Every other frame passes untouched.
//!
//! Attachment is a BPF link (`BPF_LINK_CREATE`, native mode) made from a thread inside
//! the backend's namespace; the link lives as long as [`DecapLink`] and is detached when
//! it is dropped (or when the namespace, and with it the interface, is deleted).

use std::{
    ffi::CString,
    io,
    os::fd::{FromRawFd as _, OwnedFd},
};

use anyhow::{Context as _, bail};

/// `BPF_PROG_LOAD` (include/uapi/linux/bpf.h, enum bpf_cmd).
const BPF_PROG_LOAD: libc::c_long = 5;
/// `BPF_LINK_CREATE`.
const BPF_LINK_CREATE: libc::c_long = 28;
/// `BPF_PROG_TYPE_XDP` (enum bpf_prog_type).
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP` (enum bpf_attach_type).
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_DRV_MODE` (include/uapi/linux/if_link.h).
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `XDP_PASS`.
const XDP_PASS: i32 = 2;
/// Helper id of `bpf_xdp_adjust_head` (enum bpf_func_id).
const HELPER_XDP_ADJUST_HEAD: i32 = 44;

/// What the program decapsulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// IP-in-IP: IPv4-in-IPv4, IPv6-in-IPv6.
    pub ipip: bool,
    /// GUE to this UDP port (host order).
    pub gue_port: Option<u16>,
}

impl Default for Accept {
    /// Both: IP-in-IP, and GUE to the default port (`lb.toml`'s `encap.gue_port`).
    fn default() -> Self {
        Self {
            ipip: true,
            gue_port: Some(lb_common::types::GUE_DEFAULT_PORT),
        }
    }
}

impl Accept {
    /// GUE to the default port only.
    pub fn gue_only() -> Self {
        Self {
            ipip: false,
            ..Self::default()
        }
    }
}

/// The `BPF_PROG_LOAD` part of `union bpf_attr` (fields up to `expected_attach_type`;
/// the kernel zero-fills the rest).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The `BPF_LINK_CREATE` part of `union bpf_attr` for an XDP link.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// One `struct bpf_insn`: opcode, `dst_reg:4 | src_reg:4` (little endian), offset,
/// immediate.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

// Opcodes (include/uapi/linux/bpf.h, bpf_common.h).
const LDX_B: u8 = 0x71; // BPF_LDX | BPF_MEM | BPF_B
const LDX_H: u8 = 0x69; // BPF_LDX | BPF_MEM | BPF_H
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const STX_H: u8 = 0x6b; // BPF_STX | BPF_MEM | BPF_H
const ST_H: u8 = 0x6a; // BPF_ST | BPF_MEM | BPF_H
const MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const ADD64_K: u8 = 0x07; // BPF_ALU64 | BPF_ADD | BPF_K
const JGT_X: u8 = 0x2d; // BPF_JMP | BPF_JGT | BPF_X
const JEQ_K: u8 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JA: u8 = 0x05; // BPF_JMP | BPF_JA
const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

/// Jump targets of the program.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    V4,
    Gue4,
    Gue6,
    Gue4In6,
    Pass,
}

/// A minimal assembler: instructions plus forward jumps patched once labels are placed.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    fixups: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn emit(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        });
    }

    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.emit(code, dst, src, 0, imm);
    }

    fn label(&mut self, label: Label) {
        self.labels.push((label, self.insns.len()));
    }

    /// Copies the 14-byte Ethernet header at `r2` to `r2 + by`, two bytes at a time
    /// (every offset is even, so no access is misaligned for a 2-byte aligned frame).
    fn move_ethernet_header(&mut self, by: i16) {
        for off in (0..14).step_by(2) {
            self.emit(LDX_H, 5, 2, off, 0);
            self.emit(STX_H, 2, 5, off + by, 0);
        }
    }

    fn finish(mut self) -> Vec<Insn> {
        for (at, label) in std::mem::take(&mut self.fixups) {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == label)
                .map(|(_, pc)| *pc)
                .expect("every jump target is placed");
            let delta = i16::try_from(
                isize::try_from(target).expect("small") - isize::try_from(at).expect("small") - 1,
            )
            .expect("jumps are short");
            self.insns[at].off = delta;
        }
        self.insns
    }
}

/// The decapsulation program (see the module documentation) of what `accept` names.
///
/// Registers: r6 = ctx, r2 = data, r3 = data_end, r4 = bound, r5 = scratch.
fn program(accept: Accept) -> Vec<Insn> {
    let mut a = Asm::default();
    a.emit(MOV64_X, 6, 1, 0, 0); // r6 = ctx
    a.emit(LDX_W, 2, 6, 0, 0); // r2 = ctx->data
    a.emit(LDX_W, 3, 6, 4, 0); // r3 = ctx->data_end
    a.emit(MOV64_X, 4, 2, 0, 0); // r4 = data + 14 + 20
    a.emit(ADD64_K, 4, 0, 0, 34);
    a.jump(JGT_X, 4, 3, 0, Label::Pass);
    a.emit(LDX_H, 5, 2, 12, 0); // r5 = ethertype, read as a little-endian u16
    a.jump(JEQ_K, 5, 0, 0x0008, Label::V4); // 0x0800 on the wire
    a.jump(JNE_K, 5, 0, 0xdd86, Label::Pass); // 0x86dd on the wire

    // IPv6: 14 + 40 bytes of outer headers, next header (byte 6 of the IPv6 header) 41,
    // or 17 for GUE.
    a.emit(MOV64_X, 4, 2, 0, 0);
    a.emit(ADD64_K, 4, 0, 0, 54);
    a.jump(JGT_X, 4, 3, 0, Label::Pass);
    a.emit(LDX_B, 5, 2, 14 + 6, 0);
    if accept.gue_port.is_some() {
        a.jump(JEQ_K, 5, 0, 17, Label::Gue6);
    }
    if accept.ipip {
        a.jump(JNE_K, 5, 0, 41, Label::Pass);
        strip(&mut a, 40); // the ethertype stays 0x86dd
    } else {
        a.jump(JA, 0, 0, 0, Label::Pass);
    }

    // IPv4: version 4 and IHL 5 (byte 0 = 0x45), protocol (byte 9) 4, or 17 for GUE.
    a.label(Label::V4);
    a.emit(LDX_B, 5, 2, 14, 0);
    a.jump(JNE_K, 5, 0, 0x45, Label::Pass);
    a.emit(LDX_B, 5, 2, 14 + 9, 0);
    if accept.gue_port.is_some() {
        a.jump(JEQ_K, 5, 0, 17, Label::Gue4);
    }
    if accept.ipip {
        a.jump(JNE_K, 5, 0, 4, Label::Pass);
        strip(&mut a, 20); // the ethertype stays 0x0800
    } else {
        a.jump(JA, 0, 0, 0, Label::Pass);
    }

    if let Some(port) = accept.gue_port {
        gue(&mut a, port);
    }
    a.label(Label::Pass);
    a.emit(MOV64_K, 0, 0, 0, XDP_PASS);
    a.emit(EXIT, 0, 0, 0, 0);
    a.finish()
}

/// Moves the Ethernet header `by` bytes on and drops the bytes before it
/// (`bpf_xdp_adjust_head(ctx, by)`), then jumps to the end. Needs r2 = data and the
/// frame checked to `14 + by` bytes at least.
fn strip(a: &mut Asm, by: i16) {
    a.move_ethernet_header(by);
    strip_head(a, by);
}

/// `bpf_xdp_adjust_head(ctx, by)`, then a jump to the end.
fn strip_head(a: &mut Asm, by: i16) {
    a.emit(MOV64_X, 1, 6, 0, 0);
    a.emit(MOV64_K, 2, 0, 0, i32::from(by));
    a.emit(CALL, 0, 0, 0, HELPER_XDP_ADJUST_HEAD);
    a.jump(JA, 0, 0, 0, Label::Pass);
}

/// The GUE paths: the UDP destination port is `port`, the GUE header's first byte 0
/// (version 0, C 0, Hlen 0: no options), its Proto/ctype 4 inside IPv4, 41 or 4
/// inside IPv6; the outer IP, UDP and GUE headers are stripped (20 + 12 or 40 + 12
/// bytes), and the ethertype set to IPv4 for IPv4-in-IPv6.
fn gue(a: &mut Asm, port: u16) {
    // The port as the little-endian read of its two wire bytes.
    let port = i32::from(port.swap_bytes());
    for (label, ip) in [(Label::Gue4, 20), (Label::Gue6, 40)] {
        let udp = 14 + ip;
        a.label(label);
        a.emit(MOV64_X, 4, 2, 0, 0);
        a.emit(ADD64_K, 4, 0, 0, i32::from(udp + 12));
        a.jump(JGT_X, 4, 3, 0, Label::Pass);
        a.emit(LDX_H, 5, 2, udp + 2, 0);
        a.jump(JNE_K, 5, 0, port, Label::Pass);
        a.emit(LDX_B, 5, 2, udp + 8, 0);
        a.jump(JNE_K, 5, 0, 0, Label::Pass);
        a.emit(LDX_B, 5, 2, udp + 9, 0);
        if ip == 20 {
            a.jump(JNE_K, 5, 0, 4, Label::Pass);
            strip(a, ip + 12);
        } else {
            a.jump(JEQ_K, 5, 0, 4, Label::Gue4In6);
            a.jump(JNE_K, 5, 0, 41, Label::Pass);
            strip(a, ip + 12);
        }
    }
    // IPv4 inside IPv6: the moved Ethernet header says IPv4.
    a.label(Label::Gue4In6);
    a.move_ethernet_header(52);
    a.emit(ST_H, 2, 0, 52 + 12, 0x0008);
    strip_head(a, 52);
}

/// Calls `bpf(cmd, attr, size_of(attr))` and returns the new file descriptor.
fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<OwnedFd> {
    let size = libc::c_uint::try_from(size_of::<T>()).expect("attr is small");
    // SAFETY: attr points to a live, initialised repr(C) prefix of union bpf_attr of
    // `size` bytes; the kernel only reads it (and the buffers it points to, which the
    // caller keeps alive for the call).
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_ref(attr), size) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(rc).map_err(|_| io::Error::other("bpf returned a huge fd"))?;
    // SAFETY: on success these commands return a new file descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Loads the program of what `accept` names; on a verifier rejection the error carries
/// the verifier's log.
fn load_program(accept: Accept) -> anyhow::Result<OwnedFd> {
    let insns = program(accept);
    let license = c"GPL";
    let mut name = [0u8; 16];
    name[..8].copy_from_slice(b"tb_decap");
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: u32::try_from(insns.len()).expect("short program"),
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_XDP,
        ..ProgLoadAttr::default()
    };
    match bpf(BPF_PROG_LOAD, &attr) {
        Ok(fd) => Ok(fd),
        Err(first) => {
            let mut log = vec![0u8; 1 << 16];
            attr.log_level = 1;
            attr.log_size = u32::try_from(log.len()).expect("64 KiB");
            attr.log_buf = log.as_mut_ptr() as u64;
            let again = bpf(BPF_PROG_LOAD, &attr);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            bail!(
                "loading the decapsulation program: {first} ({again:?}); verifier log:\n{}",
                String::from_utf8_lossy(&log[..end])
            )
        }
    }
}

/// The decapsulation program attached to one interface; detached on drop.
#[derive(Debug)]
pub struct DecapLink {
    _link: OwnedFd,
}

impl DecapLink {
    /// Loads the program and attaches it in native mode to `iface`, an interface of the
    /// calling thread's network namespace (call it from [`crate::netns::NetNs::enter`]).
    ///
    /// # Errors
    /// When the interface does not exist, the program is rejected, or the attachment
    /// fails (an XDP program is already attached, no native XDP support).
    pub fn attach(iface: &str) -> anyhow::Result<Self> {
        Self::attach_accepting(iface, Accept::default())
    }

    /// As [`Self::attach`], decapsulating only what `accept` names.
    ///
    /// # Errors
    /// As [`Self::attach`].
    pub fn attach_accepting(iface: &str, accept: Accept) -> anyhow::Result<Self> {
        let c_iface = CString::new(iface).context("interface name")?;
        // SAFETY: c_iface is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(c_iface.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("no interface {iface}"));
        }
        let prog = load_program(accept)?;
        let attr = LinkCreateAttr {
            prog_fd: u32::try_from(std::os::fd::AsRawFd::as_raw_fd(&prog)).context("program fd")?,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: XDP_FLAGS_DRV_MODE,
        };
        // The link holds its own reference on the program, so `prog` may be closed.
        let link = bpf(BPF_LINK_CREATE, &attr)
            .with_context(|| format!("attaching the decapsulation program to {iface}"))?;
        Ok(Self { _link: link })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packets::{
        self, CLIENT4, CLIENT6, Flow, GW_MAC, Gue, L4, LB_MAC, Outer, SYN, VIP4, VIP6,
        encapsulated_with,
    };

    /// `BPF_PROG_TEST_RUN`.
    const BPF_PROG_TEST_RUN: libc::c_long = 10;

    /// The `test` part of `union bpf_attr` (up to `duration`).
    #[repr(C)]
    #[derive(Default)]
    struct TestRunAttr {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        repeat: u32,
        duration: u32,
    }

    /// Runs the program of `accept` once on `frame`; its action and output frame.
    fn run(accept: Accept, frame: &[u8]) -> (u32, Vec<u8>) {
        let prog = load_program(accept).expect("load");
        let mut out = vec![0u8; frame.len() + 256];
        let attr = TestRunAttr {
            prog_fd: u32::try_from(std::os::fd::AsRawFd::as_raw_fd(&prog)).expect("fd"),
            data_size_in: u32::try_from(frame.len()).expect("small"),
            data_size_out: u32::try_from(out.len()).expect("small"),
            data_in: frame.as_ptr() as u64,
            data_out: out.as_mut_ptr() as u64,
            repeat: 1,
            ..TestRunAttr::default()
        };
        let size = libc::c_uint::try_from(size_of::<TestRunAttr>()).expect("small");
        // SAFETY: attr is a live repr(C) prefix of union bpf_attr; the buffers it names
        // outlive the call and have the lengths given; the kernel writes back retval,
        // data_size_out and duration into attr.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                std::ptr::from_ref(&attr),
                size,
            )
        };
        assert_eq!(rc, 0, "test run: {}", io::Error::last_os_error());
        out.truncate(usize::try_from(attr.data_size_out).expect("small"));
        (attr.retval, out)
    }

    /// `frame` as the backend's stack sees it after decapsulation: the outer Ethernet
    /// addresses, then the inner frame's ethertype and packet.
    fn decapsulated(frame: &[u8]) -> Vec<u8> {
        let mut out = GW_MAC.to_vec();
        out.extend_from_slice(&LB_MAC);
        out.extend_from_slice(&frame[12..]);
        out
    }

    fn gue(port: u16) -> Outer {
        Outer {
            gue: Some(Gue {
                sport: 50_000,
                dport: port,
            }),
            ..Outer::default()
        }
    }

    #[test]
    fn gue_and_ip_in_ip_frames_come_out_as_the_inner_frame_others_untouched() {
        assert!(crate::is_root(), "privileged test: run as root");
        let port = lb_common::types::GUE_DEFAULT_PORT;
        let v4 = Flow::new(CLIENT4, 40000, VIP4, 80).frame(L4::Tcp(SYN), b"x");
        let v6 = Flow::new(CLIENT6, 40000, VIP6, 80).frame(L4::Tcp(SYN), b"x");
        let b4 = std::net::IpAddr::from(packets::backend4(1));
        let b6 = std::net::IpAddr::from(packets::backend6(1));
        // (inner frame, backend, outer fields): 4-in-4, 6-in-6, 4-in-6, by GUE and IP-in-IP.
        let cases = [
            (&v4, b4, gue(port)),
            (&v6, b6, gue(port)),
            (&v4, b6, gue(port)),
            (&v4, b4, Outer::default()),
            (&v6, b6, Outer::default()),
        ];
        for (inner, backend, outer) in cases {
            let frame = encapsulated_with(inner, backend, GW_MAC, LB_MAC, &outer);
            let (action, out) = run(Accept::default(), &frame);
            assert_eq!(action, 2, "XDP_PASS");
            assert_eq!(out, decapsulated(inner), "{backend} {outer:?}");
            // GUE only: IP-in-IP passes untouched, and the reverse.
            let only = if outer.gue.is_some() {
                Accept {
                    ipip: true,
                    gue_port: None,
                }
            } else {
                Accept::gue_only()
            };
            assert_eq!(run(only, &frame).1, frame, "{only:?} {backend} {outer:?}");
        }
        // Another UDP port, or a GUE header with options (Hlen 1), passes untouched.
        let other = encapsulated_with(&v4, b4, GW_MAC, LB_MAC, &gue(port + 1));
        assert_eq!(run(Accept::default(), &other).1, other);
        let mut hlen = encapsulated_with(&v4, b4, GW_MAC, LB_MAC, &gue(port));
        hlen[42] = 1;
        assert_eq!(run(Accept::default(), &hlen).1, hlen);
    }

    #[test]
    fn jumps_land_inside_the_program() {
        let gue_only = Accept::gue_only();
        let ipip_only = Accept {
            ipip: true,
            gue_port: None,
        };
        for accept in [Accept::default(), gue_only, ipip_only] {
            let insns = program(accept);
            for (pc, insn) in insns.iter().enumerate() {
                if matches!(insn.code, JGT_X | JEQ_K | JNE_K | JA) {
                    let target = i64::try_from(pc).expect("small") + 1 + i64::from(insn.off);
                    let target = usize::try_from(target).expect("forward of the start");
                    assert!(target > pc && target < insns.len(), "{accept:?} {pc}");
                }
            }
            assert_eq!(insns.last().map(|i| i.code), Some(EXIT));
        }
        assert_eq!(program(ipip_only).len(), 56, "IP-in-IP alone");
    }
}
