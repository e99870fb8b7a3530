//! Packet builders for fixtures and traffic, using etherparse (no hand-written headers),
//! and the expected encapsulated output built independently of the XDP program.
//!
//! Addresses, the same in every test and in `docs/src/operations/failure-scenarios.md`: client
//! 192.0.2.10 / 2001:db8:c::10, LB (outer source) 192.0.2.1 / 2001:db8:c::1, VIPs 203.0.113.10 / 2001:db8:f::10, backend k at
//! 198.51.100.(10+k) / 2001:db8:b::(10+k); MACs: LB 02:00:00:00:00:01, client
//! 02:00:00:00:00:0a, gateway 02:00:00:00:00:fe.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    EtherType, Ethernet2Header, IpHeaders, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv6Header,
    Ipv6HeaderSlice, PacketBuilder, TcpHeader,
};

/// MAC of the load balancer's interface.
pub const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// MAC of the default client.
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
/// MAC of the LB's gateway (next hop in gateway mode).
pub const GW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
/// LB address, IPv4 (outer source).
pub const LB4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// LB address, IPv6 (outer source).
pub const LB6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1);
/// Client C1, IPv4.
pub const CLIENT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// Client C1, IPv6.
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 0x10);
/// VIP4.
pub const VIP4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// VIP6.
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10);

/// Backend k's IPv4 address, 198.51.100.(10+k).
pub fn backend4(k: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, 10 + k)
}

/// Backend k's IPv6 address, 2001:db8:b::(10+k).
pub fn backend6(k: u8) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x10 + u16::from(k))
}

/// TCP flags of a built segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpFlags {
    /// SYN.
    pub syn: bool,
    /// ACK.
    pub ack: bool,
    /// RST.
    pub rst: bool,
    /// FIN.
    pub fin: bool,
}

/// SYN only.
pub const SYN: TcpFlags = TcpFlags {
    syn: true,
    ack: false,
    rst: false,
    fin: false,
};
/// ACK only.
pub const ACK: TcpFlags = TcpFlags {
    syn: false,
    ack: true,
    rst: false,
    fin: false,
};
/// RST only.
pub const RST: TcpFlags = TcpFlags {
    syn: false,
    ack: false,
    rst: true,
    fin: false,
};

/// Transport of a built packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// TCP with these flags.
    Tcp(TcpFlags),
    /// UDP.
    Udp,
}

/// A client → VIP flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// Client address.
    pub src: IpAddr,
    /// Client port.
    pub sport: u16,
    /// Destination (VIP) address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
}

/// A real TCP connection within the calling thread's namespace, to a local address (a
/// VIP on its loopback): the listener, both ends, and the client's flow. The sockets
/// close when it is dropped.
#[derive(Debug)]
pub struct LocalConnection {
    /// The listening socket on `vip:port`.
    pub listener: std::net::TcpListener,
    /// The client's end.
    pub client: std::net::TcpStream,
    /// The accepted end.
    pub server: std::net::TcpStream,
    /// The client's flow (its address and port, to `vip:port`).
    pub flow: Flow,
}

impl LocalConnection {
    /// Listens on `vip:port`, connects to it and accepts.
    ///
    /// # Errors
    /// When `vip` is not a local address of the namespace, or a socket call fails.
    pub fn open(vip: IpAddr, port: u16) -> std::io::Result<Self> {
        let at = std::net::SocketAddr::new(vip, port);
        let listener = std::net::TcpListener::bind(at)?;
        let client = std::net::TcpStream::connect(at)?;
        let (server, _) = listener.accept()?;
        let local = client.local_addr()?;
        Ok(Self {
            listener,
            client,
            server,
            flow: Flow::new(local.ip(), local.port(), vip, port),
        })
    }
}

impl Flow {
    /// A flow from `src:sport` to `dst:dport`.
    pub fn new(src: impl Into<IpAddr>, sport: u16, dst: impl Into<IpAddr>, dport: u16) -> Self {
        Self {
            src: src.into(),
            sport,
            dst: dst.into(),
            dport,
        }
    }

