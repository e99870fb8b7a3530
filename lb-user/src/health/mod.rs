//! Health checks: probe settings, probers, the per-backend state machine, the scheduler
//! and the multi-failure policy. A self-contained engine below `config`: it uses the
//! Maglev module's types and `lb-common`, nothing from the controller, daemon or CLI.
//!
//! - [`file`], [`settings`], [`validate`]: the `[vip.health]` and
//!   `[vip.backend.health]` tables, their checked forms and defaults;
//! - [`outcome`]: what one probe tells (latency or a [`outcome::Failure`]);
//! - [`state`], [`damping`]: one backend's health (hysteresis, start rule, flap
//!   damping), pure;
//! - [`policy`]: which backends of a VIP get table slots, pure.

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
