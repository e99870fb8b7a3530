//! The remote API's request latency at 100 VIPs x 100 backends (65,537-slot tables):
//! a real `lb run` (skb mode, in a namespace this benchmark creates) with its API on
//! 127.0.0.1 inside that namespace, and the `lb` command's own client
//! (`lb::api::client::Remote`: hyper over rustls, one kept-alive connection, a bearer
//! token) in this process, entered into the namespace.
//!
//! Timed per request, from the call to the typed answer (decoded as the CLI decodes
//! it): a status read (`GET /v1/status`, the whole 100 x 100 status, about 1.5 MB of
//! JSON), and a backend change (`POST /v1/backend`, alternately drain and undrain of
//! one backend, cycling over the VIPs: each rebuilds a table and writes it, and is
//! logged with its request id). The same status read over the unix socket is the
//! yardstick. p50 and p99 over [`REQUESTS`] requests each ([`QUICK_REQUESTS`] with
//! `--quick`), after a few untimed ones.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use lb::{
    api::client::{Credentials, Remote},
    config::Vip,
    control::{BackendAction, Client},
};
use lb_maglev::BackendKey;
use lb_tests::{
    daemon::{TempDir, scale_config, start_until_ready, stop_gracefully},
    netns::NetNs,
};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// VIPs and backends per VIP.
const VIPS: usize = 100;
const BACKENDS: usize = 100;
/// Timed requests of each kind.
const REQUESTS: usize = 200;
/// With `--quick`.
const QUICK_REQUESTS: usize = 20;
/// Untimed requests first.
const WARM: usize = 3;
/// The admin token (40 characters).
const TOKEN: &str = "bench-admin-0123456789abcdef0123456789ab";

/// The CA, server certificate and key for 127.0.0.1, and the token, in `dir`.
fn files(dir: &Path) -> anyhow::Result<()> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "lb bench CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    params.distinguished_name.push(DnType::CommonName, "lb");
    let cert = params.signed_by(&key, &ca)?;
    std::fs::write(dir.join("ca.crt"), ca.pem())?;
    std::fs::write(dir.join("server.crt"), cert.pem())?;
    std::fs::write(dir.join("server.key"), key.serialize_pem())?;
    std::fs::write(dir.join("admin.token"), format!("{TOKEN}\n"))?;
    Ok(())
}

/// Backend `b` of VIP `v` (distinct per VIP, as in the scale benchmark).
fn octets(v: usize, b: usize) -> [usize; 3] {
    let a = 1 + v * BACKENDS + b;
    [a >> 16, (a >> 8) & 0xff, a & 0xff]
}

/// p50 and p99 (ms) of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "an index below the sample count"
        )]
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1e3
    };
    (at(0.5), at(0.99))
}

/// `n` timings of `f` after [`WARM`] untimed calls.
fn time(n: usize, mut f: impl FnMut(usize) -> anyhow::Result<()>) -> anyhow::Result<Vec<Duration>> {
    for i in 0..WARM {
        f(i)?;
    }
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let began = Instant::now();
        f(WARM + i)?;
        samples.push(began.elapsed());
    }
    Ok(samples)
}

/// The three measurements, in the namespace: (status remote, change remote, status
/// over the socket).
fn measure(dir: &Path, n: usize) -> anyhow::Result<[Vec<Duration>; 3]> {
    let credentials = Credentials {
        cacert: Some(dir.join("ca.crt")),
        token_file: Some(dir.join("admin.token")),
        ..Credentials::default()
    };
    let remote = Client::through(Arc::new(
        Remote::new("https://127.0.0.1:9443", &credentials).map_err(|e| anyhow::anyhow!("{e}"))?,
    ));
    let local = Client::new(dir.join("lb.sock"));
    let status = time(n, |_| {
        let s = remote.status()?;
        anyhow::ensure!(s.vips.len() == VIPS, "{} VIPs", s.vips.len());
        Ok(())
    })?;
    let change = time(n, |i| {
        let v = (i / 2) % VIPS;
        let vip: Vip = format!("203.0.{}.{}:80/tcp", 113 + v / 250, 1 + v % 250)
            .parse()
            .map_err(|e: String| anyhow::anyhow!(e))?;
        let [x, y, z] = octets(v, 0);
        let backend: BackendKey = format!("10.{x}.{y}.{z}").parse()?;
        let action = if i % 2 == 0 {
            BackendAction::Drain
        } else {
            BackendAction::Undrain
        };
        remote.backend(action, vip, backend, None, (None, false))?;
        Ok(())
    })?;
    let socket = time(n, |_| {
        local.status()?;
        Ok(())
    })?;
    Ok([status, change, socket])
}

/// Runs the benchmark and prints its table.
pub(crate) fn api_latency(quick: bool) -> anyhow::Result<()> {
    let n = if quick { QUICK_REQUESTS } else { REQUESTS };
    let ns = NetNs::create("lbb-api-")?;
    ns.ip(&["link", "add", "lb0", "type", "veth", "peer", "name", "lb1"])?;
    ns.ip(&["link", "set", "lb0", "up"])?;
    ns.ip(&["link", "set", "lb1", "up"])?;
    let tmp = TempDir::new("lbb-api-")?;
    let dir = tmp.path();
    files(dir)?;
    let d = dir.display();
    let mut config = scale_config(dir, VIPS, BACKENDS, 65_537, octets);
    let at = config.find("[[vip]]").context("VIPs")?;
    config.insert_str(
        at,
        &format!(
            "[api]\nenabled = true\nlisten = \"127.0.0.1:9443\"\ncert_file = \"{d}/server.crt\"\n\
             key_file = \"{d}/server.key\"\n[[api.token]]\nname = \"bench\"\n\
             file = \"{d}/admin.token\"\nrole = \"admin\"\n"
        ),
    );
    std::fs::write(dir.join("lb.toml"), config)?;
    let notify = std::os::unix::net::UnixDatagram::bind(dir.join("notify.sock"))?;
    notify.set_read_timeout(Some(Duration::from_secs(300)))?;
    let (child, _, _) = start_until_ready(&ns, dir, &notify)?;
    let measured = ns.enter(|| measure(dir, n));
    stop_gracefully(child)?;
    let [status, change, socket] = measured??;
    println!(
        "\nRemote API request latency, {VIPS} VIPs x {BACKENDS} backends, M = 65,537, \
         the lb client over one kept-alive TLS connection, {n} requests each (ms):\n"
    );
    println!("| request | p50 | p99 |");
    println!("|---|---:|---:|");
    for (name, samples) in [
        ("status read (GET /v1/status)", status),
        ("backend change (POST /v1/backend, drain/undrain)", change),
        ("status read over the unix socket (yardstick)", socket),
    ] {
        let (p50, p99) = percentiles(samples);
        println!("| {name} | {p50:.2} | {p99:.2} |");
    }
    Ok(())
}
