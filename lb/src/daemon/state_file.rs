//! The state file: the runtime changes ([`Overrides`]) of one interface's daemon,
//! `<state_dir>/<interface>.state.json`, so that they survive reloads and restarts
//! (as HAProxy's server-state-file keeps runtime server states).
//!
//! - Written atomically: a temporary file next to it, `fsync`, `rename` over it, then
//!   `fsync` of the directory, so a crash leaves the old file or the new one, whole.
//! - Read at start before anything touches the data plane: an unreadable or corrupt
//!   file is an error naming the file and the problem, and nothing is applied.
//! - Format (JSON): `{"version": 1, "overrides": [{"vip": "203.0.113.10:80/tcp",
//!   "backend": "198.51.100.13", "runtime": {"weight": 1, "state": "drain"},
//!   "file": {"weight": 1, "state": "active"}}]}`; `runtime` or `file` is `null` for
//!   a backend removed at runtime or absent from the file.

use std::{
    fs::File,
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::controller::{Override, Overrides};

/// Version of the file's format.
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    version: u32,
    overrides: Vec<Override>,
}

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("state file {}: {problem}", .path.display())]
pub struct StateFileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub problem: String,
}

/// One interface's state file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The state file of `interface` in `state_dir`.
    pub fn new(state_dir: &Path, interface: &str) -> Self {
        Self {
            path: state_dir.join(format!("{interface}.state.json")),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, problem: impl Into<String>) -> StateFileError {
        StateFileError {
            path: self.path.clone(),
            problem: problem.into(),
        }
    }

    /// The overrides stored; none when the file does not exist.
    ///
    /// # Errors
    /// An unreadable file, invalid JSON or an unknown format version.
    pub fn load(&self) -> Result<Overrides, StateFileError> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Overrides::default());
            }
            Err(e) => return Err(self.error(format!("cannot be read: {e}"))),
        };
        let stored: Stored =
            serde_json::from_slice(&text).map_err(|e| self.error(format!("is corrupt: {e}")))?;
        if stored.version != VERSION {
            return Err(self.error(format!(
                "has format version {}, this lb reads version {VERSION}",
                stored.version
            )));
        }
        Ok(Overrides::from_items(stored.overrides))
    }

    /// Replaces the file with `overrides` atomically (module documentation); creates
    /// the directory when missing.
    ///
    /// # Errors
    /// When the directory, the temporary file or the rename fails (the old file then
    /// stays as it was).
    pub fn save(&self, overrides: &Overrides) -> Result<(), StateFileError> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(dir)
            .map_err(|e| self.error(format!("creating {}: {e}", dir.display())))?;
        let stored = Stored {
            version: VERSION,
            overrides: overrides.items().copied().collect(),
        };
        let mut text =
            serde_json::to_vec_pretty(&stored).map_err(|e| self.error(format!("encoding: {e}")))?;
        text.push(b'\n');
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let write = || -> std::io::Result<()> {
            let mut file = File::options()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            File::open(dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.error(format!("writing: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config::BackendState, controller::BackendSpec};

    fn dir() -> PathBuf {
        crate::daemon::test_fixture::temp_dir("lb-state-test")
    }

    #[test]
    fn saves_and_loads_and_names_the_file_when_corrupt() {
        let d = dir();
        let file = StateFile::new(&d, "eth0");
        assert!(
            file.load().unwrap().is_empty(),
            "missing file: no overrides"
        );
        let o = Overrides::from_items([Override {
            vip: "203.0.113.10:80/tcp".parse().unwrap(),
            backend: "198.51.100.13".parse().unwrap(),
            runtime: Some(BackendSpec {
                weight: 1,
                state: BackendState::Drain,
            }),
            file: Some(BackendSpec {
                weight: 1,
                state: BackendState::Active,
            }),
        }]);
        file.save(&o).unwrap();
        assert_eq!(file.load().unwrap(), o);
        std::fs::write(file.path(), "{\"version\": 1, \"overrides\": [").unwrap();
        let e = file.load().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "state file {}: is corrupt: ",
                file.path().display()
            )),
            "{e}"
        );
        std::fs::remove_dir_all(d).unwrap();
    }
}
