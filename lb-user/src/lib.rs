//! The load balancer's controller library: the data-plane interface (the only module
//! that touches aya) and, as the project grows, the Maglev builder, configuration, the
//! daemon and the CLI verbs.

pub mod dataplane;
pub mod maglev;

/// The XDP object built from `lb-ebpf` by `build.rs`, embedded in the binary
/// (ELF, BPF little-endian, 8-byte aligned as aya requires).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));
