//! `lb fleet status|apply`: several daemons at once, through their remote APIs.
//!
//! - `lb fleet status`: each instance's `status`, then per VIP each instance's table
//!   fingerprint, generation, announcement and health summary, and whether they agree
//!   ([`compare`]). They agree on a VIP when every instance has it with the same
//!   fingerprint (the same table), the same announcement and the same health summary;
//!   the generation (how many tables the instance built) is shown, not compared.
//! - `lb fleet apply FILE`: pushes FILE's keys (`PUT /v1/config`) to every instance and
//!   reports each result (`--dry-run`: what each would change).
//!
//! The instances: `--instances URL,URL,...` with the credential flags, or a fleet file
//! (`--fleet FILE`, TOML; relative paths relative to it):
//!
//! ```toml
//! cacert = "ca.crt"            # defaults for every instance
//! token_file = "deploy.token"
//!
//! [[instance]]
//! name = "lb1"
//! url = "https://192.0.2.1:9443"
//!
//! [[instance]]
//! name = "lb2"
//! url = "https://192.0.2.2:9443"
//! token_file = "lb2.token"     # overrides the default
//! ```
//!
//! Exit status ([`FleetOutcome::exit_status`]): 0 every instance answered and they
//! agree (apply: every push applied); 1 they disagree (apply: a push was refused); 2 bad
//! arguments or fleet file; 3 an instance could not be reached or refused the client.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

use super::{Output, json, remote::CredentialArgs};
use crate::{
    api::client::{Credentials, Remote},
    cli::config::diff_text,
    control::{Client, ClientError, ConfigDiff, Request, Status, VipStatus},
};

/// `lb fleet`.
#[derive(Clone, Debug, clap::Args)]
pub struct FleetArgs {
    /// What to do.
    #[command(subcommand)]
    pub verb: FleetVerb,
}

/// The verbs of `lb fleet`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum FleetVerb {
    /// Per VIP, each instance's table fingerprint, generation, announcement and health,
    /// and whether they agree (exit status 1 when they do not, 3 when an instance is
    /// unreachable).
    Status(StatusArgs),
    /// Push a configuration's keys (e.g. every `[[vip]]` table) to every instance,
    /// which writes and reloads it; report each result (exit status 1 if any refused, 3
    /// if any is unreachable).
    Apply(ApplyArgs),
}

/// The instances and their credentials.
#[derive(Clone, Debug, clap::Args)]
pub struct InstanceArgs {
    /// The instances' API URLs, comma-separated (`https://HOST[:PORT],...`); the
    /// credential flags apply to each.
    #[arg(
        long,
        value_name = "URLS",
        value_delimiter = ',',
        conflicts_with = "fleet",
        required_unless_present = "fleet"
    )]
    pub instances: Vec<String>,
    /// A fleet file (TOML: default credentials, then one `[[instance]]` table per
    /// daemon with name, url and its own credentials).
    #[arg(long, value_name = "FILE")]
    pub fleet: Option<PathBuf>,
    /// The credentials, for each instance the fleet file gives none for.
    #[command(flatten)]
    pub creds: CredentialArgs,
}

