//! Every default of the configuration file and of the CLI, in one place.
//!
//! `lb.example.toml` states exactly these values (a test in `config` checks it), so an
//! instance started from the example builds the same tables as `lb table build` with
//! its defaults. The map sizes the eBPF object declares at compile time are defined in
//! [`lb_common::defaults`], the Maglev table's in [`lb_maglev::defaults`]; both are
//! re-exported here.
//!
//! A leaf module: it imports nothing of this crate, so every layer may use it.

pub use lb_common::defaults::{
    AFFINITY_CAPACITY, CT_CAPACITY, CT_SYN_CAPACITY, EXCEPTIONS_CAPACITY, FRAG_CAPACITY,
};
pub use lb_maglev::defaults::{MAGLEV_SEED, TABLE_SIZE, WEIGHT};

/// `control_socket`, and `--socket` of the operator verbs.
pub const CONTROL_SOCKET: &str = "/run/lb/lb.sock";

/// `pin_dir`: where the datapath is pinned in bpffs, in the host's view (systemd mounts
/// bpffs at `/sys/fs/bpf` at boot); one directory per network namespace and interface
/// below it.
pub const PIN_DIR: &str = "/sys/fs/bpf/lb";

/// `state_dir`: where runtime changes are kept (`<interface>.state.json`); the unit's
/// `StateDirectory=lb`.
pub const STATE_DIR: &str = "/var/lib/lb";

/// `detach_on_exit`: SIGTERM/SIGINT leave the pinned datapath forwarding (restarts and
/// upgrades are the common case); `true` detaches it and removes its pins.
pub const DETACH_ON_EXIT: bool = false;
/// `reload`: reload the file on every write.
pub const RELOAD: &str = "auto";

/// `xdp_mode`: native, falling back to generic (skb) mode with a warning.
pub const XDP_MODE: &str = "auto";

/// `mtu`: the largest outer IP packet on the LB → backend path (bytes), Ethernet's.
pub const MTU: u16 = 1500;

/// `hash_seed`: the seed of the data plane's flow hash (the ASCII bytes `lb_1`).
pub const HASH_SEED: u32 = 0x6c62_5f31;

/// `max_table_memory_mib`: the cap on the kernel memory of all Maglev table maps (MiB),
/// so that many services on one host cannot exhaust kernel memory. Each slot is a
/// 16-byte cell (its owner and fast-path state) and each VIP has two table buffers
/// ([`lb_dataplane::table_memory`]): a VIP with a 65,537-slot table takes just over
/// 2 MiB, so the default allows 511 such VIPs.
pub const MAX_TABLE_MEMORY_MIB: u32 = 1_024;

/// `nexthop.mode`: `bpf_fib_lookup` (the kernel's routes and neighbours).
pub const NEXTHOP_MODE: &str = "fib";

/// `nexthop.cache_ms`: neighbour and route changes reach the packet path within 100 ms,
/// while the FIB lookup is paid once per backend, CPU and 100 ms.
pub const NEXTHOP_CACHE_MS: u32 = 100;

/// `conntrack.udp_timeout_secs`: UDP flows idle longer than this are re-picked.
pub const UDP_TIMEOUT_SECS: u32 = 30;

/// `conntrack.tcp_idle_secs`: two hours, Linux's `tcp_keepalive_time`, the longest a
/// TCP connection with keepalives on stays silent
/// (`lb_common::fastpath::DEFAULT_TCP_IDLE_NS`).
pub const TCP_IDLE_SECS: u32 = 7_200;

/// `conntrack.quiet_secs`: a dirty table slot stays dirty this long after its last
/// change; never below `conntrack.tcp_idle_secs` (the fast path's rule C3).
pub const QUIET_SECS: u32 = 7_200;

/// `conntrack.clean_interval_secs`: the cleaning walk reads both conntrack maps and
/// the SYN cache; once a minute keeps its cost small against a quiet time of hours.
pub const CLEAN_INTERVAL_SECS: u32 = 60;

/// `conntrack.new_pin_rate`: new conntrack pins per second per CPU (mid-flow misses,
/// new UDP flows, handshakes completing). Beyond it, packets are forwarded by the table
/// or their held SYN without a pin (`tx_unpinned`), so a flood from unknown flows
/// replaces at most `rate x CPUs` entries per second, the least recently used first:
/// with the default conntrack capacity (1,048,576) and 8 CPUs that is 2.6 s of a flood
/// at full rate before a flow idle that long can lose its pin. Well above a busy
/// instance's legitimate rate of new connections per CPU (Katran's default limit of
/// new flows is of the same order); bursts of a tenth of a second pass
/// ([`NEW_PIN_BURST_MS`]).
pub const NEW_PIN_RATE: u32 = 50_000;

/// How far (ms) a burst of new pins may run ahead of `conntrack.new_pin_rate` (not a
/// configuration key).
pub const NEW_PIN_BURST_MS: u32 = 100;
/// `icmp.too_big`: a VIP packet too big for `mtu` once encapsulated, which may not be
/// fragmented, is answered with ICMP "fragmentation needed" (IPv4 with DF) or ICMPv6
/// "packet too big", so that path-MTU discovery shrinks the client's segments.
pub const ICMP_TOO_BIG: bool = true;

/// `icmp.echo`: echo requests to VIP addresses are answered (ping works on a VIP, as on
/// an address of Katran's or IPVS's hosts).
pub const ICMP_ECHO: bool = true;