    /// The IP header of this flow with `payload_len` bytes after it (TTL 64).
    pub fn ip_headers(&self, proto: IpNumber, payload_len: usize) -> IpHeaders {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = Ipv4Header::new(
                    u16::try_from(payload_len).expect("payload fits"),
                    64,
                    proto,
                    s.octets(),
                    d.octets(),
                )
                .expect("valid IPv4 header");
                h.identification = 0x1234;
                h.dont_fragment = true;
                IpHeaders::Ipv4(h, Default::default())
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => IpHeaders::Ipv6(
                Ipv6Header {
                    traffic_class: 0,
                    flow_label: Default::default(),
                    payload_length: u16::try_from(payload_len).expect("payload fits"),
                    next_header: proto,
                    hop_limit: 64,
                    source: s.octets(),
                    destination: d.octets(),
                },
                Default::default(),
            ),
            _ => panic!("mixed address families in {self:?}"),
        }
    }

    /// A frame of this flow with the given transport and payload.
    pub fn frame(&self, l4: L4, payload: &[u8]) -> Vec<u8> {
        let proto = match l4 {
            L4::Tcp(_) => IpNumber::TCP,
            L4::Udp => IpNumber::UDP,
        };
        self.frame_with_ip(self.ip_headers(proto, 0), l4, payload)
    }

    /// A SYN of this flow whose initial sequence number is `isn` (the other frames use
    /// 1000): a new connection on the same 4-tuple has another one.
    pub fn syn_with_isn(&self, isn: u32) -> Vec<u8> {
        self.build(self.ip_headers(IpNumber::TCP, 0), L4::Tcp(SYN), &[], isn)
    }

    /// A frame of this flow whose IP header (with options or extension headers) is
    /// `ip`; lengths and checksums are filled in by etherparse.
    pub fn frame_with_ip(&self, ip: IpHeaders, l4: L4, payload: &[u8]) -> Vec<u8> {
        self.build(ip, l4, payload, 1000)
    }

    /// The frame, TCP sequence number `seq`.
    fn build(&self, ip: IpHeaders, l4: L4, payload: &[u8], seq: u32) -> Vec<u8> {
        let base = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC).ip(ip);
        let mut frame = Vec::new();
        match l4 {
            L4::Tcp(flags) => {
                let mut tcp = TcpHeader::new(self.sport, self.dport, seq, 64240);
                tcp.syn = flags.syn;
                tcp.ack = flags.ack;
                tcp.rst = flags.rst;
                tcp.fin = flags.fin;
                if flags.ack {
                    tcp.acknowledgment_number = 5001;
                }
                base.tcp_header(tcp)
                    .write(&mut frame, payload)
                    .expect("write to Vec");
            }
            L4::Udp => {
                base.udp(self.sport, self.dport)
                    .write(&mut frame, payload)
                    .expect("write to Vec");
            }
        }
        frame
    }
}

/// The frame the load balancer must emit for `frame` sent to `backend`: Ethernet
/// `dmac` ← `smac`, then an outer IPv4 (protocol 4: TTL 64, TOS, identification and DF
/// copied from the inner header, source [`LB4`]) or IPv6 (next header 41: hop limit 64,
/// traffic class and flow label copied, source [`LB6`]) header, then every byte of the
/// frame after its Ethernet header, unchanged.
pub fn encapsulated(frame: &[u8], backend: IpAddr, dmac: [u8; 6], smac: [u8; 6]) -> Vec<u8> {
    encapsulated_with(frame, backend, dmac, smac, &Outer::default())
}

