//! The versions of what a node stores for a session, and the gate that
//! keeps a node from reading a version it does not know.
//!
//! Journal steps carry theirs in their body (`{"format":2,...}`,
//! [`super::steps`]; a bare array is format 1). Snapshots carry theirs in a
//! `"format"` key beside the state's fields; a snapshot without one is
//! format 1 (every snapshot written before the key existed, and a session's
//! first snapshot, a whole state).
//!
//! During a rolling upgrade a newer node may write a format this one does
//! not read. Reading it is refused with [`StorageError::NewerFormat`],
//! never as corrupt data and never by replaying what came before it: the
//! session is left (its claim released) to a node that reads it, and the
//! client is told to try again, elsewhere.

use serde::Deserialize;

use super::StorageError;

/// The newest journal step format this build reads, and the one it writes.
pub const JOURNAL_FORMAT: u32 = 3;
/// The newest snapshot format this build reads: [`SHARED_START_FORMAT`].
/// The snapshots a running session writes stay format 1
/// ([`crate::game::pieces::SNAPSHOT_FORMAT`]), which older builds read too.
pub const SNAPSHOT_FORMAT: u32 = SHARED_START_FORMAT;
/// The format of a session's first snapshot that names a shared start
/// (`{"format":2,"start":"<id>"}`) rather than holding its state: a build
/// that does not know `shared_starts` refuses it by its format, not as
/// a corrupt state.
pub const SHARED_START_FORMAT: u32 = 2;

/// The first snapshot of a session that starts from shared start `id`.
/// An id is hex digits ([`crate::game::pieces::SharedStart`]): nothing in
/// it needs escaping.
pub fn shared_start_ref(id: &str) -> String {
    format!(r#"{{"format":{SHARED_START_FORMAT},"start":"{id}"}}"#)
}

/// What a format belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Journal,
    Snapshot,
}

impl Stored {
    /// The newest format of it this build reads.
    pub fn newest(self) -> u32 {
        match self {
            Self::Journal => JOURNAL_FORMAT,
            Self::Snapshot => SNAPSHOT_FORMAT,
        }
    }
}

impl std::fmt::Display for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Journal => "journal",
            Self::Snapshot => "snapshot",
        })
    }
}

/// `format` of `what`, when this build reads it; else the refusal.
pub fn check(what: Stored, format: u64) -> Result<(), StorageError> {
    if format <= u64::from(what.newest()) {
        Ok(())
    } else {
        Err(StorageError::NewerFormat {
            what,
            found: format,
            newest: what.newest(),
        })
    }
}

/// Only the `format` and `start` keys of a snapshot, its other fields
/// skipped.
#[derive(Deserialize)]
struct SnapshotProbe {
    #[serde(default)]
    format: Option<u64>,
    #[serde(default)]
    start: Option<String>,
}

/// Refuses a snapshot of a format newer than [`SNAPSHOT_FORMAT`]; answers
/// the shared start it names if it is a [`shared_start_ref`], whose state
/// is then read from `shared_starts`. A snapshot that does not read as a
/// JSON object is left for the state's own reading to call corrupt.
pub fn check_snapshot(snapshot: &str) -> Result<Option<String>, StorageError> {
    match serde_json::from_str::<SnapshotProbe>(snapshot) {
        Ok(SnapshotProbe {
            format: Some(format),
            start,
        }) => {
            check(Stored::Snapshot, format)?;
            Ok(start.filter(|_| format == u64::from(SHARED_START_FORMAT)))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_up_to_the_newest_read_and_newer_ones_are_refused_by_name() {
        // (what, format, read)
        let cases = [
            (Stored::Journal, 1, true),
            (Stored::Journal, u64::from(JOURNAL_FORMAT), true),
            (Stored::Journal, u64::from(JOURNAL_FORMAT) + 1, false),
            (Stored::Snapshot, 1, true),
            (Stored::Snapshot, u64::from(SNAPSHOT_FORMAT) + 1, false),
            (Stored::Snapshot, u64::MAX, false),
        ];
        for (what, format, read) in cases {
            let got = check(what, format);
            assert_eq!(got.is_ok(), read, "{what} {format}");
            if let Err(e) = got {
                let text = e.to_string();
                assert!(
                    text.contains(&format.to_string())
                        && text.contains(&what.newest().to_string())
                        && text.contains(&what.to_string()),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn a_snapshot_says_its_format_or_is_format_one() {
        let newer = SNAPSHOT_FORMAT + 1;
        // (snapshot, read)
        let cases = [
            (r#"{"campaign_id":"demo","turn":3}"#.to_owned(), true),
            (format!(r#"{{"format":{SNAPSHOT_FORMAT},"turn":3}}"#), true),
            (format!(r#"{{"turn":3,"format":{newer}}}"#), false),
            // Not a state at all: the state's reading says why.
            ("[1,2]".to_owned(), true),
            ("not json".to_owned(), true),
        ];
        for (snapshot, read) in cases {
            assert_eq!(check_snapshot(&snapshot).is_ok(), read, "{snapshot}");
        }
    }

    #[test]
    fn only_a_shared_start_ref_names_a_start() {
        // (snapshot, the start it names)
        let cases = [
            (shared_start_ref("0a1b"), Some("0a1b")),
            (r#"{"format":1,"start":"0a1b"}"#.to_owned(), None),
            (r#"{"start":"0a1b","turn":3}"#.to_owned(), None),
            (
                format!(r#"{{"format":{SHARED_START_FORMAT},"turn":3}}"#),
                None,
            ),
        ];
        for (snapshot, named) in cases {
            let got = check_snapshot(&snapshot).expect("read");
            assert_eq!(got.as_deref(), named, "{snapshot}");
        }
    }
}
