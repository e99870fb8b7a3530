//! Data-plane benchmark behind `cargo xtask bench`: ns/packet by BPF_PROG_TEST_RUN,
//! reported against the empty XDP program measured in the same run.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
