//! A save state stored in pieces, so that a snapshot writes what changed
//! since the last one, not the whole state.
//!
//! [`GameState::pieces`] cuts every list of the state (areas, characters,
//! history, content, ...) into **chunks** of consecutive elements, each a
//! JSON array named by a hash of its bytes, and keeps the small fields as
//! they are in a **manifest**: those fields plus, under [`CHUNKED`], the
//! chunk ids of each list in order.
//!
//! A chunk ends after an element whose own hash says so (about one element
//! in [`AVERAGE_ELEMENTS`]), or at [`MAX_ELEMENTS`] elements or
//! [`MAX_CHUNK_BYTES`] bytes. Because the cut points follow the elements'
//! content and not their positions, a change stays local: a new area changes
//! the list's last chunk, a new link the chunk that holds its area, and
//! history that drops its oldest entries changes its first chunk; every other
//! chunk keeps its bytes and so its id, and is not written again.
//!
//! [`assemble`] is the way back: the manifest and the chunks it names give
//! the state. A snapshot without [`CHUNKED`] is a whole state, as sessions'
//! first snapshots are (and every snapshot once was), and is read as such.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::state::GameState;

/// The format of the snapshots this build writes, in their `"format"`
/// key (the storage layer refuses newer ones). Snapshots without the key
/// (whole states, and manifests written before it) are format 1.
pub const SNAPSHOT_FORMAT: u32 = 1;
/// The manifest's key for the lists' chunk ids; its presence marks a
/// snapshot stored in pieces.
pub const CHUNKED: &str = "chunked";
/// About one element in this many ends a chunk.
pub const AVERAGE_ELEMENTS: u64 = 16;
/// Most elements in one chunk.
pub const MAX_ELEMENTS: usize = 128;
/// A chunk ends once it holds this many bytes.
pub const MAX_CHUNK_BYTES: usize = 16 * 1024;

/// One chunk: a JSON array of consecutive elements of one list.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// 32 hex digits of the SHA-256 of `body`.
    pub id: String,
    pub body: String,
}

/// A state cut up: the manifest, and every chunk it names (in list order;
/// a chunk named twice is listed twice).
#[derive(Debug, Clone)]
pub struct Pieces {
    pub manifest: String,
    pub chunks: Vec<Chunk>,
}

/// The fields stored in the manifest itself, as the state names them.
#[derive(Serialize)]
struct Manifest<'a> {
    format: u32,
    campaign_id: &'a str,
    title: &'a str,
    turn: u64,
    active_actor_id: &'a super::state::CharacterId,
    allowlist: &'a [String],
    player: &'a super::zones::PlayerRuntime,
    party: &'a super::party::Party,
    #[serde(skip_serializing_if = "super::timers::Timers::is_empty")]
    timers: &'a super::timers::Timers,
    #[serde(skip_serializing_if = "super::approvals::Approvals::is_empty")]
    approvals: &'a super::approvals::Approvals,
    chunked: BTreeMap<&'static str, Vec<String>>,
}

impl GameState {
    /// The state cut into a manifest and chunks (see the module's notes).
    pub fn pieces(&self) -> Result<Pieces, serde_json::Error> {
        // Every field, named: a new one does not compile until it is placed
        // in the manifest or in a list.
        let GameState {
            campaign_id,
            title,
            turn,
            active_actor_id,
            areas,
            characters,
            allowlist,
            lore,
            zones,
            player,
            npcs,
            content,
            events,
            history,
            party,
            timers,
            approvals,
        } = self;
        let mut cutter = Cutter::default();
        cutter.list("areas", areas.iter())?;
        cutter.list("characters", characters.iter())?;
        cutter.list("lore", lore.iter())?;
        cutter.list("zones", zones.iter())?;
        cutter.list("npcs", npcs.iter())?;
        cutter.list("content", content.iter())?;
        cutter.list("events", events.iter())?;
        cutter.list("history", history.iter())?;
        let manifest = serde_json::to_string(&Manifest {
            format: SNAPSHOT_FORMAT,
            campaign_id,
            title,
            turn: *turn,
            active_actor_id,
            allowlist,
            player,
            party,
            timers,
            approvals,
            chunked: cutter.lists,
        })?;
        Ok(Pieces {
            manifest,
            chunks: cutter.chunks,
        })
    }
}

