//! Builds the eBPF object from the `lb-ebpf` workspace package (the only build path for
//! it) with aya-build, which runs `cargo +nightly build -Z build-std=core --target
//! bpfel-unknown-none` and copies the object into `OUT_DIR/lb-ebpf`, where
//! `lb_dataplane::EBPF_OBJECT` embeds it. This crate's `test-harness` feature turns on
//! lb-ebpf's feature of the same name (the benchmark harness programs).

use anyhow::{Context as _, anyhow};
use cargo_metadata::{Metadata, MetadataCommand};

fn main() -> anyhow::Result<()> {
    let Metadata { packages, .. } = MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let find = |name: &str| {
        packages
            .iter()
            .find(|p| p.name.as_str() == name)
            .ok_or_else(|| anyhow!("package {name} not found in the workspace"))
    };
    let ebpf = find("lb-ebpf")?;
    let common = find("lb-common")?;
    // aya-build watches lb-ebpf's directory; the program also compiles lb-common.
    let common_dir = common
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("lb-common manifest has no parent"))?;
    println!("cargo:rerun-if-changed={common_dir}");
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("lb-ebpf manifest has no parent"))?;
    // The benchmark harness programs go into the object only for the test and benchmark
    // builds (this crate's `test-harness` feature, enabled by lb-tests alone).
    let features: &[&str] = if std::env::var_os("CARGO_FEATURE_TEST_HARNESS").is_some() {
        &["test-harness"]
    } else {
        &[]
    };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            features,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )?;
    if features.is_empty() {
        return Ok(());
    }
    // The upgrade tests' variant (lb-ebpf's `upgrade-variant`: another program, the same
    // maps as the `lb` binary's object) into OUT_DIR/variant/lb-ebpf. aya-build writes
    // into $OUT_DIR, so it runs once more with OUT_DIR pointing there.
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR")?);
    let variant = out_dir.join("variant");
    std::fs::create_dir_all(&variant)?;
    // SAFETY: the build script is single-threaded here; nothing reads the environment
    // concurrently.
    unsafe { std::env::set_var("OUT_DIR", &variant) };
    let built = aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            features: &["upgrade-variant"],
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    );
    // SAFETY: as above.
    unsafe { std::env::set_var("OUT_DIR", &out_dir) };
    built
}
