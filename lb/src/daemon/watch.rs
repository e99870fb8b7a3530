//! Watching the configuration file for real changes.
//!
//! The file's directory is watched (editors replace files by rename) and only events
//! that can change its bytes count: a write (`IN_MODIFY`), a creation, or a rename onto
//! it. Opens, reads, closes (also after opening for writing without writing) and
//! metadata changes (`touch`) never do, so `cat`, `grep`, a backup or a configuration
//! management run that finds nothing to change cause no reload. Even then, a reload
//! whose bytes equal the last ones seen does nothing ([`LastSeen`]).

use std::path::Path;

use notify::{
    EventKind,
    event::{ModifyKind, RenameMode},
};
use tokio::sync::mpsc;

/// Whether an event of `kind` can have changed a file's bytes.
pub(super) fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) => true,
        EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => true,
        EventKind::Modify(ModifyKind::Name(mode)) => {
            matches!(mode, RenameMode::To | RenameMode::Both | RenameMode::Any)
        }
        _ => false,
    }
}

/// Watches `path` (through its directory) and sends a unit for every event that can
/// change its bytes.
///
/// # Errors
/// When the watch cannot be set up.
pub(super) fn watch(
    path: &Path,
    tx: mpsc::UnboundedSender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let file_name = path.file_name().map(ToOwned::to_owned);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && changes_content(&event.kind)
            && event
                .paths
                .iter()
                .any(|p| p.file_name().map(ToOwned::to_owned) == file_name)
        {
            let _ = tx.send(());
        }
    })?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// The bytes of the file last loaded (applied or refused), to skip a reload that would
/// read the same bytes again.
#[derive(Debug, Default)]
pub(super) struct LastSeen(Option<Vec<u8>>);

impl LastSeen {
    /// Records `bytes`; `true` when they differ from the last ones.
    pub(super) fn differs(&mut self, bytes: &[u8]) -> bool {
        if self.0.as_deref() == Some(bytes) {
            return false;
        }
        self.0 = Some(bytes.to_vec());
        true
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, MetadataKind};

    use super::*;

    #[test]
    fn only_writes_creates_and_renames_onto_the_file_count() {
        assert!(changes_content(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(changes_content(&EventKind::Create(CreateKind::File)));
        assert!(changes_content(&EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
        assert!(!changes_content(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!changes_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!changes_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(!changes_content(&EventKind::Modify(ModifyKind::Metadata(
            MetadataKind::Any
        ))));
        assert!(!changes_content(&EventKind::Modify(ModifyKind::Name(
            RenameMode::From
        ))));
    }

    #[test]
    fn the_same_bytes_twice_are_skipped() {
        let mut seen = LastSeen::default();
        assert!(seen.differs(b"a"));
        assert!(!seen.differs(b"a"));
        assert!(seen.differs(b"b"));
    }
}