/// Cuts lists into chunks.
#[derive(Default)]
struct Cutter {
    lists: BTreeMap<&'static str, Vec<String>>,
    chunks: Vec<Chunk>,
}

impl Cutter {
    fn list<'a, T: Serialize + 'a>(
        &mut self,
        name: &'static str,
        items: impl Iterator<Item = &'a T>,
    ) -> Result<(), serde_json::Error> {
        let mut ids = Vec::new();
        let mut body: Vec<u8> = vec![b'['];
        let mut elements = 0;
        for item in items {
            if elements > 0 {
                body.push(b',');
            }
            let start = body.len();
            serde_json::to_writer(&mut body, item)?;
            elements += 1;
            let ends_here = element_hash(&body[start..]).is_multiple_of(AVERAGE_ELEMENTS);
            if ends_here || elements >= MAX_ELEMENTS || body.len() >= MAX_CHUNK_BYTES {
                ids.push(self.finish(&mut body));
                elements = 0;
            }
        }
        if elements > 0 {
            ids.push(self.finish(&mut body));
        }
        self.lists.insert(name, ids);
        Ok(())
    }

    /// Closes the chunk in `body`, keeps it and answers its id; `body`
    /// starts the next one.
    fn finish(&mut self, body: &mut Vec<u8>) -> String {
        body.push(b']');
        let bytes = std::mem::replace(body, vec![b'[']);
        let id = chunk_id(&bytes);
        // serde_json writes UTF-8 only.
        let body = String::from_utf8(bytes).unwrap_or_default();
        self.chunks.push(Chunk {
            id: id.clone(),
            body,
        });
        id
    }
}

/// A start state stored once and named by every session that starts from
/// it unchanged, rather than copied into each one's first snapshot: a
/// built-in campaign's sessions all start from the same state, and its text
/// is the bulk of what creating one would otherwise serialize and write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStart {
    /// 32 hex digits of the SHA-256 of `text`: the same state always gets
    /// the same id, on every node and build, and another state never does.
    pub id: String,
    /// The whole state's JSON, as a session's first snapshot held it.
    pub text: String,
}

impl SharedStart {
    /// `state` serialized once, and named by its text.
    pub fn of(state: &GameState) -> Result<Self, serde_json::Error> {
        let text = serde_json::to_string(state)?;
        Ok(Self {
            id: chunk_id(text.as_bytes()),
            text,
        })
    }
}

/// The id of a chunk: 32 hex digits of its SHA-256.
fn chunk_id(body: &[u8]) -> String {
    hex(&Sha256::digest(body)[..16])
}

/// Bytes as lowercase hex digits, two per byte.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// FNV-1a, 64 bits, with MurmurHash3's finalizer so that its low bits are
/// as good as its high ones: where chunks end (stable across builds, unlike
/// the standard library's hasher).
fn element_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Why a stored snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    #[error("snapshot chunk {0} is missing")]
    MissingChunk(String),
    #[error("snapshot chunk {0} is not a JSON array")]
    BadChunk(String),
    #[error("snapshot is not a JSON object")]
    NotAnObject,
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

/// What a snapshot's text says about its pieces.
#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    chunked: Option<BTreeMap<String, Vec<String>>>,
}

