// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Build configuration of the eBPF object.
//!
//! - Rebuilds when the `bpf-linker` binary changes, and warns with an actionable message
//!   when it is missing.
//! - Passes `+alu32` (32-bit sub-registers, kernel 5.1+) to bpf-linker, which runs
//!   LLVM's BPF back end on the whole program. The CPU (`--cpu v3`: 32-bit jumps) is set
//!   by the linker wrapper `bpf-linker-v3` named in `.cargo/config.toml`, because rustc
//!   passes its own `--cpu generic` and bpf-linker accepts the option once. Not
//!   `+allows-misaligned-mem-access`: LLVM then also merges stack stores into misaligned
//!   ones, which the verifier rejects (stack accesses must be aligned).
use which::which;

fn main() {
    match which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(err) => {
            // clippy for the host does not link, so only warn there.
            println!(
                "cargo:warning=bpf-linker not found ({err}); run `cargo xtask setup` to install it"
            );
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=bpf-linker-v3");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("bpf") {
        println!("cargo:rustc-link-arg-bins=--cpu-features=+alu32");
        // The global BPF functions (`src/hashes.rs`): exported, so the linker keeps
        // them global and the verifier checks each once.
        println!(
            "cargo:rustc-link-arg-bins=--export=lb_flow_hash,lb_selected_hash,lb_fib_next_hop,lb_forward,lb_quoted_flow"
        );
    }
}
