//! One session of a load test: create it over HTTP, seat its party (an
//! invite, the other players joining, the turn mode), connect its players
//! and spectators, play its turns, and check every frame each connection
//! receives.
//!
//! The session's task owns the creator's connection; every other player
//! plays, and each spectator reads, in a task of its own, and hands its
//! checker back at the end, when the spectators are compared with the
//! creator's connection.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot, watch};

use super::args::TurnMode;
use super::check::{FrameHead, Observed, StreamChecker};
use super::client::{SourcePicker, Target};
use super::report::{Counted, Stats, codes};
use super::ws::{Conn, Incoming, error_code_of};
use crate::error::with_causes;

/// Chats sent for one turn before it counts as refused (a chat refused with
/// `RATE_LIMITED` or `QUEUE_FULL` is sent again after the wait asked for).
const MAX_CHAT_ATTEMPTS: usize = 10;
/// Longest wait before sending a refused chat again.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// Wait after `QUEUE_FULL`, which names none.
const QUEUE_FULL_WAIT: Duration = Duration::from_secs(1);
/// Receive buffer a slow spectator asks for, so the server's writes back up
/// after a few frames instead of filling megabytes of kernel buffers.
const SLOW_RECEIVE_BUFFER: u32 = 4096;
/// A round's deadline in rounds mode, the longest the server takes: rounds
/// here resolve because every player acted, and a player whose connection
/// broke is offline, so no round waits for it.
const ROUND_TIMEOUT_S: u32 = 3600;

/// What every session of a run does, validated from the flags.
#[derive(Debug, Clone)]
pub struct Plan {
    pub sessions: usize,
    /// Players per session: the creator and those who join.
    pub players: usize,
    pub turn_mode: TurnMode,
    pub spectators: usize,
    /// Fraction of spectators that never read after `welcome`.
    pub slow_spectators: f64,
    pub turns: usize,
    pub think: Duration,
    pub ramp_up: Duration,
    pub campaign: String,
    /// Sent as `X-Internal-API-Key` when creating sessions, so the server's
    /// per-address creation limit does not apply.
    pub api_key: Option<String>,
    /// Chat templates, used in turn.
    pub messages: Vec<String>,
    pub hold: Duration,
    pub frame_timeout: Duration,
    /// When the run began, and when no new turn may start.
    pub started: Instant,
    pub deadline: Option<Instant>,
}

impl Plan {
    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Whether sessions are played as parties: several players, or rounds.
    pub fn party(&self) -> bool {
        self.players > 1 || self.turn_mode == TurnMode::Rounds
    }

    /// A connection's checker: with the party checks in party play.
    fn checker(&self) -> StreamChecker {
        if self.party() {
            StreamChecker::for_party()
        } else {
            StreamChecker::new()
        }
    }

    /// Whether spectator `nth` of session `session` is a slow one: spread
    /// evenly, `slow_spectators` of all spectators of the run.
    pub fn is_slow(&self, session: usize, nth: usize) -> bool {
        let k = (session * self.spectators + nth) as f64;
        ((k + 1.0) * self.slow_spectators).floor() > (k * self.slow_spectators).floor()
    }
}

/// Everything the tasks of one run share.
#[derive(Debug)]
pub struct Run {
    pub plan: Plan,
    pub target: Target,
    pub http: reqwest::Client,
    pub sources: SourcePicker,
    /// Session creations and connection attempts in flight at once.
    pub gate: Semaphore,
    pub stats: Arc<Stats>,
    /// The sessions done playing (or given up); `--hold` waits for all of
    /// them.
    pub played: Countdown,
}

/// Arrivals counted down from a known total: whoever waits for all of them
/// is woken once, by the last.
///
/// A count kept in a `watch` woke every waiter at every arrival. The ten
/// thousand spectators of one session, done with its last turn one by one
/// and each then waiting for the others, woke all those already done at
/// each arrival, on the cores the rest were still reading that turn on: the
/// last turn was the run's slowest fan-out (BENCHMARKS.md, "Fan-out").
#[derive(Debug)]
pub struct Countdown {
    left: AtomicUsize,
    all: watch::Sender<bool>,
}

impl Countdown {
    pub fn new(total: usize) -> Self {
        Self {
            left: AtomicUsize::new(total),
            all: watch::channel(total == 0).0,
        }
    }

    /// Counts one arrival; the last one wakes the waiters. Arrivals past
    /// the total change nothing.
    fn arrive(&self) {
        let before = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if before == Ok(1) {
            self.all.send_replace(true);
        }
    }

    /// Waits until every arrival is in.
    async fn all_arrived(&self) {
        let _ = self.all.subscribe().wait_for(|all| *all).await;
    }
}

/// Counts one arrival exactly once (a session done playing, a spectator
/// done reading), also when it gives up early, so nothing waits for one
/// that will not come (`--hold` for the sessions, a session's spectators
/// for each other before they close).
struct Arrival<'a> {
    count: &'a Countdown,
    done: bool,
}

impl<'a> Arrival<'a> {
    fn new(count: &'a Countdown) -> Self {
        Self { count, done: false }
    }

