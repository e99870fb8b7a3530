//! `PUT /v1/config` (`lb fleet apply`) in the daemon: the pushed keys merged into the
//! daemon's file ([`crate::config::push::merge`]), the result validated, written beside
//! it, then moved over the file and reloaded as on SIGHUP. Nothing is written
//! when the result does not load or needs a restart; a dry run writes nothing.

use std::path::{Path, PathBuf};

use tracing::info;

use super::Shared;
use crate::{
    config::{Config, push},
    control::{ConfigDiff, Response},
};

/// Answers a push of `toml` (see the module documentation).
pub(super) fn push_request(service: &Shared, toml: &str, dry_run: bool) -> Response {
    match push(service, toml, dry_run) {
        Ok(diff) => Response::ok(diff),
        Err(e) => Response::error(e),
    }
}

/// `lb fleet apply --two-phase`'s first phase
/// ([`Request::PushLearn`](crate::control::Request::PushLearn)): the daemon's file
/// merged with `toml` is learned (`Service::learn`); nothing is written.
pub(super) fn learn_request(service: &Shared, toml: &str) -> Response {
    let mut s = service.lock().unwrap_or_else(|p| p.into_inner());
    let file = s.config_file().to_path_buf();
    let learned = std::fs::read_to_string(&file)
        .map_err(|e| format!("reading {}: {e}", file.display()))
        .and_then(|current| push::merge(&current, toml))
        .and_then(|merged| {
            Config::from_toml(&merged).map_err(|e| {
                format!(
                    "the pushed configuration merged into the daemon's file does not validate: {e}"
                )
            })
        })
        .and_then(|loaded| s.learn(&loaded).map_err(|e| e.to_string()));
    match learned {
        Ok(l) => Response::ok(l),
        Err(e) => Response::error(e),
    }
}

/// A file beside `file` that is removed when dropped unless it was moved.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn push(service: &Shared, toml: &str, dry_run: bool) -> Result<ConfigDiff, String> {
    let s = service.lock().unwrap_or_else(|p| p.into_inner());
    let file = s.config_file().to_path_buf();
    let current =
        std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let merged = push::merge(&current, toml)?;
    let loaded = Config::from_toml(&merged).map_err(|e| {
        format!("the pushed configuration merged into the daemon's file does not validate: {e}")
    })?;
    let mut diff = s.diff(&loaded, &file).map_err(|e| e.to_string())?;
    diff.file = file.display().to_string();
    if !diff.restart_needed.is_empty() {
        return Err(format!(
            "the pushed configuration changes settings only a restart applies ({}); nothing written",
            diff.restart_needed.join(", ")
        ));
    }
    if dry_run || !diff.changed {
        return Ok(diff);
    }
    let scratch = Scratch(scratch_path(&file));
    write_like(&scratch.0, &file, merged.as_bytes())?;
    std::fs::rename(&scratch.0, &file).map_err(|e| format!("replacing {}: {e}", file.display()))?;
    std::mem::forget(scratch);
    drop(s);
    info!(
        "pushed configuration written to {}: reloading as on SIGHUP",
        file.display()
    );
    // SAFETY: raise(3) sends a signal to this process; SIGHUP is handled by the event
    // loop (tokio's signal handler), never the default action.
    unsafe { libc::raise(libc::SIGHUP) };
    Ok(diff)
}

/// `.NAME.push-PID` beside `file`, so a rename replaces it atomically.
fn scratch_path(file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map_or_else(|| "lb.toml".into(), |n| n.to_string_lossy().into_owned());
    file.with_file_name(format!(".{name}.push-{}", std::process::id()))
}

/// Writes `bytes` to `path` with `like`'s permissions.
fn write_like(path: &Path, like: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    if let Ok(meta) = std::fs::metadata(like) {
        std::fs::set_permissions(path, meta.permissions())
            .map_err(|e| format!("setting the mode of {}: {e}", path.display()))?;
    }
    Ok(())
}
