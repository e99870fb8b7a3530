//! `lb hash tour`: the consistent-hashing tutorial (shared/seed, in Bengali with
//! English code and output) as a program. Its sections in order, each experiment run
//! through the lab with the tutorial's parameters (keys `user:N` from mulberry32 seeded
//! 16, FNV-1a 32 then fmix32, or the worked examples' keys given as hash values), printed
//! with the `lb hash` command that reruns it, a two-line explanation, and its result in
//! the tutorial's own format, so every number the tutorial prints can be found.
//!
//! The tutorial's first stepper (a 0-99 ring with four servers) does not print where
//! the servers sit; the tour puts A, B, C and D at 10, 35, 60 and 85 (E joins at 45).

use std::fmt::Write as _;

use super::{
    events::Event,
    explain::{Explanation, explain},
    hashes::KeyHash,
    keys::KeySet,
    lab::{LabError, LabInput, run},
    replicas::{Replication, parse_zones},
    report::{EventReport, LabReport, Movement},
    scheme::{Params, SchemeKind},
    servers::{Server, parse_servers},
};

/// The six keys of the tutorial's worked examples, as `NAME=HASH`.
pub const SIX_KEYS: [&str; 6] = ["k1=5", "k2=20", "k3=38", "k4=50", "k5=77", "k6=95"];

/// One section of the tour.
#[derive(Debug, Clone)]
pub struct Section {
    /// `3. Adding or removing a server`.
    pub title: String,
    /// Two lines: what the experiment shows.
    pub explanation: [String; 2],
    /// The `lb hash` commands that rerun it.
    pub commands: Vec<String>,
    /// The result, in the tutorial's format.
    pub text: String,
    /// The lab reports behind it (for plots).
    pub reports: Vec<(String, LabReport)>,
}

/// The whole tour.
#[derive(Debug, Clone)]
pub struct Tour {
    /// Sections in the tutorial's order.
    pub sections: Vec<Section>,
}

impl Tour {
    /// The text: every section with its title, explanation, commands and result.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        for s in &self.sections {
            let _ = writeln!(t, "== {} ==", s.title);
            for line in &s.explanation {
                let _ = writeln!(t, "{line}");
            }
            for c in &s.commands {
                let _ = writeln!(t, "$ {c}");
            }
            let _ = writeln!(t, "{}", s.text.trim_end());
            t.push('\n');
        }
        t
    }
}

/// The tutorial's keys: `requests` draws from mulberry32 seeded 16.
fn users(requests: usize) -> KeySet {
    KeySet::mulberry32_users(requests, 16).unwrap_or_else(|_| unreachable_keys())
}

#[expect(clippy::panic, reason = "the tour's key counts are constants in range")]
fn unreachable_keys() -> KeySet {
    panic!("the tour's key counts are in range")
}

fn tutorial_params() -> Params {
    Params {
        hash: KeyHash::Fnv1a32Fmix32,
        vnodes: 100,
        ..Params::default()
    }
}

fn servers(text: &str) -> Vec<Server> {
    parse_servers(text).unwrap_or_default()
}

/// A lab input over `servers` with the tutorial's hash.
fn input(servers_text: &str, keys: KeySet, schemes: &[SchemeKind], events: &[&str]) -> LabInput {
    LabInput {
        servers: servers(servers_text),
        keys,
        key_source: "mulberry32 user:N, seed 16".to_owned(),
        schemes: schemes.to_vec(),
        params: tutorial_params(),
        vnodes_sweep: Vec::new(),
        epsilon_sweep: Vec::new(),
        events: events
            .iter()
            .filter_map(|e| e.parse::<Event>().ok())
            .collect(),
        peer: None,
        hot: 0,
        replicas: 1,
        fail: None,
        replication: None,
    }
}

/// The six worked-example keys as a key set (`value` hash).
fn six_keys() -> KeySet {
    KeySet::parse(&SIX_KEYS.join("\n")).unwrap_or_else(|_| unreachable_keys())
}

/// The small 0-99 ring of sections 2 and 3.
fn small_ring_params() -> Params {
    Params {
        hash: KeyHash::Value,
        space: Some(100),
        positions: [("A", 10), ("B", 35), ("C", 60), ("D", 85), ("E", 45)]
            .into_iter()
            .map(|(name, p)| (name.to_owned(), vec![p]))
            .collect(),
        ..Params::default()
    }
}

