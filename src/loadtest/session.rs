//! One session of a load test: create it over HTTP, connect its player and
//! spectators, play its turns one at a time, and check every frame each
//! connection receives.
//!
//! The session's task owns the player connection; each spectator reads in a
//! task of its own and hands its checker back at the end, when it is
//! compared with the player's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot, watch};

use super::check::{Observed, StreamChecker};
use super::client::{Conn, Incoming, SourcePicker, Target, error_code_of};
use super::report::{Stats, codes};
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

/// What every session of a run does, validated from the flags.
#[derive(Debug, Clone)]
pub struct Plan {
    pub sessions: usize,
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
    /// How many sessions are done playing (or gave up); `--hold` waits for
    /// all of them.
    pub played: watch::Sender<usize>,
}

/// Counts one arrival exactly once (a session done playing, a spectator
/// done reading), also when it gives up early, so nothing waits for one
/// that will not come (`--hold` for the sessions, a session's spectators
/// for each other before they close).
struct Arrival<'a> {
    played: &'a watch::Sender<usize>,
    done: bool,
}

impl<'a> Arrival<'a> {
    fn new(played: &'a watch::Sender<usize>) -> Self {
        Self {
            played,
            done: false,
        }
    }

    fn arrive(&mut self) {
        if !self.done {
            self.done = true;
            self.played.send_modify(|n| *n += 1);
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

/// A connection that got its `welcome`.
struct Connected {
    conn: Conn,
    checker: StreamChecker,
    /// `welcome.state` (players only; spectators do not parse it).
    state: Value,
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

/// What the player knows of the map, to fill `{neighbour}`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MapView {
    position: Option<String>,
    /// Area id -> areas reachable from it.
    exits: HashMap<String, Vec<String>>,
}

impl MapView {
    /// Reads a session snapshot (docs/protocol.md §5).
    pub fn from_state(state: &Value) -> Self {
        let mut view = Self::default();
        view.add_areas(&state["areas"]);
        let actor = state["active_actor_id"].as_str();
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
    let Some(mut player) = connect(&run, &created, Role::Player).await else {
        return;
    };

    let (stop, stop_rx) = watch::channel(None::<u64>);
    let done = Arc::new(watch::channel(0).0);
    let mut spectators = Vec::with_capacity(plan.spectators);
    let mut readies = Vec::with_capacity(plan.spectators);
    for nth in 0..plan.spectators {
        let (ready, ready_rx) = oneshot::channel();
        let end = End {
            stop: stop_rx.clone(),
            done: done.clone(),
            spectators: plan.spectators,
        };
        let task = if plan.is_slow(index, nth) {
            tokio::spawn(stall(run.clone(), created.clone(), ready, end))
        } else {
            tokio::spawn(spectate(run.clone(), created.clone(), ready, end))
        };
        spectators.push(task);
        readies.push(ready_rx);
    }
    for ready in readies {
        let _ = ready.await;
    }

    let mut map = MapView::from_state(&player.state);
    player.state = Value::Null;
    let mut broken = false;
    for turn in 0..plan.turns {
        if plan.past_deadline() {
            break;
        }
        if turn > 0
            && !plan.think.is_zero()
            && !read_until(&run, &mut player, tokio::time::sleep(plan.think)).await
        {
            broken = true;
            break;
        }
        let template = &plan.messages[(index + turn) % plan.messages.len()];
        let counter = match play_turn(&run, &mut player, &mut map, template, index, turn).await {
            TurnEnd::Completed => &run.stats.turns_completed,
            TurnEnd::Failed => &run.stats.turns_failed,
            TurnEnd::Refused => &run.stats.turns_refused,
            TurnEnd::Broken => {
                broken = true;
                break;
            }
        };
        Stats::bump(counter);
    }
    arrival.arrive();
    if !broken && !plan.hold.is_zero() {
        hold(&run, &mut player).await;
    }

    // Spectators read up to the last frame the player needed, then stop.
    let upto = player.checker.last_seq().unwrap_or(0);
    let _ = stop.send(Some(upto));
    let mut watched = Vec::with_capacity(spectators.len());
    for task in spectators {
        match task.await {
            Ok(Some(mut checker)) => {
                run.stats
                    .compared(checker.compare_with_player(&player.checker, upto));
                run.stats.absorb(&checker);
                watched.push(checker);
            }
            Ok(None) => {}
            Err(e) => run.stats.error(codes::DRIVER_FAILED, || e.to_string()),
        }
    }
    if !watched.is_empty() {
        let mut all: Vec<&StreamChecker> = watched.iter().collect();
        all.push(&player.checker);
        run.stats
            .record_fan_out(&StreamChecker::fan_out(&all, upto));
    }
    run.stats.absorb(&player.checker);
    player.conn.close().await;
}

/// Creates the session; `None` (counted) when the server refuses.
async fn create_session(run: &Run) -> Option<Created> {
    let stats = &run.stats;
    let _permit = run.gate.acquire().await.ok()?;
    let url = format!("{}/api/v1/sessions", run.target.http_base);
    let body = json!({"campaign_id": run.plan.campaign});
    let mut request = run.http.post(&url).json(&body);
    if let Some(key) = &run.plan.api_key {
        request = request.header("X-Internal-API-Key", key);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            stats.error(codes::REQUEST_FAILED, || {
                format!("POST {url}: {}", with_causes(&e))
            });
            return None;
        }
    };
    let status = response.status().as_u16();
    let bytes = match response.bytes().await {
        Ok(b) => b,
        Err(e) => {
            stats.error(codes::REQUEST_FAILED, || {
                format!("POST {url}: {}", with_causes(&e))
            });
            return None;
        }
    };
    if status != 201 {
        let code = error_code_of(&bytes).unwrap_or_else(|| format!("HTTP_{status}"));
        stats.error(&code, || {
            format!(
                "POST {url} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        return None;
    }
    match serde_json::from_slice(&bytes) {
        Ok(created) => Some(created),
        Err(e) => {
            stats.error(codes::REQUEST_FAILED, || {
                format!("POST {url}: unreadable answer: {e}")
            });
            None
        }
    }
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

/// Connects one connection of the session and reads up to its `welcome`.
async fn connect(run: &Run, created: &Created, role: Role) -> Option<Connected> {
    let stats = &run.stats;
    let (token, receive_buffer) = match role {
        Role::Player => (&created.player_token, None),
        Role::Spectator => (&created.spectator_token, None),
        Role::SlowSpectator => (&created.spectator_token, Some(SLOW_RECEIVE_BUFFER)),
    };
    let path = format!("/ws/sessions/{}?token={token}", created.session_id);
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
    let mut checker = StreamChecker::new();
    loop {
        match conn.next(wait).await {
            Incoming::Text(text) => {
                Stats::bump(&stats.frames);
                if let Observed::Welcome(_) = checker.observe(&text) {
                    let state = match role {
                        Role::Player => serde_json::from_str::<Value>(&text)
                            .map(|mut v| v["state"].take())
                            .unwrap_or(Value::Null),
                        Role::Spectator | Role::SlowSpectator => Value::Null,
                    };
                    Stats::bump(match role {
                        Role::Player => &stats.players,
                        Role::Spectator | Role::SlowSpectator => &stats.spectators,
                    });
                    return Some(Connected {
                        conn,
                        checker,
                        state,
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

/// Sends one turn's chat and reads until the turn has ended and its chat
/// was acknowledged (the checker counts an ack after the turn's first
/// story frame as a violation).
async fn play_turn(
    run: &Run,
    player: &mut Connected,
    map: &mut MapView,
    template: &str,
    index: usize,
    turn: usize,
) -> TurnEnd {
    let stats = &run.stats;
    let wait = run.plan.frame_timeout;
    let text = fill(template, map, index, turn);
    'attempts: for attempt in 0..MAX_CHAT_ATTEMPTS {
        if attempt > 0 && run.plan.past_deadline() {
            break;
        }
        let request_id = format!("lt-{index}-{turn}-{attempt}");
        let chat = json!({"type": "chat", "text": text, "request_id": request_id});
        player.checker.chat_sent(&request_id);
        let sent = Instant::now();
        if let Err(e) = player.conn.send(chat.to_string()).await {
            stats.disconnect(codes::CONNECTION_LOST, || e);
            return TurnEnd::Broken;
        }
        let mut turn_id: Option<String> = None;
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
            let head = match player.checker.observe(&frame) {
                Observed::Welcome(h) | Observed::Story(h) | Observed::Control(h) => h,
                Observed::Invalid => continue,
            };
            let ours = head.request_id.as_deref() == Some(request_id.as_str());
            let this_turn = turn_id.is_some() && head.turn_id == turn_id;
            match head.kind.as_str() {
                "ack" if ours => {
                    acked = true;
                    if turn_id.is_none() {
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
                "turn_started" if ours => turn_id = head.turn_id,
                "tool_call" if this_turn => {
                    Stats::bump(&stats.tool_calls);
                    if let Some(call) = head.call_id {
                        tools.insert(call, Instant::now());
                    }
                }
                "tool_result" if this_turn => {
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
                    let code = head.error_code.as_deref().unwrap_or("UNKNOWN");
                    stats.error(code, || head.message.clone().unwrap_or_default());
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
    let total = run.plan.sessions;
    let mut played = run.played.subscribe();
    let until = async {
        let _ = played.wait_for(|n| *n >= total).await;
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
                    player.checker.observe(&frame);
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

/// How a spectator of a session learns when to stop reading, and when to
/// close.
struct End {
    /// The last seq to read, once the player is done.
    stop: watch::Receiver<Option<u64>>,
    /// How many of the session's spectators are done reading (or gave up).
    done: Arc<watch::Sender<usize>>,
    /// How many spectators the session has.
    spectators: usize,
}

impl End {
    /// Waits until every spectator of the session is done reading. Closing
    /// earlier would make the server's work for those leaving compete with
    /// its sends to those still reading, and the fan-out would count it.
    async fn all_done(&self) {
        let mut done = self.done.subscribe();
        let _ = done.wait_for(|n| *n >= self.spectators).await;
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
    let mut arrival = Arrival::new(&done);
    let connected = connect(&run, &created, Role::Spectator).await;
    let _ = ready.send(());
    let Connected {
        mut conn,
        mut checker,
        _open,
        ..
    } = connected?;
    let wait = run.plan.frame_timeout;
    let stats = &run.stats;
    let mut usable = true;
    loop {
        let upto = *end.stop.borrow_and_update();
        if upto.is_some_and(|upto| checker.last_seq().is_some_and(|last| last >= upto)) {
            break;
        }
        tokio::select! {
            changed = end.stop.changed() => if changed.is_err() {
                break;
            },
            incoming = conn.next(wait) => match incoming {
                Incoming::Text(frame) => {
                    Stats::bump(&stats.frames);
                    checker.observe(&frame);
                }
                Incoming::Binary => checker.observe_binary(),
                // Before the player is done, a quiet spectator is normal.
                Incoming::Idle if upto.is_none() => {}
                other => {
                    lost(stats, &other, wait);
                    usable = !matches!(other, Incoming::Closed(_) | Incoming::Lost(_));
                    break;
                }
            },
        }
    }
    arrival.arrive();
    if usable {
        end.all_done().await;
        conn.close().await;
    }
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
    let connected = connect(&run, &created, Role::SlowSpectator).await;
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
        let done = Arc::new(watch::channel(0).0);
        let end = End {
            stop,
            done: done.clone(),
            spectators: 3,
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
        assert_eq!(*done.borrow(), 3);
    }

    #[test]
    fn slow_spectators_are_spread_evenly() {
        let plan = |spectators, slow_spectators| Plan {
            sessions: 10,
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