    fn arrive(&mut self) {
        if !self.done {
            self.done = true;
            self.count.arrive();
        }
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.arrive();
    }
}

/// Keeps the open-connection gauge right: counts a connection as closed
/// when it is dropped.
#[derive(Debug)]
struct Open(Arc<Stats>);

impl Open {
    fn new(stats: &Arc<Stats>) -> Self {
        stats.opened();
        Self(stats.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.closed();
    }
}

/// `POST /api/v1/sessions` answered this.
#[derive(Debug, Clone, Deserialize)]
struct Created {
    session_id: String,
    player_token: String,
    spectator_token: String,
}

/// `POST /api/v1/sessions/{id}/invites` answered this.
#[derive(Debug, Deserialize)]
struct Invited {
    invite_code: String,
}

/// `POST /api/v1/sessions/{id}/join` answered this.
#[derive(Debug, Deserialize)]
struct Joined {
    player_token: String,
}

/// What a request to the server shows to be allowed.
#[derive(Debug, Clone, Copy)]
enum Credential<'a> {
    /// `--api-key`, when given.
    Key,
    /// A session's token.
    Bearer(&'a str),
}

/// A connection that got its `welcome`.
struct Connected {
    conn: Conn,
    checker: StreamChecker,
    /// `welcome.state` (players only; spectators do not parse it).
    state: Value,
    /// `welcome.character_id`: the player's own character.
    character: Option<String>,
    _open: Open,
}

/// Which role a connection plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Player,
    Spectator,
    /// A spectator that stops reading after `welcome`.
    SlowSpectator,
}

/// Who plays a connection's turns, and how they are counted.
#[derive(Clone, Copy)]
struct Speaker<'a> {
    /// The session's number.
    session: usize,
    /// The player's number in it: 0 is the creator.
    player: usize,
    /// Rounds mode: where the players' actions and their round's turns are
    /// timed.
    rounds: Option<&'a RoundClock>,
}

impl Speaker<'_> {
    /// Whether this player counts the turns it sees end: its own in free
    /// mode; in rounds mode every player sees each round's one turn, and
    /// the creator counts it.
    fn counts_turns(&self) -> bool {
        self.rounds.is_none() || self.player == 0
    }

    /// The request id of `attempt` at `turn`; the creator's are those of a
    /// session of one player.
    fn request_id(&self, turn: usize, attempt: usize) -> String {
        match self.player {
            0 => format!("lt-{}-{turn}-{attempt}", self.session),
            p => format!("lt-{}-p{p}-{turn}-{attempt}", self.session),
        }
    }
}

/// When a session's players sent their actions and when each one's round
/// turn reached it: a round resolves once its last action is in, so its
/// resolution time is that of the player who sent last.
#[derive(Debug, Default)]
pub struct RoundClock {
    /// Round -> (the latest action sent, its round's `turn_started` read by
    /// the player who sent it).
    last: Mutex<BTreeMap<u64, (Instant, Instant)>>,
}

impl RoundClock {
    /// A player sent its action for `round` at `sent` and read the round's
    /// `turn_started` at `started`.
    pub fn record(&self, round: u64, sent: Instant, started: Instant) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = last.entry(round).or_insert((sent, started));
        if sent > entry.0 {
            *entry = (sent, started);
        }
    }

    /// For every round, from its last action sent to its turn starting.
    pub fn resolutions(&self) -> Vec<Duration> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.values()
            .map(|&(sent, started)| started.saturating_duration_since(sent))
            .collect()
    }
}

/// What the player knows of the map, to fill `{neighbour}`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MapView {
    position: Option<String>,
    /// Area id -> areas reachable from it.
    exits: HashMap<String, Vec<String>>,
}

impl MapView {
    /// Reads a session snapshot (docs/protocol.md §5) for the session's
    /// active character.
    pub fn from_state(state: &Value) -> Self {
        Self::for_character(state, None)
    }

    /// Reads a session snapshot for `character` (a player's own; `None`:
    /// the session's active character).
    pub fn for_character(state: &Value, character: Option<&str>) -> Self {
        let mut view = Self::default();
        view.add_areas(&state["areas"]);
        let actor = character.or(state["active_actor_id"].as_str());
        view.position = state["characters"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["character_id"].as_str() == actor))
            .and_then(|c| c["area_id"].as_str())
            .map(str::to_owned);
        view
    }

    /// Takes in a `turn_completed.state_patch`.
    pub fn apply_patch(&mut self, patch: &Value) {
        self.add_areas(&patch["areas"]);
        if let Some(area) = patch["position"]["area_id"].as_str() {
            self.position = Some(area.to_owned());
        }
    }

    fn add_areas(&mut self, areas: &Value) {
        for area in areas.as_array().into_iter().flatten() {
            let Some(id) = area["area_id"].as_str() else {
                continue;
            };
            let exits = area["reachable_area_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            self.exits.insert(id.to_owned(), exits);
        }
    }

    /// An area reachable from where the player stands; `pick` chooses among
    /// several.
    pub fn neighbour(&self, pick: usize) -> Option<&str> {
        let exits = self.exits.get(self.position.as_deref()?)?;
        exits.get(pick % exits.len().max(1)).map(String::as_str)
    }

    /// Where the player stands.
    pub fn here(&self) -> Option<&str> {
        self.position.as_deref()
    }
}