/// The 0-999 ring of section 5.
fn thousand_ring_params() -> Params {
    Params {
        hash: KeyHash::Value,
        space: Some(1_000),
        positions: [("A", [105, 930]), ("B", [290, 610]), ("C", [450, 845])]
            .into_iter()
            .map(|(name, p)| (name.to_owned(), p.to_vec()))
            .collect(),
        ..Params::default()
    }
}

/// Runs every section.
///
/// # Errors
/// A [`LabError`] of an experiment (none for the fixed parameters of the tour).
pub fn tour() -> Result<Tour, LabError> {
    Ok(Tour {
        sections: vec![
            section_mod_n()?,
            section_ring()?,
            section_add_remove()?,
            section_vnodes()?,
            section_lookup()?,
            section_rendezvous()?,
            section_jump_maglev_bounded()?,
            section_hot_replicas_failure()?,
        ],
    })
}

fn explained(key: &str, servers_text: &str, kinds: &[SchemeKind], params: &Params) -> Explanation {
    let list = servers(servers_text);
    explain(key, &list, kinds, params, &[], &[]).unwrap_or_else(|_| {
        #[expect(clippy::panic, reason = "the tour's fixed schemes build")]
        let never = || panic!("the tour's schemes build");
        never()
    })
}

fn section_mod_n() -> Result<Section, LabError> {
    let mut lab = input("A,B,C,D", six_keys(), &[SchemeKind::ModN], &["add:E"]);
    lab.params.hash = KeyHash::Value;
    lab.key_source = "the tutorial's six keys".to_owned();
    let report = run(&lab)?;
    let mut text = placement_text(&report);
    let event = &report.events[0];
    let m = &event.schemes[0];
    let _ = writeln!(
        text,
        "moved {} of 6, none to the new server E ({} to it); mod-N on many keys moves 1 - 1/5 = 80%",
        m.moved, m.to_added
    );
    Ok(Section {
        title: "1. The problem: which server, and the trap of hash mod N".to_owned(),
        explanation: [
            "Six keys at hashes 5, 20, 38, 50, 77, 95 on servers A-D by hash mod 4, then mod 5 when E joins:".to_owned(),
            "five of six change server, and all of them between old servers (the tutorial's table).".to_owned(),
        ],
        commands: vec![format!(
            "lb hash --servers A,B,C,D --hash value --key-list {} --schemes modn --event add:E",
            SIX_KEYS.join(",")
        )],
        text,
        reports: vec![("mod-n".to_owned(), report)],
    })
}

/// The per-key table of a small run: key, hash, server before and after each event.
fn placement_text(report: &LabReport) -> String {
    let full = report.to_text();
    // The placement tables start at the first "key  " header line.
    full.split("\n\n")
        .filter(|block| block.starts_with("key "))
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n"
}

fn section_ring() -> Result<Section, LabError> {
    let mut lab = input("A,B,C,D", six_keys(), &[SchemeKind::Ring], &[]);
    lab.params = small_ring_params();
    lab.key_source = "the tutorial's six keys".to_owned();
    let report = run(&lab)?;
    let mut text = placement_text(&report);
    for key in ["k3=38", "k6=95"] {
        text.push('\n');
        text.push_str(&explained(key, "A,B,C,D", &[SchemeKind::Ring], &lab.params).to_text());
    }
    Ok(Section {
        title: "2. The hash ring: servers and keys on one circle".to_owned(),
        explanation: [
            "A hash space 0-99 as a circle; servers A-D at 10, 35, 60, 85; a key belongs to the first server".to_owned(),
            "at or after it clockwise, and past the last one it wraps around to the first (key 95 -> A).".to_owned(),
        ],
        commands: vec![format!(
            "lb hash --space 100 --positions A=10 B=35 C=60 D=85 --hash value --key-list {} \
             --schemes ring --explain k6=95",
            SIX_KEYS.join(",")
        )],
        text,
        reports: vec![("small-ring".to_owned(), report)],
    })
}

fn movement<'a>(event: &'a EventReport, scheme: &str) -> Option<&'a Movement> {
    event.schemes.iter().find(|m| m.scheme == scheme)
}

/// `80.1%`, as the tutorial's `toFixed(1)` prints a share.
fn pct(fraction: f64) -> String {
    format!("{:.1}%", 100.0 * fraction)
}