/// `lb fleet status`.
#[derive(Clone, Debug, clap::Args)]
pub struct StatusArgs {
    /// The instances.
    #[command(flatten)]
    pub instances: InstanceArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `lb fleet apply`.
#[derive(Clone, Debug, clap::Args)]
pub struct ApplyArgs {
    /// The configuration to push (TOML): its top-level keys replace each daemon's
    /// (control_socket, state_dir and api may not be pushed).
    pub file: PathBuf,
    /// The instances.
    #[command(flatten)]
    pub instances: InstanceArgs,
    /// Only show what the push would change on each instance.
    #[arg(long, conflicts_with = "two_phase")]
    pub dry_run: bool,
    /// A two-phase rollout: every instance learns FILE first (the slots its tables move
    /// turn pending on the VIPs with the second chance, nothing is written); only when
    /// every instance did is FILE pushed (written and switched) to all.
    #[arg(long)]
    pub two_phase: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One instance: a name (its URL unless the fleet file names it) and its client.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct InstanceEntry {
    name: Option<String>,
    url: String,
    cacert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    token_file: Option<PathBuf>,
}

/// A fleet file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFile {
    cacert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    instance: Vec<InstanceEntry>,
}

/// What a fleet verb ends with: its output and its exit status.
#[derive(Debug)]
pub struct FleetOutcome {
    /// What to print.
    pub output: Output,
    /// 0, 1 or 3 (see the module documentation).
    pub exit_status: i32,
}

impl FleetOutcome {
    /// `report` as JSON, or as `text` renders it; the exit status 3 when an instance
    /// was `unreachable`, else 0 when `ok` and 1 when not.
    fn of<T: Serialize>(
        report: &T,
        as_json: bool,
        text: fn(&T) -> String,
        unreachable: bool,
        ok: bool,
    ) -> Self {
        let output = if as_json {
            json(report)
        } else {
            Output::text(text(report))
        };
        let exit_status = match (unreachable, ok) {
            (true, _) => 3,
            (false, true) => 0,
            (false, false) => 1,
        };
        Self {
            output,
            exit_status,
        }
    }
}

/// An error that stops a fleet verb before any instance is asked (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FleetError(String);

/// One instance's name and client.
struct Instance {
    name: String,
    url: String,
    client: Result<Client, ClientError>,
}

impl InstanceArgs {
    fn flag_credentials(&self) -> Credentials {
        self.creds.credentials()
    }

    /// The instances, each with its client (a client that cannot be made is that
    /// instance's failure, reported with it).
    fn resolve(&self) -> Result<Vec<Instance>, FleetError> {
        let flags = self.flag_credentials();
        let entries: Vec<(String, String, Credentials)> = match &self.fleet {
            None => self
                .instances
                .iter()
                .map(|u| (u.clone(), u.clone(), flags.clone()))
                .collect(),
            Some(path) => fleet_file(path, &flags)?,
        };
        if entries.is_empty() {
            return Err(FleetError(
                "no instances: give --instances or a fleet file with [[instance]] tables".into(),
            ));
        }
        Ok(entries
            .into_iter()
            .map(|(name, url, credentials)| Instance {
                client: Remote::new(&url, &credentials).map(|r| Client::through(Arc::new(r))),
                name,
                url,
            })
            .collect())
    }
}

/// The instances of the fleet file at `path`: (name, url, credentials); the flags'
/// credentials come before the file's defaults, an instance's own before both.
fn fleet_file(
    path: &Path,
    flags: &Credentials,
) -> Result<Vec<(String, String, Credentials)>, FleetError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| FleetError(format!("--fleet {}: {e}", path.display())))?;
    let file: FleetFile = toml::from_str(&text)
        .map_err(|e| FleetError(format!("--fleet {}: {e}", path.display())))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let rel = |p: Option<PathBuf>| p.map(|p| dir.join(p));
    let defaults = flags.clone().or(&Credentials {
        cacert: rel(file.cacert),
        cert: rel(file.cert),
        key: rel(file.key),
        token_file: rel(file.token_file),
    });
    Ok(file
        .instance
        .into_iter()
        .map(|i| {
            let own = Credentials {
                cacert: rel(i.cacert),
                cert: rel(i.cert),
                key: rel(i.key),
                token_file: rel(i.token_file),
            };
            (
                i.name.unwrap_or_else(|| i.url.clone()),
                i.url,
                own.or(&defaults),
            )
        })
        .collect())
}