/// Fills a chat template for turn `turn` (0-based) of session `session`.
pub fn fill(template: &str, map: &MapView, session: usize, turn: usize) -> String {
    let mut text = template
        .replace("{turn}", &(turn + 1).to_string())
        .replace("{session}", &session.to_string());
    for key in ["{neighbour}", "{neighbor}"] {
        if text.contains(key) {
            let area = map.neighbour(turn).or(map.here()).unwrap_or("somewhere");
            text = text.replace(key, area);
        }
    }
    text
}

/// How a turn ended for the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnEnd {
    Completed,
    Failed,
    Refused,
    /// The connection is gone or stuck: play no more.
    Broken,
}

/// Plays session number `index` from start to end; everything it sees goes
/// into the run's stats.
pub async fn run_session(run: Arc<Run>, index: usize) {
    let mut arrival = Arrival::new(&run.played);
    let plan = &run.plan;
    if plan.sessions > 1 && !plan.ramp_up.is_zero() {
        let offset = plan.ramp_up.mul_f64(index as f64 / plan.sessions as f64);
        tokio::time::sleep_until((plan.started + offset).into()).await;
    }
    if plan.past_deadline() {
        return;
    }
    let Some(created) = create_session(&run).await else {
        return;
    };
    Stats::bump(&run.stats.sessions);
    let Some(guests) = seat_party(&run, &created).await else {
        return;
    };
    let Some(mut player) = connect(
        &run,
        &created.session_id,
        &created.player_token,
        Role::Player,
    )
    .await
    else {
        return;
    };

    let (stop, stop_rx) = watch::channel(None::<u64>);
    let (go, go_rx) = watch::channel(false);
    let done = Arc::new(Countdown::new(guests.len() + plan.spectators));
    let end = || End {
        stop: stop_rx.clone(),
        done: done.clone(),
    };
    let clock = Arc::new(RoundClock::default());
    let mut others = Vec::with_capacity(guests.len());
    let mut played = Vec::with_capacity(guests.len());
    let mut readies = Vec::with_capacity(guests.len() + plan.spectators);
    for (nth, token) in guests.into_iter().enumerate() {
        let (ready, ready_rx) = oneshot::channel();
        let (done_playing, played_rx) = oneshot::channel();
        let seat = Guest {
            player: nth + 1,
            token,
            ready,
            go: go_rx.clone(),
            played: done_playing,
            end: end(),
        };
        others.push(tokio::spawn(guest(
            run.clone(),
            created.session_id.clone(),
            index,
            seat,
            clock.clone(),
        )));
        readies.push(ready_rx);
        played.push(played_rx);
    }
    let mut spectators = Vec::with_capacity(plan.spectators);
    for nth in 0..plan.spectators {
        let (ready, ready_rx) = oneshot::channel();
        let task = if plan.is_slow(index, nth) {
            tokio::spawn(stall(run.clone(), created.clone(), ready, end()))
        } else {
            tokio::spawn(spectate(run.clone(), created.clone(), ready, end()))
        };
        spectators.push(task);
        readies.push(ready_rx);
    }
    for ready in readies {
        let _ = ready.await;
    }
    let _ = go.send(true);

    let mut map = MapView::from_state(&player.state);
    player.state = Value::Null;
    let speaker = Speaker {
        session: index,
        player: 0,
        rounds: (plan.turn_mode == TurnMode::Rounds).then_some(&*clock),
    };
    let mut broken = !play_turns(&run, &mut player, &mut map, speaker).await;
    // The other players may still be playing: read on until they are done,
    // and read as far as the furthest of them got.
    let mut furthest = None;
    if !played.is_empty() {
        let others_done = async {
            for rx in played {
                furthest = furthest.max(rx.await.ok().flatten());
            }
        };
        if !broken {
            broken = !read_until(&run, &mut player, others_done).await;
        }
    }
    arrival.arrive();
    if !broken && !plan.hold.is_zero() {
        hold(&run, &mut player).await;
    }
    if !broken && let Some(upto) = furthest {
        read_to(&run, &mut player, upto).await;
    }

    // Everyone reads up to the last frame the players needed, then stops.
    let upto = player.checker.last_seq().unwrap_or(0);
    let _ = stop.send(Some(upto));
    let mut watched = Vec::with_capacity(others.len() + spectators.len());
    for task in others {
        match task.await {
            Ok(Some(checker)) => watched.push(checker),
            Ok(None) => {}
            Err(e) => run.stats.error(codes::DRIVER_FAILED, || e.to_string()),
        }
    }
    for task in spectators {
        match task.await {
            Ok(Some(mut checker)) => {
                run.stats
                    .compared(checker.compare_with_player(&player.checker, upto));
                watched.push(checker);
            }
            Ok(None) => {}
            Err(e) => run.stats.error(codes::DRIVER_FAILED, || e.to_string()),
        }
    }
    for checker in &watched {
        run.stats.absorb(checker);
    }
    if !watched.is_empty() {
        let mut all: Vec<&StreamChecker> = watched.iter().collect();
        all.push(&player.checker);
        run.stats
            .record_fan_out(&StreamChecker::fan_out(&all, upto));
    }
    run.stats.absorb(&player.checker);
    run.stats.record_rounds(&clock.resolutions());
    player.conn.close().await;
}