fn section_add_remove() -> Result<Section, LabError> {
    let mut small = input(
        "A,B,C,D",
        six_keys(),
        &[SchemeKind::Ring],
        &["add:E", "remove:C"],
    );
    small.params = small_ring_params();
    let small_report = run(&small)?;
    let mut text = placement_text(&small_report);
    text.push('\n');

    let lab = input(
        "4",
        users(10_000),
        &[SchemeKind::ModN, SchemeKind::Ring],
        &["add:S4"],
    );
    let report = run(&lab)?;
    let event = &report.events[0];
    let keys = report.keys as f64;
    for (name, scheme) in [("mod-N", "modn"), ("ring ", "ring")] {
        if let Some(m) = movement(event, scheme) {
            let _ = writeln!(
                text,
                "{name}  moved {}   to new server {}   between old servers {}",
                pct(m.moved_fraction),
                pct(m.to_added as f64 / keys),
                pct(m.between_stayed as f64 / keys)
            );
        }
    }
    if let (Some(kept), Some(least)) = (event.theory_mod_n_kept, event.theory_minimum_moved) {
        let _ = writeln!(
            text,
            "theory mod-N 1 - {}/{} = {}, minimum possible {}/{} = {}",
            kept.num,
            kept.den,
            pct(1.0 - kept.value),
            least.num,
            least.den,
            pct(least.value)
        );
    }
    Ok(Section {
        title: "3. Adding or removing a server: why only about K/N keys move".to_owned(),
        explanation: [
            "On the small ring E joins at 45 and takes only k3 from C; C leaving hands its keys to the next".to_owned(),
            "server clockwise. On 10,000 keys, 4 -> 5 servers: mod-N moves 80%, the ring about 1/5, none between old servers.".to_owned(),
        ],
        commands: vec![
            format!(
                "lb hash --space 100 --positions A=10 B=35 C=60 D=85 E=45 --servers A,B,C,D --hash value \
                 --key-list {} --schemes ring --event add:E --event remove:C",
                SIX_KEYS.join(",")
            ),
            "lb hash --servers 4 --key-gen users --key-seed 16 --keys 10000 --hash fnv1a32-fmix32 \
             --schemes modn,ring --event add:S4"
                .to_owned(),
        ],
        text,
        reports: vec![("small-ring-events".to_owned(), small_report), ("add-server".to_owned(), report)],
    })
}

fn section_vnodes() -> Result<Section, LabError> {
    let mut lab = input("10", users(100_000), &[SchemeKind::Ring], &[]);
    lab.vnodes_sweep = vec![1, 10, 100, 1_000];
    lab.params.vnodes = 1_000;
    let report = run(&lab)?;
    let mut text = String::from("V      points    min    max  std dev  max/avg  sd/avg  theory\n");
    for row in &report.vnodes_sweep {
        let r = &row.requests;
        let _ = writeln!(
            text,
            "{:<6}{:>7}{:>7}{:>7}{:>9.0}{:>9.2}{:>8}{:>8}",
            row.vnodes,
            row.points,
            r.min,
            r.max,
            r.sd,
            r.max_avg,
            pct(r.sd_avg),
            pct(row.theory_sd_avg)
        );
    }
    let _ = writeln!(
        text,
        "average per server = {} keys ({} requests over {} distinct keys: {} draws repeat)",
        report.requests / 10,
        report.requests,
        report.keys,
        report.requests - report.keys as u64
    );
    let _ = writeln!(
        text,
        "theory sd/avg ~ sqrt((N-1)/(N*V)); a target c needs V ~ 1/c^2: 10% -> V ~ 100, 5% -> V ~ 400"
    );
    Ok(Section {
        title: "4. Virtual nodes: evening out the load".to_owned(),
        explanation: [
            "10 servers, 100,000 keys, V points per server: a server's share is the sum of V arcs, so its".to_owned(),
            "spread shrinks as 1/sqrt(V); ten times more even needs a hundred times more points.".to_owned(),
        ],
        commands: vec![
            "lb hash --servers 10 --key-gen users --key-seed 16 --keys 100000 --hash fnv1a32-fmix32 \
             --schemes ring --vnodes 1,10,100,1000"
                .to_owned(),
        ],
        text,
        reports: vec![("vnodes".to_owned(), report)],
    })
}

