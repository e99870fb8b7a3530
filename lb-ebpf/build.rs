//! Rebuild the eBPF object when the `bpf-linker` binary changes, and fail early with an
//! actionable message when it is missing.
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
}