/// Runs `f` for every instance at once (one thread each), in the instances' order.
fn each<T: Send>(
    instances: &[Instance],
    f: impl Fn(&Client) -> Result<T, ClientError> + Sync,
) -> Vec<Result<T, ClientError>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = instances
            .iter()
            .map(|i| {
                let f = &f;
                scope.spawn(move || match &i.client {
                    Ok(c) => f(c),
                    Err(e) => Err(ClientError::Remote(e.to_string())),
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ClientError::Remote("the request panicked".into())))
            })
            .collect()
    })
}

/// One instance in `lb fleet status --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceReport {
    /// Its name (the fleet file's, else its URL).
    pub name: String,
    /// Its API's URL.
    pub url: String,
    /// Why it gave no status (unreachable, refused), if it did not.
    pub error: Option<String>,
}

/// One VIP on one instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VipOnInstance {
    /// The instance's name.
    pub instance: String,
    /// Whether the instance runs the VIP (the other fields are `null` when not).
    pub present: bool,
    /// Table fingerprint (hex).
    pub fingerprint: Option<String>,
    /// Table generation (not compared: it counts the instance's own builds).
    pub generation: Option<u32>,
    /// `announced`, `withdrawn`, or `null` without `[announce]`.
    pub announcement: Option<String>,
    /// Backends by data-plane state, `3 active, 1 draining, 0 down`.
    pub health: Option<String>,
}

/// One VIP across the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetVip {
    /// `ADDR:PORT/PROTO`.
    pub vip: String,
    /// Whether every instance that answered agrees.
    pub agree: bool,
    /// What differs: `present`, `fingerprint`, `announcement`, `health`.
    pub differs: Vec<String>,
    /// Each instance that answered, in the fleet's order.
    pub instances: Vec<VipOnInstance>,
}

/// `lb fleet status --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetStatus {
    /// Whether every instance answered and they agree on every VIP.
    pub agree: bool,
    /// The instances, in the fleet's order.
    pub instances: Vec<InstanceReport>,
    /// Every VIP any instance runs, in VIP order.
    pub vips: Vec<FleetVip>,
}

/// `3 active, 1 draining, 0 down`: the VIP's backends by data-plane state.
fn health_summary(v: &VipStatus) -> String {
    let count = |s: &str| v.backends.iter().filter(|b| b.dataplane_state == s).count();
    format!(
        "{} active, {} draining, {} down",
        count("active"),
        count("draining"),
        count("down")
    )
}

/// One compared field of a VIP on an instance, as text.
type Field = fn(&VipOnInstance) -> String;

/// Compares the statuses of the instances that answered, `(name, status)`.
pub fn compare(statuses: &[(String, Status)]) -> Vec<FleetVip> {
    let mut names: BTreeMap<String, ()> = BTreeMap::new();
    for (_, s) in statuses {
        for v in &s.vips {
            names.insert(v.vip.clone(), ());
        }
    }
    names
        .into_keys()
        .map(|vip| {
            let instances: Vec<VipOnInstance> = statuses
                .iter()
                .map(|(name, s)| {
                    let found = s.vips.iter().find(|v| v.vip == vip);
                    VipOnInstance {
                        instance: name.clone(),
                        present: found.is_some(),
                        fingerprint: found.map(|v| v.fingerprint.clone()),
                        generation: found.map(|v| v.generation),
                        announcement: found.and_then(|v| v.announce.as_ref()).map(|a| {
                            if a.announced {
                                "announced"
                            } else {
                                "withdrawn"
                            }
                            .to_owned()
                        }),
                        health: found.map(health_summary),
                    }
                })
                .collect();
            let mut differs = Vec::new();
            let fields: [(&str, Field); 4] = [
                ("present", |i| i.present.to_string()),
                ("fingerprint", |i| format!("{:?}", i.fingerprint)),
                ("announcement", |i| format!("{:?}", i.announcement)),
                ("health", |i| format!("{:?}", i.health)),
            ];
            for (field, get) in fields {
                if instances.windows(2).any(|w| get(&w[0]) != get(&w[1])) {
                    differs.push(field.to_owned());
                }
            }
            FleetVip {
                vip,
                agree: differs.is_empty(),
                differs,
                instances,
            }
        })
        .collect()
}