fn section_lookup() -> Result<Section, LabError> {
    let params = thousand_ring_params();
    let mut text =
        String::from("the ring as a sorted array: 105 A, 290 B, 450 C, 610 B, 845 C, 930 A\n");
    for key in ["500", "930", "950"] {
        text.push('\n');
        text.push_str(&explained(key, "A,B,C", &[SchemeKind::Ring], &params).to_text());
    }
    let _ = writeln!(
        text,
        "\ncost: 100 servers x 256 tokens = 25,600 points, ceil(log2 25600) = {} comparisons, {} bytes at 16 each",
        super::theory::ring_comparisons(25_600),
        super::theory::ring_memory_bytes(25_600)
    );
    Ok(Section {
        title: "5. Lookup cost, replication and preference lists".to_owned(),
        explanation: [
            "The ring 0-999 with A at 105 and 930, B at 290 and 610, C at 450 and 845: a lookup is a binary".to_owned(),
            "search for the first point >= the key; the next distinct servers clockwise are its replicas.".to_owned(),
        ],
        commands: vec![
            "lb hash --space 1000 --positions A=105,930 B=290,610 C=450,845 --hash value --key-list 500,930,950 \
             --schemes ring --explain 950"
                .to_owned(),
        ],
        text,
        reports: Vec::new(),
    })
}

fn section_rendezvous() -> Result<Section, LabError> {
    let text = explained(
        "user:42",
        "4",
        &[SchemeKind::Rendezvous],
        &tutorial_params(),
    )
    .to_text();
    Ok(Section {
        title: "6. Rendezvous hashing: every server scores, the highest wins".to_owned(),
        explanation: [
            "user:42 over four servers: score = h32(\"user:42|S0\") and so on, divided by 2^32 to lie in 0-1;".to_owned(),
            "each server wins a key with probability 1/N, independently, at the price of N hashes per lookup.".to_owned(),
        ],
        commands: vec![
            "lb hash --servers 4 --hash fnv1a32-fmix32 --schemes rendezvous --explain user:42".to_owned(),
        ],
        text,
        reports: Vec::new(),
    })
}

fn section_jump_maglev_bounded() -> Result<Section, LabError> {
    let hrw = run(&input(
        "5",
        users(10_000),
        &[SchemeKind::Rendezvous],
        &["remove:S2"],
    ))?;
    let mut text = String::from("HRW, 5 servers:");
    for s in &hrw.schemes[0].per_server {
        let _ = write!(text, " {}={}", s.name, s.keys);
    }
    text.push('\n');
    if let Some(m) = movement(&hrw.events[0], "rendezvous") {
        let _ = writeln!(
            text,
            "HRW, S2 removed: moved {}, moved but not from S2: {}",
            pct(m.moved_fraction),
            m.moved - m.from_removed
        );
    }
    let jump = run(&input(
        "10",
        users(10_000),
        &[SchemeKind::Jump],
        &["add:S10"],
    ))?;
    if let (Some(m), Some(least)) = (
        movement(&jump.events[0], "jump"),
        jump.events[0].theory_minimum_moved,
    ) {
        let _ = writeln!(
            text,
            "jump 10 -> 11: moved {} (ideal 1/11 = {}), not to bucket 10: {}",
            pct(m.moved_fraction),
            pct(least.value),
            m.moved - m.to_added
        );
    }
    let mut bounded = input(
        "10",
        users(10_000),
        &[SchemeKind::Ring, SchemeKind::Bounded],
        &[],
    );
    bounded.params.epsilon = 0.25;
    bounded.params.vnodes = 10;
    bounded.epsilon_sweep = vec![0.05, 0.1, 0.25, 0.5, 1.0];
    let bounded = run(&bounded)?;
    for s in &bounded.schemes {
        let _ = writeln!(
            text,
            "{:<8} max/avg {:.2} (max {} keys, average {})",
            s.scheme, s.keys.max_avg, s.keys.max, s.keys.mean
        );
    }
    for row in &bounded.epsilon_sweep {
        let _ = writeln!(
            text,
            "bounded epsilon {:<4}: max/avg {:.2} (cap {:.2}), {} of the keys off their first server",
            row.epsilon,
            row.keys_max_avg,
            row.bound,
            pct(row.displaced_fraction)
        );
    }
    text.push('\n');
    let kinds = [SchemeKind::Jump, SchemeKind::Maglev];
    text.push_str(&explained("user:42", "10", &kinds, &tutorial_params()).to_text());
    Ok(Section {
        title: "7. Jump hash, Maglev and bounded load".to_owned(),
        explanation: [
            "Removing S2 from five rendezvous servers moves only S2's keys; jump from 10 to 11 buckets moves".to_owned(),
            "only keys into bucket 10; on a ring of V = 10, bounded load (epsilon 0.25) caps 1.49 x to 1.25 x.".to_owned(),
        ],
        commands: vec![
            "lb hash --servers 5 --key-gen users --key-seed 16 --keys 10000 --hash fnv1a32-fmix32 \
             --schemes rendezvous --event remove:S2"
                .to_owned(),
            "lb hash --servers 10 --key-gen users --key-seed 16 --keys 10000 --hash fnv1a32-fmix32 \
             --schemes jump --event add:S10"
                .to_owned(),
            "lb hash --servers 10 --key-gen users --key-seed 16 --keys 10000 --hash fnv1a32-fmix32 \
             --schemes ring,bounded --vnodes 10 --epsilon 0.05,0.1,0.5,1,0.25"
                .to_owned(),
        ],
        text,
        reports: vec![("rendezvous-remove".to_owned(), hrw), ("jump-grow".to_owned(), jump), ("bounded".to_owned(), bounded)],
    })
}