/// What differs from the defaults in an outer header: its source (per-flow source
/// prefixes) and its IPv6 flow label (from the flow hash).
#[derive(Clone, Copy, Debug, Default)]
pub struct Outer {
    /// Outer source; default [`LB4`] / [`LB6`].
    pub src: Option<IpAddr>,
    /// IPv6 flow label; default copied from an IPv6 inner header (0 for IPv4 inside).
    pub flow_label: Option<u32>,
    /// GUE instead of IP-in-IP: the UDP and GUE variant 0 headers after the outer IP
    /// header.
    pub gue: Option<Gue>,
}

/// The UDP ports of a GUE-encapsulated frame (host order); the UDP checksum is 0 and
/// the GUE header is version 0 without flags or options, Proto/ctype the inner
/// packet's (4 or 41).
#[derive(Clone, Copy, Debug)]
pub struct Gue {
    /// UDP source port (from the flow hash).
    pub sport: u16,
    /// UDP destination port (the configured GUE port).
    pub dport: u16,
}

impl Gue {
    /// The 12 bytes of UDP and GUE header in front of an inner packet of `inner_len`
    /// bytes of IP protocol `inner`.
    fn header(&self, inner_len: usize, inner: IpNumber) -> Vec<u8> {
        let len = u16::try_from(inner_len + 12).expect("fits a UDP length");
        let mut out = Vec::new();
        out.extend_from_slice(&self.sport.to_be_bytes());
        out.extend_from_slice(&self.dport.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, inner.0, 0, 0]);
        out
    }
}

/// [`encapsulated`] with the outer fields of `outer`. The inner packet's family is the
/// frame's EtherType; an IPv4 packet to an IPv6 backend gets an IPv6 header with next
/// header 4 (IPv4-in-IPv6) and the inner TOS as traffic class. With [`Outer::gue`], the
/// outer header's protocol is UDP, its length 12 bytes more, and the UDP and GUE
/// headers precede the inner packet.
pub fn encapsulated_with(
    frame: &[u8],
    backend: IpAddr,
    dmac: [u8; 6],
    smac: [u8; 6],
    outer: &Outer,
) -> Vec<u8> {
    let inner = &frame[Ethernet2Header::LEN..];
    let inner_v4 = frame[12..14] == [0x08, 0x00];
    let inner_proto = if inner_v4 {
        IpNumber::IPV4
    } else {
        IpNumber::IPV6
    };
    let (extra, proto) = match outer.gue {
        Some(_) => (12, IpNumber::UDP),
        None => (0, inner_proto),
    };
    let mut out = Vec::new();
    let eth = |ether_type| Ethernet2Header {
        destination: dmac,
        source: smac,
        ether_type,
    };
    match backend {
        IpAddr::V4(b) => {
            let h = Ipv4HeaderSlice::from_slice(inner)
                .expect("inner IPv4")
                .to_header();
            let src = match outer.src {
                Some(IpAddr::V4(s)) => s,
                _ => LB4,
            };
            let mut o = Ipv4Header::new(h.total_len + extra, 64, proto, src.octets(), b.octets())
                .expect("outer header");
            o.dscp = h.dscp;
            o.ecn = h.ecn;
            o.identification = h.identification;
            o.dont_fragment = h.dont_fragment;
            o.header_checksum = o.calc_header_checksum();
            eth(EtherType::IPV4).write(&mut out).expect("write");
            o.write(&mut out).expect("write");
        }
        IpAddr::V6(b) => {
            let (traffic_class, label, payload_length, next_header) = if inner_v4 {
                let h = Ipv4HeaderSlice::from_slice(inner)
                    .expect("inner IPv4")
                    .to_header();
                let tos = (h.dscp.value() << 2) | h.ecn.value();
                (tos, 0, h.total_len, IpNumber::IPV4)
            } else {
                let h = Ipv6HeaderSlice::from_slice(inner)
                    .expect("inner IPv6")
                    .to_header();
                (
                    h.traffic_class,
                    h.flow_label.value(),
                    h.payload_length + 40,
                    IpNumber::IPV6,
                )
            };
            let src = match outer.src {
                Some(IpAddr::V6(s)) => s,
                _ => LB6,
            };
            let o = Ipv6Header {
                traffic_class,
                flow_label: etherparse::Ipv6FlowLabel::try_new(outer.flow_label.unwrap_or(label))
                    .expect("20 bits"),
                payload_length: payload_length + extra,
                next_header: if outer.gue.is_some() {
                    IpNumber::UDP
                } else {
                    next_header
                },
                hop_limit: 64,
                source: src.octets(),
                destination: b.octets(),
            };
            eth(EtherType::IPV6).write(&mut out).expect("write");
            o.write(&mut out).expect("write");
        }
    }
    if let Some(gue) = outer.gue {
        out.extend_from_slice(&gue.header(inner.len(), inner_proto));
    }
    out.extend_from_slice(inner);
    out
}

