//! Types shared by the XDP program (`lb-ebpf`) and the userspace controller (`lb-user`).
//!
//! Everything here is `#![no_std]`, `#[repr(C)]` with explicit padding and a compile-time
//! size assertion, so the kernel and userspace agree on every byte. Byte order is stated
//! per field. With the `user` feature the map key and value types implement `aya::Pod`.
//!
//! Modules: [`maps`] (map names and limits), [`defaults`] (the map sizes the object
//! declares), [`types`] (map keys and values, one file per map family), [`stats`]
//! (counter layouts, verdict reasons and their XDP actions), [`probe`] (the socket mark
//! that sends a health probe to one backend), [`trace`] (the packet trace's filter and
//! decision codes), and the two decisions both sides make,
//! written once: [`hash`] (the flow hash, which picks a flow's Maglev slot) and
//! [`conntrack`] (whether a flow's pin, a held SYN or the table chooses its backend).
#![no_std]

pub mod conntrack;
pub mod defaults;
pub mod hash;
pub mod maps;
pub mod probe;
pub mod stats;
pub mod trace;
pub mod types;

/// Implements `aya::Pod` for plain-old-data map types on the userspace side.
macro_rules! impl_pod {
    ($($ty:ty),* $(,)?) => {
        $(
            // SAFETY: the type is repr(C), has explicit padding fields (no implicit
            // padding; see its size assertion) and every bit pattern is a valid value.
            #[cfg(feature = "user")]
            unsafe impl aya::Pod for $ty {}
        )*
    };
}
pub(crate) use impl_pod;