/// The state a stored snapshot holds: a whole state, or a manifest whose
/// chunks are in `chunks` (by id; others there are ignored). Also answers the
/// ids the manifest names, which are stored and need not be written again.
pub fn assemble(
    snapshot: &str,
    chunks: &HashMap<String, String>,
) -> Result<(GameState, Vec<String>), AssembleError> {
    let Some(lists) = serde_json::from_str::<Probe>(snapshot)?.chunked else {
        let mut state: GameState = serde_json::from_str(snapshot)?;
        state.ensure_host_seat();
        return Ok((state, Vec::new()));
    };
    let rest = snapshot
        .trim_start()
        .strip_prefix('{')
        .ok_or(AssembleError::NotAnObject)?;
    let mut text =
        String::with_capacity(snapshot.len() + chunks.values().map(String::len).sum::<usize>());
    text.push('{');
    let mut named = Vec::new();
    for (name, ids) in &lists {
        text.push_str(&serde_json::to_string(name)?);
        text.push_str(":[");
        for (i, id) in ids.iter().enumerate() {
            let body = chunks
                .get(id)
                .ok_or_else(|| AssembleError::MissingChunk(id.clone()))?;
            // One JSON array of at least one element, nothing else.
            let is_array = serde_json::from_str::<Vec<serde::de::IgnoredAny>>(body)
                .is_ok_and(|elements| !elements.is_empty());
            let inner = body
                .trim()
                .strip_prefix('[')
                .and_then(|b| b.strip_suffix(']'))
                .filter(|_| is_array)
                .ok_or_else(|| AssembleError::BadChunk(id.clone()))?;
            if i > 0 {
                text.push(',');
            }
            text.push_str(inner);
            named.push(id.clone());
        }
        text.push_str("],");
    }
    // The manifest's own fields follow (its `chunked` key is not a field of
    // the state and is ignored).
    text.push_str(rest);
    let mut state: GameState = serde_json::from_str(&text)?;
    state.ensure_host_seat();
    named.sort_unstable();
    named.dedup();
    Ok((state, named))
}

/// Which chunks a session may leave out of its next snapshot: those sure
/// to be stored when that snapshot commits.
///
/// Snapshots commit in the order they are written, and one that commits
/// deletes every chunk it does not name, while one that fails changes
/// nothing. So once a snapshot is written, a chunk is sure to be there
/// after it only if it was sure before it *and* the snapshot names it
/// (whether it commits or fails); once it is durable, and no later snapshot
/// was written meanwhile, exactly what it named is there. A chunk that was
/// deleted and comes back (a value changed, then changed back) is so
/// written again.
#[derive(Debug, Default)]
pub struct StoredChunks {
    sure: HashSet<String>,
    written: u64,
}

/// A snapshot written: what to store, and what to report once durable.
#[derive(Debug)]
pub struct SnapshotChunks {
    /// Chunks to store, as (id, body).
    pub send: Vec<(String, String)>,
    /// Every chunk id the manifest names.
    pub keep: Vec<String>,
    /// Hand back to [`StoredChunks::durable`] once the snapshot is durable.
    pub ticket: ChunkTicket,
}

/// Which snapshot became durable, and what it named.
#[derive(Debug)]
pub struct ChunkTicket {
    number: u64,
    named: HashSet<String>,
}

impl StoredChunks {
    /// The chunks a loaded snapshot named (all stored).
    pub fn loaded(ids: impl IntoIterator<Item = String>) -> Self {
        Self {
            sure: ids.into_iter().collect(),
            written: 0,
        }
    }

    /// A snapshot of these chunks is written now.
    pub fn write(&mut self, chunks: Vec<Chunk>) -> SnapshotChunks {
        let mut named = HashSet::with_capacity(chunks.len());
        let mut send = Vec::new();
        for chunk in chunks {
            if named.insert(chunk.id.clone()) && !self.sure.contains(&chunk.id) {
                send.push((chunk.id, chunk.body));
            }
        }
        self.sure.retain(|id| named.contains(id));
        self.written += 1;
        SnapshotChunks {
            send,
            keep: named.iter().cloned().collect(),
            ticket: ChunkTicket {
                number: self.written,
                named,
            },
        }
    }