/// Runs `lb fleet status`.
///
/// # Errors
/// [`FleetError`]: bad arguments or fleet file.
pub fn status(args: &StatusArgs) -> Result<FleetOutcome, FleetError> {
    let instances = args.instances.resolve()?;
    let answers = each(&instances, Client::status);
    let mut reports = Vec::new();
    let mut statuses = Vec::new();
    for (i, answer) in instances.iter().zip(answers) {
        let error = match answer {
            Ok(s) => {
                statuses.push((i.name.clone(), s));
                None
            }
            Err(e) => Some(e.to_string()),
        };
        reports.push(InstanceReport {
            name: i.name.clone(),
            url: i.url.clone(),
            error,
        });
    }
    let vips = compare(&statuses);
    let unreachable = reports.iter().any(|r| r.error.is_some());
    let agree = !unreachable && vips.iter().all(|v| v.agree);
    let report = FleetStatus {
        agree,
        instances: reports,
        vips,
    };
    Ok(FleetOutcome::of(
        &report,
        args.json,
        status_text,
        unreachable,
        agree,
    ))
}

/// The text of `lb fleet status`.
pub fn status_text(r: &FleetStatus) -> String {
    let mut out = String::new();
    for v in &r.vips {
        let verdict = if v.agree {
            "agree".to_owned()
        } else {
            format!("DIFFER ({})", v.differs.join(", "))
        };
        let _ = writeln!(out, "VIP {}: {verdict}", v.vip);
        let width = v
            .instances
            .iter()
            .map(|i| i.instance.len())
            .max()
            .unwrap_or(0);
        for i in &v.instances {
            if !i.present {
                let _ = writeln!(out, "  {:width$}  (not running this VIP)", i.instance);
                continue;
            }
            let _ = writeln!(
                out,
                "  {:width$}  fingerprint {}  generation {}  {}  {}",
                i.instance,
                i.fingerprint.as_deref().unwrap_or("-"),
                i.generation.map_or_else(|| "-".into(), |g| g.to_string()),
                i.announcement.as_deref().unwrap_or("(no announce)"),
                i.health.as_deref().unwrap_or("-"),
            );
        }
    }
    for i in &r.instances {
        if let Some(e) = &i.error {
            let _ = writeln!(out, "instance {}: no status: {e}", i.name);
        }
    }
    let _ = writeln!(
        out,
        "fleet: {} instances, {} VIPs: {}",
        r.instances.len(),
        r.vips.len(),
        if r.agree {
            "they agree"
        } else if r.instances.iter().any(|i| i.error.is_some()) {
            "NOT ALL ANSWERED"
        } else {
            "THEY DISAGREE"
        }
    );
    out
}

/// One instance in `lb fleet apply --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyResult {
    /// Its name.
    pub name: String,
    /// Its API's URL.
    pub url: String,
    /// Whether the push applied (with `--dry-run`: would apply).
    pub ok: bool,
    /// What it changes, when it applied.
    pub diff: Option<ConfigDiff>,
    /// With `--two-phase`: what its first phase learned (absent without the flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<crate::control::Learned>,
    /// Why not, when it did not.
    pub error: Option<String>,
}

/// `lb fleet apply --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetApply {
    /// The file pushed.
    pub file: String,
    /// Whether nothing was written (`--dry-run`).
    pub dry_run: bool,
    /// Whether it was rolled out in two phases (`--two-phase`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub two_phase: bool,
    /// Whether every instance applied it.
    pub ok: bool,
    /// Each instance, in the fleet's order.
    pub instances: Vec<ApplyResult>,
}