/// A player other than the creator, as its session's task hands it out.
struct Guest {
    /// Its number in the session (from 1).
    player: usize,
    /// The token its join gave.
    token: String,
    /// Told once it is connected (or could not be).
    ready: oneshot::Sender<()>,
    /// Set once every connection of the session is in: play may start.
    go: watch::Receiver<bool>,
    /// Told the last seq it read when it is done playing (`None`: it
    /// never connected or its connection broke).
    played: oneshot::Sender<Option<u64>>,
    end: End,
}

/// One player who joined: connects, waits for the others, plays its turns,
/// then reads like a spectator until told how far, and hands back its
/// checker (`None` if it never got in).
async fn guest(
    run: Arc<Run>,
    session_id: String,
    index: usize,
    mut seat: Guest,
    clock: Arc<RoundClock>,
) -> Option<StreamChecker> {
    let done = seat.end.done.clone();
    let arrival = Arrival::new(&done);
    let connected = connect(&run, &session_id, &seat.token, Role::Player).await;
    let _ = seat.ready.send(());
    let Some(mut player) = connected else {
        let _ = seat.played.send(None);
        return None;
    };
    let _ = seat.go.wait_for(|go| *go).await;
    let mut map = MapView::for_character(&player.state, player.character.as_deref());
    player.state = Value::Null;
    let speaker = Speaker {
        session: index,
        player: seat.player,
        rounds: (run.plan.turn_mode == TurnMode::Rounds).then_some(&*clock),
    };
    let usable = play_turns(&run, &mut player, &mut map, speaker).await;
    let _ = seat
        .played
        .send(usable.then(|| player.checker.last_seq()).flatten());
    let Connected {
        conn,
        mut checker,
        _open,
        ..
    } = player;
    if usable {
        read_then_close(&run, conn, &mut checker, &mut seat.end, arrival).await;
    }
    Some(checker)
}

/// Plays a player's `--turns` turns (rounds, in rounds mode), pausing
/// `--think-time` between them; `false` once its connection is lost.
async fn play_turns(
    run: &Run,
    player: &mut Connected,
    map: &mut MapView,
    speaker: Speaker<'_>,
) -> bool {
    let plan = &run.plan;
    let stats = &run.stats;
    for turn in 0..plan.turns {
        if plan.past_deadline() {
            break;
        }
        if turn > 0
            && !plan.think.is_zero()
            && !read_until(run, player, tokio::time::sleep(plan.think)).await
        {
            return false;
        }
        let template =
            &plan.messages[(speaker.session + turn + speaker.player) % plan.messages.len()];
        let end = play_turn(run, player, map, template, speaker, turn).await;
        let counter = match end {
            TurnEnd::Broken => return false,
            TurnEnd::Refused => &stats.turns_refused,
            _ if !speaker.counts_turns() => continue,
            TurnEnd::Completed => &stats.turns_completed,
            TurnEnd::Failed => &stats.turns_failed,
        };
        Stats::bump(counter);
        if end == TurnEnd::Completed && speaker.rounds.is_some() {
            Stats::bump(&stats.rounds_completed);
        }
    }
    true
}