/// `icmp.rate_limit`: ICMP messages the data plane sends per second, per CPU and kind
/// (too big, echo replies); Linux's own default for the ICMP it sends
/// (`net.ipv4.icmp_msgs_per_sec`).
pub const ICMP_RATE_LIMIT: u32 = 1_000;

/// `icmp.burst`: messages a burst may send at once; Linux's `net.ipv4.icmp_msgs_burst`.
pub const ICMP_BURST: u32 = 50;

/// `encap.flow_label`: the outer IPv6 flow label is copied from an IPv6 inner packet
/// (`inner`); `hash` sets it from the flow hash.
pub const FLOW_LABEL: &str = "inner";

/// `encap.gue_port`: the UDP destination port of GUE-encapsulated packets (`vip.encap =
/// "gue"`): 6080, Katran's `GUE_DPORT` (there is no IANA port for GUE).
pub const GUE_PORT: u16 = lb_common::types::GUE_DEFAULT_PORT;

/// `vip.encap`: IP-in-IP (`ipip`); `gue` is Generic UDP Encapsulation.
pub const VIP_ENCAP: &str = "ipip";

/// `vip.hash`: the 5-tuple picks a flow's backend (`lb_common::hash_fields::Fields`).
pub const VIP_HASH: &str = lb_common::hash_fields::Fields::FiveTuple.name();

/// `vip.backend.state`.
pub const BACKEND_STATE: &str = "active";

/// `metrics.enabled`: the endpoint is served unless turned off.
pub const METRICS_ENABLED: bool = true;

/// `metrics.listen`: loopback only (an operator opens it to a scraper on purpose) and a
/// fixed port, so that Prometheus' `instance` label stays the same across restarts.
/// 9469 is outside the well-known ports, not in the IANA-derived `/etc/services` of
/// Debian, and none of the Prometheus components' own (9090-9094) nor node_exporter's
/// (9100). Prometheus' wiki list of exporter ports (9100-9999) was reported fully
/// allocated in 2023, so no port in that range is unclaimed; the number is the
/// operator's to change.
pub const METRICS_LISTEN: &str = "127.0.0.1:9469";

/// `metrics.connections_interval_ms`: the conntrack walk behind the live connection
/// counts runs every 10 s. A walk of a full 1,048,576-entry map takes about 0.4 s of
/// one core (measured by `cargo xtask bench`), so the walk costs at most about 4 % of
/// one core, and far less with emptier maps.
pub const CONNECTIONS_INTERVAL_MS: u32 = 10_000;

/// `metrics.idle_secs`: an established connection with no packet for this long counts
/// as idle (`lb_backend_connections_idle`).
pub const IDLE_SECS: u32 = 60;

/// `metrics.removed_retention_secs`: a removed backend's series stay exported, frozen,
/// with `state="removed"`, for 10 minutes: long enough for `rate()` and `increase()`
/// windows of a few minutes to see the last samples.
pub const REMOVED_RETENTION_SECS: u32 = 600;

/// `health.coalesce_ms`: transitions of many backends within 100 ms become one table
/// change per VIP (`health::coalesce::DEFAULT_WINDOW`).
pub const HEALTH_COALESCE_MS: u32 = 100;

/// `health.max_concurrent_probes`: at most 256 probes in flight at once
/// (`health::scheduler::DEFAULT_MAX_CONCURRENT`).
pub const HEALTH_MAX_CONCURRENT_PROBES: u32 = 256;

/// `announce.enabled`: off, so that the daemon publishes no route unless asked to.
pub const ANNOUNCE_ENABLED: bool = false;

/// `announce.table`: the kernel routing table of the announced VIP addresses (the table
/// number of the fleets chapter's BIRD configuration; any table no forwarding rule uses).
pub const ANNOUNCE_TABLE: u32 = 100;

/// `announce.protocol`: the route protocol number of the daemon's routes, 76 (ASCII
/// `L`), which neither the kernel nor iproute2's `rt_protos` list assigns.
pub const ANNOUNCE_PROTOCOL: u8 = 76;

/// `api.enabled`: the remote API is off unless turned on (it needs a certificate).
pub const API_ENABLED: bool = false;

/// `api.listen`: loopback only; an operator opens it on purpose.
pub const API_LISTEN: &str = "127.0.0.1:9443";

/// `api.max_connections`: connections served at once (each holds a TLS session).
pub const API_MAX_CONNECTIONS: u32 = 256;

/// `api.max_body_bytes`: requests are below 1 KiB; 64 KiB leaves room.
pub const API_MAX_BODY_BYTES: u32 = 64 << 10;

/// The largest configuration `PUT /v1/config` and `POST /v1/config/diff` take
/// (bytes), instead of `api.max_body_bytes`: 100 VIPs of 100 backends are about 1 MiB.
pub const API_MAX_CONFIG_BYTES: u32 = 8 << 20;

/// `api.header_timeout_ms`: the TLS handshake, then each request's headers.
pub const API_HEADER_TIMEOUT_MS: u32 = 5_000;

/// `api.body_timeout_ms`: each request's body.
pub const API_BODY_TIMEOUT_MS: u32 = 5_000;

/// `api.idempotency_entries`: change request ids remembered with their answers.
pub const API_IDEMPOTENCY_ENTRIES: u32 = 1024;
