//! The load balancer's controller library: the data-plane interface ([`dataplane`], the
//! only module that touches aya), the Maglev table builder ([`maglev`], pure), flow keys
//! and slot prediction ([`flow`]), and the CLI verbs ([`cli`]).

pub mod cli;
pub mod config;
pub mod control;
pub mod controller;
pub mod daemon;
pub mod dataplane;
pub mod defaults;
pub mod flow;
pub mod maglev;

/// The XDP object built from `lb-ebpf` by `build.rs`, embedded in the binary
/// (ELF, BPF little-endian, 8-byte aligned as aya requires).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));
