//! Health-check benchmarks: the CPU cost of probing 1,000 backends every second, and
//! the time from a backend's transition to its VIP's new table being live.
//!
//! CPU cost. A network namespace of its own holds 1,000 addresses (10.77.x.y/32 on its
//! loopback) and one listener per probe kind on the wildcard address, served by one
//! thread; the scheduler runs on a current-thread tokio runtime of a thread of its own
//! (as in the daemon), probing every address every second with `tcp` (connect, close
//! with RST) and then with `http` (GET, 200). The prober thread's CPU time
//! (`getrusage(RUSAGE_THREAD)`) is read over windows of 5 s after a 2 s warm-up; the
//! table gives the median of three windows as per cent of one core. Loopback delivery
//! runs in the sender's context, so part of the far end's kernel work is charged to the
//! prober: an upper bound for the LB host's share. Yardstick in the same run: one plain
//! thread doing the same 1,000 blocking TCP connects per second (no runtime, no
//! scheduler, no state machine).
//!
//! Detection to table live. The daemon's service over the kernel data plane (maps
//! loaded, nothing attached), one VIP of 100 backends with a 65,537-slot table; one
//! backend's scripted probe (interval 100 ms, fall 1) starts failing, or passing again.
//! Measured from the transition (the probe result that made it) to the moment the batch
//! has been applied (table built, written into the idle buffer, switched in, grace
//! period, backend marked down): the coalescing window (`health.coalesce_ms`, 100 ms)
//! is in it by design. Median of 21 transitions, with the apply alone beside it.

use std::{
    future::Future,
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use lb::{
    config::{Config, Vip},
    controller::Controller,
    daemon::service::Service,
};
use lb_dataplane::{KernelDataplane, LoadOptions};
use lb_health::{
    damping::Damping,
    file::HealthFile,
    outcome::{Failure, ProbeResult},
    probe::Probe,
    scheduler::{ProbeSpec, Schedule, Scheduler, SchedulerConfig, Start},
    state::Thresholds,
    target::ProbeTarget,
    validate::VipHealth,
};
use lb_maglev::BackendKey;
use lb_tests::netns::NetNs;

const BACKENDS: u32 = 1_000;
const TCP_PORT: u16 = 9001;
const HTTP_PORT: u16 = 9002;
const WARM_UP: Duration = Duration::from_secs(2);
const WINDOW: Duration = Duration::from_secs(5);
const WINDOWS: usize = 3;

/// Backend `i`'s address, 10.77.(i / 250).(i % 250 + 1).
fn address(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(
        10,
        77,
        u8::try_from(i / 250).unwrap_or(0),
        u8::try_from(i % 250 + 1).unwrap_or(1),
    )
}

/// CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    // SAFETY: getrusage writes one rusage into the struct passed.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &raw mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn percent(cpu: Duration, over: Duration) -> f64 {
    100.0 * cpu.as_secs_f64() / over.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Accepts on both ports and answers HTTP requests with 200, until `stop`.
fn serve(tcp: &TcpListener, http: &TcpListener, stop: &AtomicBool) {
    use std::io::{Read as _, Write as _};
    let mut buf = [0u8; 1024];
    while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        while let Ok((s, _)) = tcp.accept() {
            idle = false;
            drop(s);
        }
        while let Ok((mut s, _)) = http.accept() {
            idle = false;
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = s.read(&mut buf);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
        if idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Per cent of one core the prober thread uses probing every backend every second with
/// `kind`, median of the windows.
fn prober_cpu(ns: &NetNs, kind: &str, port: u16) -> anyhow::Result<f64> {
    let text = format!("kind = \"{kind}\"\ninterval_ms = 1000\ntimeout_ms = 500\nport = {port}");
    let file: HealthFile = toml::from_str(&text)?;
    let settings = VipHealth::from_file("bench", Some(&file), port)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
        .probe
        .context("a probe")?;
    ns.enter(|| -> anyhow::Result<f64> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let (scheduler, _batches) = Scheduler::<u32>::start(SchedulerConfig::default());
            for i in 0..BACKENDS {
                let target = ProbeTarget::direct(address(i).into(), port, None)?;
                scheduler.set(
                    0,
                    BackendKey::from(std::net::IpAddr::from(address(i))),
                    ProbeSpec {
                        settings: settings.clone(),
                        target,
                    },
                    Start::AssumeHealthy,
                )?;
            }
            tokio::time::sleep(WARM_UP).await;
            let mut windows = Vec::new();
            for _ in 0..WINDOWS {
                let (cpu, at) = (thread_cpu(), Instant::now());
                tokio::time::sleep(WINDOW).await;
                windows.push(percent(thread_cpu() - cpu, at.elapsed()));
            }
            let snapshot = scheduler.snapshot();
            let failed: Vec<String> = snapshot
                .iter()
                .filter(|r| r.status.failed_probes > 0)
                .map(|r| format!("{}: {:?}", r.backend, r.status.last_error))
                .collect();
            anyhow::ensure!(
                failed.is_empty(),
                "{} backends failed probes, the figure is void: {failed:?}",
                failed.len()
            );
            Ok(median(windows))
        })
    })?
}

/// Per cent of one core a plain thread uses for 1,000 blocking connects per second.
fn plain_connects(ns: &NetNs) -> anyhow::Result<f64> {
    ns.enter(|| {
        let mut windows = Vec::new();
        for _ in 0..WINDOWS {
            let (cpu, at) = (thread_cpu(), Instant::now());
            for second in 0..WINDOW.as_secs() {
                let start = at + Duration::from_secs(second);
                for i in 0..BACKENDS {
                    let _ = TcpStream::connect_timeout(
                        &SocketAddr::new(address(i).into(), TCP_PORT),
                        Duration::from_millis(500),
                    );
                }
                if let Some(rest) =
                    (start + Duration::from_secs(1)).checked_duration_since(Instant::now())
                {
                    std::thread::sleep(rest);
                }
            }
            windows.push(percent(thread_cpu() - cpu, at.elapsed()));
        }
        median(windows)
    })
}