/// `frame` with an 802.1Q tag of TCI `tci` inserted after its MAC addresses.
pub fn tagged(frame: &[u8], tci: u16) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    out.extend_from_slice(&[0x81, 0x00]);
    out.extend_from_slice(&tci.to_be_bytes());
    out.extend_from_slice(&frame[12..]);
    out
}

/// The outer destination (the chosen backend) of an encapsulated frame.
pub fn outer_destination(frame: &[u8]) -> Option<IpAddr> {
    let ip = frame.get(Ethernet2Header::LEN..)?;
    match u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]) {
        0x0800 => Ipv4HeaderSlice::from_slice(ip)
            .ok()
            .map(|h| IpAddr::V4(h.destination_addr())),
        0x86dd => Ipv6HeaderSlice::from_slice(ip)
            .ok()
            .map(|h| IpAddr::V6(h.destination_addr())),
        _ => None,
    }
}

/// An ARP request frame (who-has `target` tell `sender`), broadcast.
pub fn arp_request(sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let arp = etherparse::ArpPacket::new(
        etherparse::ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        etherparse::ArpOperation::REQUEST,
        &CLIENT_MAC,
        &sender.octets(),
        &[0; 6],
        &target.octets(),
    )
    .expect("valid ARP");
    let mut out = Vec::new();
    Ethernet2Header {
        destination: [0xff; 6],
        source: CLIENT_MAC,
        ether_type: EtherType::ARP,
    }
    .write(&mut out)
    .expect("write");
    out.extend_from_slice(&arp.to_bytes());
    out
}

/// A GUE frame (Ethernet, outer IPv4 or IPv6 header, UDP, GUE without options) with
/// the second-chance candidates `sc` inserted as GUE private data: Hlen set, the
/// outer IP length, the UDP length and the IPv4 header checksum rewritten.
pub fn with_candidates(frame: &[u8], sc: &lb_common::types::SecondChance) -> Vec<u8> {
    let v4 = frame[12..14] == [0x08, 0x00];
    let udp = if v4 { 34 } else { 54 };
    let gue = udp + 8;
    let mut header = [0u8; 4 + lb_common::types::SECOND_CHANCE_MAX_LEN];
    let n = sc.write_gue(frame[gue + 1], &mut header).expect("fits");
    let mut out = frame[..gue].to_vec();
    out.extend_from_slice(&header[..n]);
    out.extend_from_slice(&frame[gue + 4..]);
    let grow = u16::try_from(n - 4).expect("small");
    let add = |bytes: &mut [u8]| {
        let v = u16::from_be_bytes([bytes[0], bytes[1]]) + grow;
        bytes.copy_from_slice(&v.to_be_bytes());
    };
    add(&mut out[udp + 4..udp + 6]);
    if v4 {
        add(&mut out[16..18]);
        let mut h = Ipv4HeaderSlice::from_slice(&out[14..34])
            .expect("outer IPv4")
            .to_header();
        h.header_checksum = h.calc_header_checksum();
        out[24..26].copy_from_slice(&h.header_checksum.to_be_bytes());
    } else {
        add(&mut out[18..20]);
    }
    out
}