    /// The snapshot of `ticket` is durable.
    pub fn durable(&mut self, ticket: ChunkTicket) {
        if ticket.number == self.written {
            self.sure = ticket.named;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;
    use crate::game::state::{Area, AreaId, Effect, HistoryEntry};
    use crate::game::{BUILTIN_CAMPAIGNS, Campaign};

    fn demo() -> GameState {
        let campaign: Campaign =
            serde_json::from_str(BUILTIN_CAMPAIGNS[0].1).expect("demo campaign");
        campaign.into_state()
    }

    fn stored(p: &Pieces) -> HashMap<String, String> {
        p.chunks
            .iter()
            .map(|c| (c.id.clone(), c.body.clone()))
            .collect()
    }

    fn area(i: usize) -> Area {
        Area {
            area_id: AreaId::from(format!("gen_{i:04}")),
            name: format!("Generated place number {i}"),
            description: format!("A place made during play, the {i}th of its kind."),
            reachable_area_ids: vec![],
            x: i as i64,
            y: 0,
            z: 0,
            tags: vec!["generated".into()],
            group: String::new(),
            short_name: String::new(),
        }
    }

    /// A state that has grown: many areas, a full history.
    fn grown(areas: usize) -> GameState {
        let mut state = demo();
        let start = state.areas[0].area_id.clone();
        state.apply(&Effect::AddAreas {
            areas: (0..areas).map(area).collect(),
            links: vec![(start, AreaId::from("gen_0000"))],
        });
        for t in 0..300 {
            state.record(Arc::new(HistoryEntry::User {
                turn_id: format!("turn_{t}").into(),
                text: format!("go north, step {t}"),
                seat_id: None,
            }));
        }
        state
    }

    fn new_ids(before: &Pieces, after: &Pieces) -> Vec<String> {
        let old: HashSet<&str> = before.chunks.iter().map(|c| c.id.as_str()).collect();
        after
            .chunks
            .iter()
            .filter(|c| !old.contains(c.id.as_str()))
            .map(|c| c.id.clone())
            .collect()
    }

    #[test]
    fn a_state_comes_back_whole_from_its_pieces() {
        for state in [demo(), grown(1200), GameState::empty()] {
            let p = state.pieces().expect("cuts");
            let (back, ids) = assemble(&p.manifest, &stored(&p)).expect("assembles");
            assert_eq!(back, state);
            let mut named: Vec<String> = p.chunks.iter().map(|c| c.id.clone()).collect();
            named.sort_unstable();
            named.dedup();
            assert_eq!(ids, named);
        }
    }

    #[test]
    fn a_whole_state_is_read_as_it_always_was() {
        let state = grown(10);
        let text = serde_json::to_string(&state).expect("serializes");
        let (back, ids) = assemble(&text, &HashMap::new()).expect("reads");
        assert_eq!(back, state);
        assert!(ids.is_empty());
    }

    #[test]
    fn a_change_rewrites_a_chunk_or_two_not_the_state() {
        let mut state = grown(1200);
        let before = state.pieces().expect("cuts");
        assert!(before.chunks.len() > 50, "{}", before.chunks.len());
        let total: usize = before.chunks.iter().map(|c| c.body.len()).sum();

        // A turn: a new area linked from an old one, a move, three history
        // entries (the oldest drop out).
        let from = state.areas[600].area_id.clone();
        state.apply(&Effect::AddAreas {
            areas: vec![area(5000)],
            links: vec![(from, AreaId::from("gen_5000"))],
        });
        let pc = state.characters[0].character_id.clone();
        let to = state.areas[1].area_id.clone();
        state.apply(&Effect::Move {
            character_id: pc,
            to_area_id: to,
        });
        for (i, text) in ["explore", "you find a bridge"].iter().enumerate() {
            state.record(Arc::new(HistoryEntry::User {
                turn_id: format!("turn_x{i}").into(),
                text: (*text).into(),
                seat_id: None,
            }));
        }
        let after = state.pieces().expect("cuts");
        let fresh = new_ids(&before, &after);
        let fresh_bytes: usize = after
            .chunks
            .iter()
            .filter(|c| fresh.contains(&c.id))
            .map(|c| c.body.len())
            .sum();
        assert!(
            fresh.len() <= 8,
            "{} of {} chunks changed",
            fresh.len(),
            after.chunks.len()
        );
        assert!(
            fresh_bytes * 10 < total,
            "{fresh_bytes} of {total} bytes to write"
        );
        // What was not rewritten, with what was, gives the new state.
        let mut store = stored(&before);
        store.extend(stored(&after));
        assert_eq!(
            assemble(&after.manifest, &store).expect("assembles").0,
            state
        );
    }

    fn chunk(id: &str) -> Chunk {
        Chunk {
            id: id.into(),
            body: format!("[{id:?}]"),
        }
    }

    fn sent(w: &SnapshotChunks) -> Vec<&str> {
        let mut ids: Vec<&str> = w.send.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn a_snapshot_leaves_out_only_chunks_sure_to_be_stored() {
        let mut stored = StoredChunks::loaded(["a".to_owned(), "x".to_owned()]);
        let first = stored.write(vec![chunk("a"), chunk("b"), chunk("b")]);
        assert_eq!(sent(&first), ["b"], "once each, what was not stored");
        // `x` was changed, and before the first is durable it is back: the
        // first deletes it when it commits, so the second writes it again.
        let second = stored.write(vec![chunk("a"), chunk("b"), chunk("x")]);
        assert_eq!(sent(&second), ["b", "x"]);
        // The first is durable, but a later one was written: nothing is
        // taken for sure beyond what both named.
        stored.durable(first.ticket);
        assert_eq!(sent(&stored.write(vec![chunk("a"), chunk("b")])), ["b"]);
    }

    #[test]
    fn a_durable_snapshot_makes_its_chunks_sure_and_a_failed_one_nothing() {
        let mut stored = StoredChunks::default();
        let first = stored.write(vec![chunk("a"), chunk("b")]);
        assert_eq!(sent(&first), ["a", "b"]);
        stored.durable(first.ticket);
        assert!(sent(&stored.write(vec![chunk("a"), chunk("b")])).is_empty());
        // This one fails (no `durable`): what it wrote is not taken as
        // stored.
        let failed = stored.write(vec![chunk("a"), chunk("c")]);
        assert_eq!(sent(&failed), ["c"]);
        drop(failed);
        assert_eq!(sent(&stored.write(vec![chunk("a"), chunk("c")])), ["c"]);
    }

    #[test]
    fn chunks_are_bounded() {
        let p = grown(3000).pieces().expect("cuts");
        for c in &p.chunks {
            let elements: Vec<serde_json::Value> =
                serde_json::from_str(&c.body).expect("a chunk is an array");
            assert!((1..=MAX_ELEMENTS).contains(&elements.len()));
            // One element may carry a chunk past the byte bound, never two.
            let last = serde_json::to_string(elements.last().expect("one")).expect("json");
            assert!(c.body.len() < MAX_CHUNK_BYTES + last.len() + 2);
        }
    }

    #[test]
    fn a_missing_or_broken_chunk_is_an_error() {
        let p = grown(100).pieces().expect("cuts");
        let mut store = stored(&p);
        let id = p.chunks[0].id.clone();
        store.insert(id.clone(), "{}".into());
        assert!(matches!(
            assemble(&p.manifest, &store),
            Err(AssembleError::BadChunk(i)) if i == id
        ));
        store.insert(id.clone(), "[]".into());
        assert!(matches!(
            assemble(&p.manifest, &store),
            Err(AssembleError::BadChunk(_))
        ));
        store.remove(&id);
        assert!(matches!(
            assemble(&p.manifest, &store),
            Err(AssembleError::MissingChunk(i)) if i == id
        ));
        assert!(assemble("[1]", &store).is_err());
    }
}
