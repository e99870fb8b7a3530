//! Health checks: probe settings, probers, the per-backend state machine, the scheduler
//! that runs probes in the daemon's tokio runtime, and the multi-failure policy.
//!
//! A self-contained engine below `config` in the layering: it uses the Maglev module's
//! [`BackendKey`](lb_maglev::BackendKey), `lb-common` (the probe mark) and its own
//! types, nothing from the controller, daemon or CLI. VIPs are a type parameter
//! ([`scheduler::VipId`]), so the controller's `Vip` plugs in as it is.
//!
//! # Modules
//! - [`file`](mod@file), [`settings`], [`validate`]: the `[vip.health]` table and a backend's
//!   `[vip.backend.health]` overrides as written, their checked forms
//!   ([`settings::ProbeSettings`], [`validate::VipHealth`]) and defaults; every error
//!   names its key;
//! - [`target`]: where a probe goes (direct: the backend; tunnel: the VIP, marked with
//!   the backend's id);
//! - [`probe`]: the probers (TCP connect, HTTP(S) GET, DNS over UDP) and the
//!   [`probe::Probe`] trait the scheduler calls;
//! - [`outcome`]: what one probe tells (latency, or a [`outcome::Failure`] reason);
//! - [`state`], [`damping`]: one backend's health (rise/fall hysteresis, the start
//!   rule, flap damping), pure;
//! - [`scheduler`], [`coalesce`]: many backends' probes with bounded concurrency, and
//!   their transitions batched per VIP;
//! - [`policy`]: which backends of a VIP get table slots, and whose flows are kept,
//!   from weights, drain and health, pure.
//!
//! # Semantics
//! - A backend becomes unhealthy after `fall` consecutive failed probes (default 3)
//!   and healthy after `rise` consecutive successes (default 2).
//! - At daemon start (and when added) a backend counts as healthy until it has failed
//!   `fall` times: a restart never empties a VIP while the first probes run.
//! - A backend that changes state more than `flap_transitions` times (default 4)
//!   within `flap_window_secs` (60) is held unhealthy for `flap_hold_secs` (60), logged
//!   once.
//! - Unhealthy: no table slots, its tracked flows re-picked (as if removed), same id and
//!   configuration; when healthy again the VIP's table is the one it had before (tables
//!   depend only on the set of backends and weights).
//! - Drain wins over health: a drained backend never gets slots and keeps its flows.
//! - Panic threshold (default 0 %, off) and all-down (default `open`): [`policy`].
//! - Transitions within 100 ms are one batch per VIP: one table change, not one per
//!   backend.
//!
//! # How the daemon plugs it in
//! 1. Config validation: for `vip[i]`, [`validate::VipHealth::from_file`] with
//!    `"vip[i].health"` and the VIP's port; for each backend,
//!    [`validate::VipHealth::backend`] with `"vip[i].backend[j].health"`, giving an
//!    `Option<ProbeSettings>`; [`validate::FieldError`]s become config errors.
//! 2. Daemon start: [`scheduler::Scheduler::start`] in the runtime; keep the batch
//!    receiver for the controller.
//! 3. After every applied configuration (start, reload, runtime add/remove): for each
//!    probed backend, [`target::ProbeTarget::select`] with the probe's mode, the VIP and
//!    backend addresses, the backend's id and the LB's source address, then
//!    [`scheduler::Scheduler::set`]; [`scheduler::Scheduler::retain`] drops the rest.
//! 4. Controller: for each [`coalesce::Batch`], rebuild each listed VIP once: its
//!    backends as [`policy::Candidate`]s (health from
//!    [`scheduler::Scheduler::is_healthy`]), [`policy::select`], a table from
//!    [`policy::Selection::table_backends`], and backend states from the placements
//!    (`Flows::Repick` as down, `Flows::Keep` without slots as draining).
//! 5. Status: [`scheduler::Scheduler::snapshot`] (serialisable) for `lb status` and
//!    `--json`.
//!
//! Steps 1 to 5 are `config::validate::health`, `daemon::health` (on its own runtime
//! thread) and `controller::health`.

pub mod coalesce;
pub mod damping;
pub mod file;
pub mod outcome;
pub mod policy;
pub mod probe;
pub mod scheduler;
pub mod settings;
pub mod state;
pub mod target;
pub mod validate;
