//! Types shared by the XDP program (`lb-ebpf`) and the userspace controller (`lb-user`).
//!
//! Everything here is `#![no_std]`, `#[repr(C)]` with explicit padding and a compile-time
//! size assertion, so the kernel and userspace agree on every byte. Byte order is stated
//! per field. With the `user` feature the map value types implement `aya::Pod`.
#![no_std]

pub mod maps;
pub mod stats;