/// Runs `lb fleet apply FILE`.
///
/// # Errors
/// [`FleetError`]: bad arguments, fleet file, or a FILE that is not TOML or sets an
/// instance's own keys (nothing is pushed then).
pub fn apply(args: &ApplyArgs) -> Result<FleetOutcome, FleetError> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| FleetError(format!("{}: {e}", args.file.display())))?;
    crate::config::push::merge("", &text)
        .map_err(|e| FleetError(format!("{}: {e}", args.file.display())))?;
    let instances = args.instances.resolve()?;
    let mut unreachable = false;
    let mut learned: Vec<Option<crate::control::Learned>> = vec![None; instances.len()];
    let mut errors: Vec<Option<String>> = vec![None; instances.len()];
    if args.two_phase {
        // Phase 1 on every instance; phase 2 only when all of them learned.
        let learn = Request::PushLearn { toml: text.clone() };
        let answers = each(&instances, |c| c.change::<crate::control::Learned>(&learn));
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(l) => learned[i] = Some(l),
                Err(e) => {
                    unreachable |= !matches!(e, ClientError::Refused(_));
                    errors[i] = Some(format!("phase 1 (learn): {e}"));
                }
            }
        }
    }
    let phase1_ok = errors.iter().all(Option::is_none);
    let request = Request::PushConfig {
        toml: text,
        dry_run: args.dry_run,
    };
    let answers: Vec<Result<ConfigDiff, ClientError>> = if phase1_ok {
        each(&instances, |c| c.change::<ConfigDiff>(&request))
    } else {
        instances
            .iter()
            .map(|_| {
                Err(ClientError::Refused(
                    "not switched: phase 1 failed on an instance".into(),
                ))
            })
            .collect()
    };
    let results: Vec<ApplyResult> = instances
        .iter()
        .zip(answers)
        .enumerate()
        .map(|(k, (i, a))| {
            let (diff, error) = match (a, errors[k].take()) {
                (_, Some(e)) => (None, Some(e)),
                (Ok(d), None) => (Some(d), None),
                (Err(e), None) => {
                    unreachable |= !matches!(e, ClientError::Refused(_));
                    (None, Some(e.to_string()))
                }
            };
            ApplyResult {
                name: i.name.clone(),
                url: i.url.clone(),
                ok: error.is_none(),
                diff,
                learned: learned[k].take(),
                error,
            }
        })
        .collect();
    let report = FleetApply {
        file: args.file.display().to_string(),
        dry_run: args.dry_run,
        two_phase: args.two_phase,
        ok: results.iter().all(|r| r.ok),
        instances: results,
    };
    let ok = report.ok;
    Ok(FleetOutcome::of(
        &report,
        args.json,
        apply_text,
        unreachable,
        ok,
    ))
}

/// The text of `lb fleet apply`: each instance's result, then a summary line.
pub fn apply_text(r: &FleetApply) -> String {
    let mut out = String::new();
    let verb = if r.dry_run { "would apply" } else { "applied" };
    for i in &r.instances {
        match (&i.diff, &i.error) {
            (Some(d), _) => {
                let _ = writeln!(out, "{}: {verb}", i.name);
                for v in i.learned.iter().flat_map(|l| &l.vips) {
                    let _ = writeln!(
                        out,
                        "  phase 1 (learn): {}: {} slots pending their next owner",
                        v.vip, v.pending_slots
                    );
                }
                for line in diff_text(d).lines() {
                    let _ = writeln!(out, "  {line}");
                }
            }
            (None, e) => {
                let _ = writeln!(out, "{}: FAILED: {}", i.name, e.as_deref().unwrap_or("?"));
            }
        }
    }
    let failed = r.instances.iter().filter(|i| !i.ok).count();
    let _ = writeln!(
        out,
        "fleet: {} of {} instances {verb} {}{}",
        r.instances.len() - failed,
        r.instances.len(),
        r.file,
        if r.two_phase {
            " in two phases (every instance learned it first)"
        } else {
            ""
        }
    );
    out
}