/// Sends `body` to `path` of the server and answers the body of an answer
/// with status `expect`; anything else is counted and is `None`.
async fn post(
    run: &Run,
    path: &str,
    body: &Value,
    credential: Credential<'_>,
    expect: u16,
) -> Option<bytes::Bytes> {
    let stats = &run.stats;
    let _permit = run.gate.acquire().await.ok()?;
    let url = format!("{}{path}", run.target.http_base);
    let mut request = run.http.post(&url).json(body);
    match credential {
        Credential::Key => {
            if let Some(key) = &run.plan.api_key {
                request = request.header("X-Internal-API-Key", key);
            }
        }
        Credential::Bearer(token) => request = request.bearer_auth(token),
    }
    let failed = |e: reqwest::Error| {
        stats.error(codes::REQUEST_FAILED, || {
            format!("POST {path}: {}", with_causes(&e))
        });
    };
    let response = request.send().await.map_err(failed).ok()?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(failed).ok()?;
    if status != expect {
        let code = error_code_of(&bytes).unwrap_or_else(|| format!("HTTP_{status}"));
        stats.error(&code, || {
            format!(
                "POST {path} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        return None;
    }
    Some(bytes)
}

/// [`post`], reading the answer as `T`.
async fn post_for<T: serde::de::DeserializeOwned>(
    run: &Run,
    path: &str,
    body: &Value,
    credential: Credential<'_>,
    expect: u16,
) -> Option<T> {
    let bytes = post(run, path, body, credential, expect).await?;
    match serde_json::from_slice(&bytes) {
        Ok(answer) => Some(answer),
        Err(e) => {
            run.stats.error(codes::REQUEST_FAILED, || {
                format!("POST {path}: unreadable answer: {e}")
            });
            None
        }
    }
}

/// Creates the session; `None` (counted) when the server refuses.
async fn create_session(run: &Run) -> Option<Created> {
    let body = json!({"campaign_id": run.plan.campaign});
    post_for(run, "/api/v1/sessions", &body, Credential::Key, 201).await
}

/// Seats the session's party: one invite of the creator's for the other
/// players, each of them joining by it (their tokens, in order), and in
/// rounds mode the creator switching the session to rounds. `None`
/// (counted) when the server refuses any of it.
async fn seat_party(run: &Run, created: &Created) -> Option<Vec<String>> {
    let plan = &run.plan;
    let base = format!("/api/v1/sessions/{}", created.session_id);
    let host = Credential::Bearer(&created.player_token);
    let mut tokens = Vec::with_capacity(plan.players.saturating_sub(1));
    if plan.players > 1 {
        let body = json!({"max_uses": plan.players - 1});
        let invite: Invited = post_for(run, &format!("{base}/invites"), &body, host, 201).await?;
        for nth in 2..=plan.players {
            let body = json!({"invite_code": invite.invite_code, "name": format!("Player {nth}")});
            let joined: Joined = post_for(
                run,
                &format!("{base}/join"),
                &body,
                // The invite code is the credential; a key, when given,
                // only spares the joins the per-address limit.
                Credential::Key,
                201,
            )
            .await?;
            tokens.push(joined.player_token);
        }
    }
    if plan.turn_mode == TurnMode::Rounds {
        let body = json!({"turn_mode": "rounds", "round_timeout_s": ROUND_TIMEOUT_S});
        post(run, &format!("{base}/mode"), &body, host, 200).await?;
    }
    Some(tokens)
}

/// Counts what a read that gave no frame means for a connection still in use.
fn lost(stats: &Stats, incoming: &Incoming, wait: Duration) {
    match incoming {
        Incoming::Closed(code) => stats.disconnect(codes::UNEXPECTED_CLOSE, || {
            format!("the server closed a connection in use (close code {code:?})")
        }),
        Incoming::Lost(why) => stats.disconnect(codes::CONNECTION_LOST, || why.clone()),
        Incoming::Idle => stats.error(codes::TIMEOUT, || {
            format!("no expected frame within {wait:?}")
        }),
        Incoming::Text(_) | Incoming::Binary => {}
    }
}

/// Connects one connection to the session with `token` and reads up to
/// its `welcome`.
async fn connect(run: &Run, session_id: &str, token: &str, role: Role) -> Option<Connected> {
    let stats = &run.stats;
    let receive_buffer = (role == Role::SlowSpectator).then_some(SLOW_RECEIVE_BUFFER);
    let path = format!("/ws/sessions/{session_id}?token={token}");
    let wait = run.plan.frame_timeout;
    let (mut conn, open) = {
        let _permit = run.gate.acquire().await.ok()?;
        let began = Instant::now();
        match Conn::open(&run.target, run.sources.next(), &path, wait, receive_buffer).await {
            Ok(conn) => {
                stats.record_connect(began.elapsed());
                (conn, Open::new(stats))
            }
            Err(e) => {
                stats.error(&e.code(), || e.to_string());
                return None;
            }
        }
    };
    let mut checker = run.plan.checker();
    loop {
        match conn.next(wait).await {
            Incoming::Text(text) => {
                Stats::bump(&stats.frames);
                if let Observed::Welcome(_) = checker.observe_at(&text, text.at) {
                    let mut welcome = match role {
                        Role::Player => serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
                        Role::Spectator | Role::SlowSpectator => Value::Null,
                    };
                    Stats::bump(match role {
                        Role::Player => &stats.players,
                        Role::Spectator | Role::SlowSpectator => &stats.spectators,
                    });
                    return Some(Connected {
                        conn,
                        checker,
                        state: welcome["state"].take(),
                        character: welcome["character_id"].as_str().map(str::to_owned),
                        _open: open,
                    });
                }
            }
            Incoming::Binary => checker.observe_binary(),
            other => {
                lost(stats, &other, wait);
                stats.absorb(&checker);
                return None;
            }
        }
    }
}

/// Whether a `turn_started` is the one a player's chat started: in free
/// mode the one naming its request id; in rounds mode the one resolving
/// the round its ack named (or, without one, the round listing its action).
fn starts_my_turn(head: &FrameHead, request_id: &str, round: Option<u64>, rounds: bool) -> bool {
    if !rounds {
        return head.request_id.as_deref() == Some(request_id);
    }
    head.round.is_some()
        && (head.round == round
            || head
                .actions
                .iter()
                .flatten()
                .any(|a| a.request_id.as_deref() == Some(request_id)))
}

/// Sends one turn's chat (in rounds mode: the player's action for the
/// round) and reads until the turn it is in has ended and the chat was
/// acknowledged (the checker counts an ack after the turn's first story
/// frame as a violation).
async fn play_turn(
    run: &Run,
    player: &mut Connected,
    map: &mut MapView,
    template: &str,
    speaker: Speaker<'_>,
    turn: usize,
) -> TurnEnd {
    let stats = &run.stats;
    let wait = run.plan.frame_timeout;
    let text = fill(template, map, speaker.session, turn);
    let counts = speaker.counts_turns();
    'attempts: for attempt in 0..MAX_CHAT_ATTEMPTS {
        if attempt > 0 && run.plan.past_deadline() {
            break;
        }
        let request_id = speaker.request_id(turn, attempt);
        let chat = json!({"type": "chat", "text": text, "request_id": request_id});
        player.checker.chat_sent(&request_id);
        let sent = Instant::now();
        if let Err(e) = player.conn.send(chat.to_string()).await {
            stats.disconnect(codes::CONNECTION_LOST, || e);
            return TurnEnd::Broken;
        }
        let mut turn_id: Option<String> = None;
        let mut round: Option<u64> = None;
        let mut acked = false;
        let mut ended: Option<TurnEnd> = None;
        let mut tools: HashMap<String, Instant> = HashMap::new();
        while !acked || ended.is_none() {
            let frame = match player.conn.next(wait).await {
                Incoming::Text(frame) => frame,
                Incoming::Binary => {
                    player.checker.observe_binary();
                    continue;
                }
                other => {
                    lost(stats, &other, wait);
                    return TurnEnd::Broken;
                }
            };
            Stats::bump(&stats.frames);
            let head = match player.checker.observe_at(&frame, frame.at) {
                Observed::Welcome(h) | Observed::Story(h) | Observed::Control(h) => h,
                Observed::Invalid => continue,
            };
            let ours = head.request_id.as_deref() == Some(request_id.as_str());
            let this_turn = turn_id.is_some() && head.turn_id == turn_id;
            match head.kind.as_str() {
                "ack" if ours => {
                    acked = true;
                    round = head.round;
                    // A round's action is acked under an id of its own, not
                    // its round's turn: that one comes with turn_started.
                    if turn_id.is_none() && speaker.rounds.is_none() {
                        turn_id = head.turn_id;
                    }
                }
                "error" if ours => {
                    let code = head.error_code.as_deref().unwrap_or("UNKNOWN");
                    stats.error(code, || head.message.clone().unwrap_or_default());
                    let pause = match code {
                        "RATE_LIMITED" => head
                            .retry_after_ms
                            .map_or(QUEUE_FULL_WAIT, Duration::from_millis),
                        "QUEUE_FULL" => QUEUE_FULL_WAIT,
                        _ => return TurnEnd::Refused,
                    };
                    tokio::time::sleep(pause.min(MAX_RETRY_WAIT)).await;
                    continue 'attempts;
                }
                "error" => {
                    let code = head.error_code.as_deref().unwrap_or("UNKNOWN");
                    stats.error(code, || head.message.clone().unwrap_or_default());
                }
                "turn_started"
                    if turn_id.is_none()
                        && starts_my_turn(&head, &request_id, round, speaker.rounds.is_some()) =>
                {
                    turn_id = head.turn_id;
                    if let (Some(clock), Some(round)) = (speaker.rounds, head.round) {
                        clock.record(round, sent, Instant::now());
                    }
                }
                "tool_call" if this_turn && counts => {
                    Stats::bump(&stats.tool_calls);
                    if let Some(call) = head.call_id {
                        tools.insert(call, Instant::now());
                    }
                }
                "tool_result" if this_turn && counts => {
                    if let Some(began) = head.call_id.and_then(|c| tools.remove(&c)) {
                        stats.record_tool(began.elapsed());
                    }
                }
                "turn_completed" if this_turn => {
                    stats.record_turn(sent.elapsed());
                    if let Ok(v) = serde_json::from_str::<Value>(&frame) {
                        map.apply_patch(&v["state_patch"]);
                    }
                    ended = Some(TurnEnd::Completed);
                }
                "turn_failed" if this_turn => {
                    if counts {
                        let code = head.error_code.as_deref().unwrap_or("UNKNOWN");
                        stats.error(code, || head.message.clone().unwrap_or_default());
                    }
                    ended = Some(TurnEnd::Failed);
                }
                _ => {}
            }
        }
        return ended.unwrap_or(TurnEnd::Refused);
    }
    TurnEnd::Refused
}

/// Keeps the player connected (reading, so pings are answered) until every
/// session has played, then `--hold` more.
async fn hold(run: &Run, player: &mut Connected) {
    let until = async {
        run.played.all_arrived().await;
        tokio::time::sleep(run.plan.hold).await;
    };
    read_until(run, player, until).await;
}

/// Reads and checks the player's frames until `until` is over, as a client
/// that pauses still does: what arrives meanwhile (a `presence` frame) is
/// timed when it arrives, not when the player next reads. `false` if the
/// connection was lost.
async fn read_until(run: &Run, player: &mut Connected, until: impl Future<Output = ()>) -> bool {
    tokio::pin!(until);
    loop {
        tokio::select! {
            () = &mut until => return true,
            incoming = player.conn.next(run.plan.frame_timeout) => match incoming {
                Incoming::Text(frame) => {
                    Stats::bump(&run.stats.frames);
                    player.checker.observe_at(&frame, frame.at);
                }
                Incoming::Binary => player.checker.observe_binary(),
                Incoming::Idle => {}
                other => {
                    lost(&run.stats, &other, run.plan.frame_timeout);
                    return false;
                }
            },
        }
    }
}

/// Reads and checks the player's frames until it has read seq `upto`, or
/// its connection was lost or the frames did not come in time (counted).
async fn read_to(run: &Run, player: &mut Connected, upto: u64) {
    let wait = run.plan.frame_timeout;
    while player.checker.last_seq().is_none_or(|last| last < upto) {
        match player.conn.next(wait).await {
            Incoming::Text(frame) => {
                Stats::bump(&run.stats.frames);
                player.checker.observe_at(&frame, frame.at);
            }
            Incoming::Binary => player.checker.observe_binary(),
            other => {
                lost(&run.stats, &other, wait);
                return;
            }
        }
    }
}

/// How a session's readers (its spectators, and its other players once
/// they have played) learn when to stop reading, and when to close.
struct End {
    /// The last seq to read, once the creator is done.
    stop: watch::Receiver<Option<u64>>,
    /// The session's readers done reading (or given up).
    done: Arc<Countdown>,
}

impl End {
    /// Waits until every reader of the session is done reading. Closing
    /// earlier would make the server's work for those leaving compete with
    /// its sends to those still reading, and the fan-out would count it.
    async fn all_done(&self) {
        self.done.all_arrived().await;
    }
}

/// Reads and checks a connection's frames until the session's creator
/// says how far to read and it got that far; hands the connection back if
/// it is still usable.
///
/// Frames that can be had without waiting (a turn's frames come together)
/// are read one after another with no timer, no look at the creator's
/// word and no shared counter touched per frame: the driver shares the
/// server's cores, and what it spends per frame a crowd of ten thousand
/// pays ten thousand times over.
async fn read_to_stop(
    run: &Run,
    mut conn: Conn,
    checker: &mut StreamChecker,
    end: &mut End,
) -> Option<Conn> {
    let wait = run.plan.frame_timeout;
    let stats = &run.stats;
    let mut upto = *end.stop.borrow();
    let mut frames = Counted::new(&stats.frames);
    // One wait for the creator's word, kept across reads: a new one per
    // read would enter and leave a list that all the session's readers
    // share, under its lock, once per turn each.
    let mut word = end.stop.clone();
    let said = word.wait_for(Option::is_some);
    tokio::pin!(said);
    loop {
        if upto.is_some_and(|upto| checker.last_seq().is_some_and(|last| last >= upto)) {
            return Some(conn);
        }
        let incoming = match conn.next_ready() {
            Some(incoming) => incoming,
            None => {
                frames.flush();
                // Until the creator says how far to read, a quiet
                // connection is normal: no timer to set per wait.
                let next = async {
                    match upto {
                        Some(_) => conn.next(wait).await,
                        None => conn.next_untimed().await,
                    }
                };
                tokio::select! {
                    said = &mut said, if upto.is_none() => match said {
                        Ok(last) => {
                            upto = *last;
                            continue;
                        }
                        Err(_) => return Some(conn),
                    },
                    incoming = next => incoming,
                }
            }
        };
        match incoming {
            Incoming::Text(frame) => {
                frames.add();
                checker.observe_along(&frame, frame.at);
            }
            Incoming::Binary => checker.observe_binary(),
            // Before the creator is done, a quiet connection is normal.
            Incoming::Idle if upto.is_none() => {}
            other => {
                lost(stats, &other, wait);
                let usable = !matches!(other, Incoming::Closed(_) | Incoming::Lost(_));
                return usable.then_some(conn);
            }
        }
    }
}

/// Reads like [`read_to_stop`], arrives, and closes the connection (if it
/// is still usable) once every reader of the session has arrived.
async fn read_then_close(
    run: &Run,
    conn: Conn,
    checker: &mut StreamChecker,
    end: &mut End,
    mut arrival: Arrival<'_>,
) {
    let conn = read_to_stop(run, conn, checker, end).await;
    arrival.arrive();
    if let Some(conn) = conn {
        end.all_done().await;
        conn.close().await;
    }
}

/// One spectator: connects, says it is ready, reads until its player says
/// how far to read, and hands back its checker (`None` if it never got in).
async fn spectate(
    run: Arc<Run>,
    created: Created,
    ready: oneshot::Sender<()>,
    mut end: End,
) -> Option<StreamChecker> {
    let done = end.done.clone();
    let arrival = Arrival::new(&done);
    let token = &created.spectator_token;
    let connected = connect(&run, &created.session_id, token, Role::Spectator).await;
    let _ = ready.send(());
    let Connected {
        conn,
        mut checker,
        _open,
        ..
    } = connected?;
    read_then_close(&run, conn, &mut checker, &mut end, arrival).await;
    Some(checker)
}

/// One slow spectator: connects on a small receive buffer, says it is
/// ready, reads its `welcome` and then nothing until its player is done;
/// then it drops the connection without a close handshake (it cannot read
/// the answer). Never compared, so it hands back no checker.
async fn stall(
    run: Arc<Run>,
    created: Created,
    ready: oneshot::Sender<()>,
    mut end: End,
) -> Option<StreamChecker> {
    let done = end.done.clone();
    let mut arrival = Arrival::new(&done);
    let token = &created.spectator_token;
    let connected = connect(&run, &created.session_id, token, Role::SlowSpectator).await;
    let _ = ready.send(());
    let connected = connected?;
    Stats::bump(&run.stats.slow_spectators);
    let _ = end.stop.wait_for(Option::is_some).await;
    arrival.arrive();
    end.all_done().await;
    drop(connected);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_state() -> Value {
        json!({
            "active_actor_id": "pc_001",
            "characters": [
                {"character_id": "npc_1", "area_id": "area_009"},
                {"character_id": "pc_001", "area_id": "area_001"}
            ],
            "areas": [
                {"area_id": "area_001", "reachable_area_ids": ["area_002", "area_003"]},
                {"area_id": "area_002", "reachable_area_ids": ["area_001"]}
            ]
        })
    }

    #[tokio::test]
    async fn spectators_close_together_once_each_has_read_or_given_up() {
        let (_stop, stop) = watch::channel(None);
        let done = Arc::new(Countdown::new(3));
        let end = End {
            stop,
            done: done.clone(),
        };
        let all_done = end.all_done();
        tokio::pin!(all_done);
        Arrival::new(&done).arrive();
        assert!(futures_util::poll!(&mut all_done).is_pending());
        // One that gives up without reading counts when it is dropped.
        drop(Arrival::new(&done));
        assert!(futures_util::poll!(&mut all_done).is_pending());
        // Arriving again, or dropping after arriving, counts once.
        let mut last = Arrival::new(&done);
        last.arrive();
        last.arrive();
        drop(last);
        all_done.await;
        // Whoever comes later does not wait, and an arrival past the total
        // changes nothing.
        Arrival::new(&done).arrive();
        end.all_done().await;
        Countdown::new(0).all_arrived().await;
    }

    #[test]
    fn slow_spectators_are_spread_evenly() {
        let plan = |spectators, slow_spectators| Plan {
            sessions: 10,
            players: 1,
            turn_mode: TurnMode::Free,
            spectators,
            slow_spectators,
            turns: 1,
            think: Duration::ZERO,
            ramp_up: Duration::ZERO,
            campaign: "demo".into(),
            api_key: None,
            messages: vec!["status".into()],
            hold: Duration::ZERO,
            frame_timeout: Duration::from_secs(1),
            started: Instant::now(),
            deadline: None,
        };
        let slow = |p: &Plan| {
            (0..p.sessions)
                .flat_map(|s| (0..p.spectators).map(move |n| (s, n)))
                .filter(|&(s, n)| p.is_slow(s, n))
                .count()
        };
        assert_eq!(slow(&plan(10, 0.1)), 10);
        assert_eq!(slow(&plan(10, 0.0)), 0);
        assert_eq!(slow(&plan(10, 1.0)), 100);
        assert_eq!(slow(&plan(3, 0.5)), 15);
        // One in ten sessions' spectators, not all in the first sessions.
        let p = plan(1, 0.1);
        let sessions: Vec<usize> = (0..10).filter(|&s| p.is_slow(s, 0)).collect();
        assert_eq!(sessions, [9]);
    }

    #[test]
    fn the_map_view_follows_the_player() {
        let mut map = MapView::from_state(&demo_state());
        assert_eq!(map.here(), Some("area_001"));
        assert_eq!(map.neighbour(0), Some("area_002"));
        assert_eq!(map.neighbour(1), Some("area_003"));
        assert_eq!(map.neighbour(2), Some("area_002"));
        map.apply_patch(&json!({
            "areas": [{"area_id": "area_003", "reachable_area_ids": ["area_001", "area_004"]}],
            "characters": [],
            "position": {"actor_id": "pc_001", "area_id": "area_003"}
        }));
        assert_eq!(map.here(), Some("area_003"));
        assert_eq!(map.neighbour(1), Some("area_004"));
        // A patch without a position (a failed move) keeps the old one.
        map.apply_patch(&json!({"areas": [], "position": null}));
        assert_eq!(map.here(), Some("area_003"));
        // Nothing known: no neighbour, and no panic.
        assert_eq!(MapView::from_state(&json!("junk")).neighbour(0), None);
    }

    #[test]
    fn templates_are_filled_from_the_session() {
        let map = MapView::from_state(&demo_state());
        assert_eq!(fill("go to {neighbour}", &map, 0, 1), "go to area_003");
        assert_eq!(fill("go to {neighbor}", &map, 0, 0), "go to area_002");
        assert_eq!(
            fill("turn {turn} of session {session}", &map, 7, 2),
            "turn 3 of session 7"
        );
        let nowhere = MapView::default();
        assert_eq!(fill("go to {neighbour}", &nowhere, 0, 0), "go to somewhere");
        assert_eq!(fill("status", &nowhere, 0, 0), "status");
    }
}