/// The CPU table.
pub(crate) fn cpu_cost() -> anyhow::Result<()> {
    let ns = NetNs::create("lbbench-hc-")?;
    let adds: Vec<String> = (0..BACKENDS)
        .map(|i| format!("addr add {}/32 dev lo", address(i)))
        .collect();
    lb_tests::testbed::plumbing::ip_batch(&ns, &adds)?;
    let (tcp, http) = ns.enter(|| -> anyhow::Result<_> {
        let tcp = TcpListener::bind(("0.0.0.0", TCP_PORT))?;
        let http = TcpListener::bind(("0.0.0.0", HTTP_PORT))?;
        // The scheduler probes one VIP's backends within 50 ms of each other (so that
        // their transitions share a batch): 1,000 handshakes arrive in a burst.
        for l in [&tcp, &http] {
            // SAFETY: listen(2) again on a listening socket only changes its backlog.
            unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(l), 4096) };
        }
        tcp.set_nonblocking(true)?;
        http.set_nonblocking(true)?;
        Ok((tcp, http))
    })??;
    let stop = Arc::new(AtomicBool::new(false));
    let server = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || serve(&tcp, &http, &stop)
    });
    let results = (|| -> anyhow::Result<_> {
        Ok((
            prober_cpu(&ns, "tcp", TCP_PORT)?,
            prober_cpu(&ns, "http", HTTP_PORT)?,
            plain_connects(&ns)?,
        ))
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    let (tcp, http, plain) = results?;
    println!(
        "health checks: CPU of the prober thread probing {BACKENDS} backends every 1 s \
         (loopback targets in a namespace), median of {WINDOWS} windows of {} s",
        WINDOW.as_secs()
    );
    println!();
    println!("| probes | % of one core |");
    println!("|---|---:|");
    println!("| tcp (connect, RST) via the scheduler | {tcp:.2} |");
    println!("| http (GET, 200) via the scheduler | {http:.2} |");
    println!("| yardstick: {BACKENDS} blocking connects/s from a plain thread | {plain:.2} |");
    println!();
    Ok(())
}

/// A probe that fails while its flag is set.
struct Switch(Arc<AtomicBool>);

impl Probe for Switch {
    fn probe(&self, _timeout: Duration) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
        let down = self.0.load(Ordering::SeqCst);
        Box::pin(async move {
            if down {
                Err(Failure::Refused)
            } else {
                Ok(Duration::from_micros(20))
            }
        })
    }
}

/// The latency table.
pub(crate) fn detection_to_live() -> anyhow::Result<()> {
    let mut text = "interface = \"lo\"\n[encap]\nsource_v4 = \"192.0.2.1\"\n[[vip]]\naddress = \
         \"203.0.113.10\"\nport = 80\nprotocol = \"tcp\"\ntable_size = 65537\n"
        .to_owned();
    for i in 0..100 {
        text.push_str(&format!(
            "[[vip.backend]]\naddress = \"10.78.0.{}\"\n",
            i + 1
        ));
    }
    let loaded = Config::from_toml(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dp = KernelDataplane::load(LoadOptions {
        ct_capacity: 65_536,
        ct_syn_capacity: 16_384,
        ..LoadOptions::default()
    })?;
    let (mut service, _, _) = Service::start(
        Controller::new(dp),
        "bench".into(),
        &loaded,
        [2, 0, 0, 0, 0, 1],
        String::new(),
        None,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let runtime = lb::daemon::health::HealthRuntime::start()?;
    let mut batches = service.start_health(runtime.handle(), &loaded.config);
    let down = Arc::new(AtomicBool::new(false));
    let vip: Vip = "203.0.113.10:80/tcp".parse().map_err(anyhow::Error::msg)?;
    let key: BackendKey = "10.78.0.7".parse()?;
    {
        let _rt = runtime.handle().enter();
        service.health().context("health")?.scheduler().set_probe(
            vip,
            key,
            Schedule {
                interval: Duration::from_millis(100),
                timeout: Duration::from_millis(50),
                thresholds: Thresholds { rise: 1, fall: 1 },
                damping: Damping::OFF,
            },
            Arc::new(Switch(Arc::clone(&down))),
            Start::AssumeHealthy,
        );
    }
    let (mut live, mut apply) = (Vec::new(), Vec::new());
    for i in 0..21 {
        down.store(i % 2 == 0, Ordering::SeqCst);
        let batch = batches.blocking_recv().context("the scheduler stopped")?;
        let at = batch
            .vips
            .values()
            .flatten()
            .flat_map(|c| c.transitions.first())
            .map(|t| t.at)
            .min()
            .context("an empty batch")?;
        let started = Instant::now();
        let report = service
            .apply_health(&batch)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let done = Instant::now();
        anyhow::ensure!(report.tables_changed() == 1, "batch {i} changed no table");
        live.push(done.duration_since(at).as_secs_f64() * 1e3);
        apply.push(done.duration_since(started).as_secs_f64() * 1e3);
    }
    println!(
        "health checks: transition -> new table live (coalescing window 100 ms included), \
         one VIP of 100 backends, M = 65,537, kernel maps, median of 21"
    );
    println!();
    println!("| transition to table live (ms) | of which applying the batch (ms) |");
    println!("|---:|---:|");
    println!("| {:.2} | {:.2} |", median(live), median(apply));
    println!();
    Ok(())
}