/// The tutorial's hot key on 10 servers: its server before and after, by epsilon.
fn hot_key() -> Result<LabReport, LabError> {
    let mut keys = users(10_000);
    keys.add_hot_key("live-score", 5.0, 10)
        .map_err(|problem| LabError {
            input: super::lab::Input::Servers,
            problem,
        })?;
    let mut hot = input("10", keys, &[SchemeKind::Ring, SchemeKind::Bounded], &[]);
    hot.epsilon_sweep = vec![0.1, 0.5, 1.0, 0.25];
    hot.params.epsilon = 0.25;
    run(&hot)
}

/// Section 5's 0-999 ring with A and B in one zone: preference lists of two copies.
fn replicas_text() -> Result<String, LabError> {
    let mut lab = input(
        "A,B,C",
        KeySet::parse("a=100\nb=200\nc=300\nd=500\ne=950").unwrap_or_else(|_| unreachable_keys()),
        &[SchemeKind::Ring],
        &[],
    );
    lab.params = thousand_ring_params();
    lab.replication = Some(Replication {
        rf: 2,
        zones: parse_zones("A=z1,B=z1,C=z2").unwrap_or_default(),
    });
    Ok(run(&lab)?.replicas.map(|r| r.to_text()).unwrap_or_default())
}

/// S3 of 10 servers fails: who takes its keys.
fn failure_text() -> Result<String, LabError> {
    let mut lab = input("10", users(10_000), &[SchemeKind::Ring], &[]);
    lab.fail = Some("S3".to_owned());
    Ok(run(&lab)?.failure.map(|f| f.to_text()).unwrap_or_default())
}

fn section_hot_replicas_failure() -> Result<Section, LabError> {
    let hot = hot_key()?;
    let hot_text = hot
        .request_bound
        .as_ref()
        .map(|r| r.to_text())
        .unwrap_or_default();
    let text = [hot_text, replicas_text()?, failure_text()?].concat();
    Ok(Section {
        title: "8. Hot keys, replicas and failures".to_owned(),
        explanation: [
            "A key with 5x the average server load sinks its server; a bound on keys leaves it there, a bound".to_owned(),
            "on requests splits it. Copies go to the next distinct servers (and zones); a failure spreads with V.".to_owned(),
        ],
        commands: vec![
            "lb hash --servers 10 --key-gen users --key-seed 16 --keys 10000 --hash fnv1a32-fmix32 \
             --schemes ring,bounded --hot-key 5 --epsilon 0.1,0.5,1,0.25"
                .to_owned(),
            "lb hash --space 1000 --positions A=105,930 B=290,610 C=450,845 --hash value \
             --key-list a=100,b=200,c=300,d=500,e=950 --schemes ring --replicas 2 --zones A=z1,B=z1,C=z2"
                .to_owned(),
            "lb hash --servers 10 --key-gen users --key-seed 16 --keys 10000 --hash fnv1a32-fmix32 \
             --schemes ring --fail S3"
                .to_owned(),
        ],
        text,
        reports: vec![("hot-key".to_owned(), hot)],
    })
}
