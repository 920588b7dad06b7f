//! The intake of one session: whether a player's chat is taken as a new
//! turn, recognised as one already taken, or refused, and why; whether a
//! direct tool call is taken; and the queue the work taken waits in.
//!
//! It sits inside the session's core (`core.rs`), which owns it and tells
//! [`Intake::take_chat`] and [`Intake::take_call`] what the session is
//! doing, and asks [`Intake::next`] for the work to start once nothing runs.
//! Intake holds the session's chat rate limit, the request ids it has taken
//! (restored from the journal by `replay`), the turn numbers and the queue;
//! it does no IO and knows nothing of actix, so its rules are tested here
//! from tables.
//!
//! Invariants:
//! - the checks run in one order, and the first that fails answers: the
//!   session stopping, the text (empty, too long), the request id's form,
//!   a request id already taken (answered with that turn, even when the
//!   queue is full, storage refuses or the rate is spent), storage refusing,
//!   the queue, and last the rate limit;
//! - only a chat that passes every other check spends from the rate limit;
//!   a direct call spends from a rate of its own (`calls_per_minute`), also
//!   last, so one caller's flood of NPC activations or tool calls cannot
//!   fill the journal, while the player's chat still gets through;
//! - at most [`REMEMBERED_REQUESTS`] request ids are remembered, the oldest
//!   forgotten first;
//! - a new turn is numbered one past the last, from the restored state's;
//! - work starts in arrival order; a direct call reads the state, so it
//!   waits at the front while a tool's effect is in flight.

use std::collections::{HashMap, VecDeque};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota};
use tokio::sync::oneshot;

use super::lifecycle::Lifecycle;
use super::messages::{CallTool, ChatAccepted, ChatRefused, DirectCallDone};
use super::types::{Limits, REMEMBERED_REQUESTS};
use crate::error::ErrorCode;
use crate::ids::{RequestId, SeatId, TraceId, TurnId};
use crate::protocol::check_request_id;
use crate::rate;
use crate::storage::QueuedChat;
use crate::telemetry::TraceParent;

/// Request ids already taken, oldest forgotten first. Boxed, and made when
/// the first request id comes: a session that has taken none (an idle one,
/// or one whose clients send no ids) keeps no room for them.
#[derive(Default)]
pub(super) struct RecentRequests(Option<Box<Requests>>);

#[derive(Default)]
struct Requests {
    map: HashMap<RequestId, TurnId>,
    order: VecDeque<RequestId>,
}

impl RecentRequests {
    pub(super) fn insert(&mut self, request_id: RequestId, turn_id: TurnId) {
        let known = self.0.get_or_insert_default();
        if known.map.insert(request_id.clone(), turn_id).is_none() {
            known.order.push_back(request_id);
            if known.order.len() > REMEMBERED_REQUESTS
                && let Some(old) = known.order.pop_front()
            {
                known.map.remove(&old);
            }
        }
    }

    pub(super) fn get(&self, request_id: &str) -> Option<&TurnId> {
        self.0.as_ref()?.map.get(request_id)
    }
}

/// What the session is doing as a chat arrives.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    /// Where the session stands in its life: one that goes away (a drain,
    /// a stop) takes nothing, and says why ([`Lifecycle::refuse_if_going`]); the
    /// next actor (or node) must take the chat.
    life: Lifecycle,
    /// A turn is running.
    busy: bool,
    /// Work (turns and direct calls) waiting behind it.
    waiting: usize,
}

/// A chat that passed every check.
#[derive(Debug, PartialEq)]
enum Admission<'t> {
    /// Its request id was taken already, by this turn: nothing new is queued.
    Duplicate { turn_id: TurnId },
    /// A new turn with this text (trimmed).
    New { text: &'t str },
}

/// A chat waiting for its turn.
pub(super) struct QueuedTurn {
    pub(super) turn_no: u64,
    pub(super) turn_id: TurnId,
    pub(super) request_id: Option<RequestId>,
    pub(super) text: String,
    /// The seat that spoke: the turn acts for its character.
    pub(super) seat_id: SeatId,
    /// Taken while other work waited or ran, so stored in the inbox before
    /// its ack; its turn may start only once that is durable, and its row
    /// goes once it starts. A chat that starts at once needs no row: its
    /// `turn_started` is what makes it durable.
    pub(super) stored: Stored,
    /// The trace its caller named, if any (see `SubmitChat::trace_id`);
    /// not stored, so a chat restored from the inbox gets a fresh one.
    pub(super) trace_id: Option<TraceId>,
    /// Its caller's `traceparent` (`SubmitChat::traceparent`); not stored
    /// either.
    pub(super) traceparent: Option<TraceParent>,
}

/// Where a queued chat's durability stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stored {
    /// Starts at once; its `turn_started` makes it durable.
    NotNeeded,
    /// Its inbox row is being written: it may not start yet.
    Writing,
    /// Its inbox row is durable.
    InInbox,
}

/// A direct tool call waiting its turn, and who hears once it is durable.
pub(super) struct QueuedCall {
    pub(super) call: CallTool,
    pub(super) reply: oneshot::Sender<DirectCallDone>,
}

/// What waits in a session's queue: turns and direct calls, in arrival order.
pub(super) enum Work {
    Turn(QueuedTurn),
    Call(QueuedCall),
}

/// The chat rate limit, the remembered request ids, the limits work must
/// keep, and the work waiting.
pub(super) struct Intake {
    /// `chat_per_minute`, in bursts of up to `chat_burst`, for each seat on
    /// its own: one player's flood leaves the others their turns. Keyed by
    /// seat, so it holds at most one entry per seat the session ever had.
    /// Each of the three is made at its first use ([`rate::OnFirstUse`]).
    limiter: rate::OnFirstUse<rate::OwnedKeyed<SeatId>>,
    /// The same rate for each seat's table talk, apart from its chats.
    talk: rate::OnFirstUse<rate::OwnedKeyed<SeatId>>,
    /// `calls_per_minute`, in bursts of up to `calls_burst`: direct calls.
    calls: rate::OnFirstUse<DefaultDirectRateLimiter>,
    /// The quotas the limiters are made under: a seat's chats and its
    /// talk each have `chat_quota`.
    chat_quota: Quota,
    calls_quota: Quota,
    requests: RecentRequests,
    max_text_chars: usize,
    max_queued_turns: usize,
    queue: VecDeque<Work>,
    /// The number the next new turn gets.
    next_turn_no: u64,
}

impl Intake {
    /// An intake under `limits` that knows the request ids in `requests` and
    /// numbers the next new turn `next_turn_no`.
    pub(super) fn new(limits: &Limits, requests: RecentRequests, next_turn_no: u64) -> Self {
        let chats = rate::per_minute(limits.chat_per_minute, limits.chat_burst);
        Self {
            limiter: rate::OnFirstUse::default(),
            talk: rate::OnFirstUse::default(),
            calls: rate::OnFirstUse::default(),
            chat_quota: chats,
            calls_quota: rate::per_minute(limits.calls_per_minute, limits.calls_burst),
            requests,
            max_text_chars: limits.max_text_chars,
            max_queued_turns: limits.max_queued_turns,
            queue: VecDeque::new(),
            next_turn_no,
        }
    }

    /// Takes a chat of `text` with `request_id` while the session stops or
    /// not and a turn runs (`busy`) or not ([`Intake::admit`]): a new chat
    /// is numbered and queued, and its request id remembered; a duplicate
    /// answers the turn its request id took.
    pub(super) fn take_chat(
        &mut self,
        text: &str,
        request_id: Option<RequestId>,
        seat_id: SeatId,
        life: Lifecycle,
        busy: bool,
        storage_refusing: impl FnOnce() -> Option<&'static str>,
    ) -> Result<ChatAccepted, ChatRefused> {
        let load = Load {
            life,
            busy,
            waiting: self.queue.len(),
        };
        let admitted = self.admit(
            text,
            request_id.as_deref(),
            &seat_id,
            load,
            storage_refusing,
        )?;
        let text = match admitted {
            Admission::New { text } => text.to_owned(),
            Admission::Duplicate { turn_id } => {
                return Ok(ChatAccepted {
                    turn_id,
                    duplicate: true,
                    queued: 0,
                    acked: false,
                    action: None,
                });
            }
        };
        let queued = self.queue.len() + usize::from(busy);
        let turn_no = self.next_turn_no;
        self.next_turn_no += 1;
        let turn_id = TurnId::from(format!("turn_{turn_no}"));
        if let Some(r) = &request_id {
            self.remember(r.clone(), turn_id.clone());
        }
        self.queue.push_back(Work::Turn(QueuedTurn {
            turn_no,
            turn_id: turn_id.clone(),
            request_id,
            text,
            seat_id,
            stored: if queued == 0 {
                Stored::NotNeeded
            } else {
                Stored::Writing
            },
            trace_id: None,
            traceparent: None,
        }));
        Ok(ChatAccepted {
            turn_id,
            duplicate: false,
            queued,
            acked: false,
            action: None,
        })
    }

    /// Takes a direct call into the queue, or says why not: the session
    /// stopping, the queue full behind a running turn (`busy`), storage
    /// refusing, the call rate spent, asked in that order. Calls spend
    /// nothing from the chat rate limit.
    pub(super) fn take_call(
        &mut self,
        call: QueuedCall,
        life: Lifecycle,
        busy: bool,
        storage_refusing: impl FnOnce() -> Option<&'static str>,
    ) -> Result<(), ChatRefused> {
        life.refuse_if_going()?;
        let max_queue = self.max_queued_turns;
        if busy && self.queue.len() >= max_queue {
            return Err(ChatRefused::new(
                ErrorCode::QueueFull,
                format!("{max_queue} calls are already waiting"),
            ));
        }
        if let Some(reason) = storage_refusing() {
            return Err(ChatRefused::new(ErrorCode::Overloaded, reason));
        }
        spend_one(
            self.calls.get(self.calls_quota, rate::direct),
            "too many calls into this session",
        )?;
        self.queue.push_back(Work::Call(call));
        Ok(())
    }

    /// The work to start next, in arrival order. A direct call reads the
    /// state, so it stays at the front while `effects_in_flight` (journalled
    /// but not yet durable and applied); a turn starts at once.
    pub(super) fn next(&mut self, effects_in_flight: bool) -> Option<Work> {
        match self.queue.front() {
            Some(Work::Call(_)) if effects_in_flight => return None,
            // A chat is not started before its ack could be sent.
            Some(Work::Turn(q)) if q.stored == Stored::Writing => return None,
            _ => {}
        }
        self.queue.pop_front()
    }

    /// The queued chat `turn_id`.
    fn queued_turn(&mut self, turn_id: &TurnId) -> Option<&mut QueuedTurn> {
        self.queue.iter_mut().find_map(|w| match w {
            Work::Turn(q) if q.turn_id == *turn_id => Some(q),
            _ => None,
        })
    }

    /// The turn number of the queued chat `turn_id` (0 if none waits).
    pub(super) fn turn_no(&mut self, turn_id: &TurnId) -> u64 {
        self.queued_turn(turn_id).map_or(0, |q| q.turn_no)
    }

    /// The queued chat `turn_id` runs under `trace_id` (its caller's),
    /// its span a child of `traceparent`'s.
    pub(super) fn trace(
        &mut self,
        turn_id: &TurnId,
        trace_id: Option<TraceId>,
        traceparent: Option<TraceParent>,
    ) {
        if let Some(q) = self.queued_turn(turn_id) {
            q.trace_id = trace_id;
            q.traceparent = traceparent;
        }
    }

    /// The inbox row of the queued chat `turn_id` is durable: it may start.
    pub(super) fn stored(&mut self, turn_id: &TurnId) {
        if let Some(q) = self.queued_turn(turn_id) {
            q.stored = Stored::InInbox;
        }
    }

    /// Queues the chats a previous run stored and acknowledged but never
    /// started, in order, ahead of anything new.
    pub(super) fn restore_stored(&mut self, chats: Vec<QueuedChat>) {
        for chat in chats {
            let turn_id = chat.turn_id;
            if let Some(r) = &chat.request_id {
                self.remember(r.clone(), turn_id.clone());
            }
            self.next_turn_no = self.next_turn_no.max(chat.turn_no + 1);
            self.queue.push_back(Work::Turn(QueuedTurn {
                turn_no: chat.turn_no,
                turn_id,
                request_id: chat.request_id,
                text: chat.text,
                seat_id: chat.seat_id,
                stored: Stored::InInbox,
                trace_id: None,
                traceparent: None,
            }));
        }
    }

    /// Chats taken and waiting for their turn to start (direct calls not
    /// counted).
    pub(super) fn waiting_chats(&self) -> usize {
        self.queue
            .iter()
            .filter(|w| matches!(w, Work::Turn(_)))
            .count()
    }

    /// Whether any work waits.
    pub(super) fn has_work(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether `turn_id` is queued, not yet started.
    pub(super) fn holds_turn(&self, turn_id: &TurnId) -> bool {
        self.queue
            .iter()
            .any(|w| matches!(w, Work::Turn(q) if q.turn_id == *turn_id))
    }

    /// Whether a chat of `text` with `request_id` is taken, a duplicate, or
    /// refused, while the session is as `load` says. `storage_refusing` is
    /// asked only if the chat gets that far. An admitted new chat has spent
    /// from the rate limit; [`Intake::take_chat`] queues it and then
    /// remembers its request id.
    fn admit<'t>(
        &mut self,
        text: &'t str,
        request_id: Option<&str>,
        seat_id: &SeatId,
        load: Load,
        storage_refusing: impl FnOnce() -> Option<&'static str>,
    ) -> Result<Admission<'t>, ChatRefused> {
        let refuse = |code, message: String| Err(ChatRefused::new(code, message));
        load.life.refuse_if_going()?;
        let text = self.check_text(text)?;
        if let Some(Err(message)) = request_id.map(check_request_id) {
            return refuse(ErrorCode::InvalidFrame, message);
        }
        if let Some(turn_id) = request_id.and_then(|r| self.requests.get(r)) {
            return Ok(Admission::Duplicate {
                turn_id: turn_id.clone(),
            });
        }
        if let Some(reason) = storage_refusing() {
            return Err(ChatRefused::new(ErrorCode::Overloaded, reason).with_retry_after(1000));
        }
        let max_queue = self.max_queued_turns;
        if load.busy && load.waiting >= max_queue {
            return refuse(
                ErrorCode::QueueFull,
                format!("{max_queue} turns are already waiting"),
            );
        }
        let limiter = self.limiter.get(self.chat_quota, rate::owned_keyed);
        spend(limiter, seat_id, "too many messages")?;
        Ok(Admission::New { text })
    }

    /// Takes a seat's action for a round (rounds mode): the checks of a
    /// chat ([`Intake::admit`]) but the queue's, since an action waits in
    /// the round, not the queue. Answers its text, or `None` for a request
    /// id taken already ([`Intake::duplicate_of`] names what it took).
    pub(super) fn take_action(
        &mut self,
        text: &str,
        request_id: Option<&str>,
        seat_id: &SeatId,
        life: Lifecycle,
        storage_refusing: impl FnOnce() -> Option<&'static str>,
    ) -> Result<Option<String>, ChatRefused> {
        let load = Load {
            life,
            ..Load::default()
        };
        Ok(
            match self.admit(text, request_id, seat_id, load, storage_refusing)? {
                Admission::New { text } => Some(text.to_owned()),
                Admission::Duplicate { .. } => None,
            },
        )
    }

    /// Whether `request_id` was taken already (a chat with it is a
    /// duplicate).
    pub(super) fn knows(&self, request_id: Option<&str>) -> bool {
        request_id.is_some_and(|r| self.requests.get(r).is_some())
    }

    /// What the request id `request_id` was taken by.
    pub(super) fn duplicate_of(&self, request_id: Option<&str>) -> TurnId {
        request_id
            .and_then(|r| self.requests.get(r))
            .cloned()
            .unwrap_or_else(|| TurnId::from(""))
    }

    /// `request_id` was taken by the round action `action_id`.
    pub(super) fn remember_action(&mut self, request_id: RequestId, action_id: TurnId) {
        self.remember(request_id, action_id);
    }

    /// Numbers a turn that did not come through the queue (a round's).
    pub(super) fn next_turn_no(&mut self) -> u64 {
        let turn_no = self.next_turn_no;
        self.next_turn_no += 1;
        turn_no
    }

    /// `text` trimmed, if it is neither empty nor longer than the bound.
    fn check_text<'t>(&self, text: &'t str) -> Result<&'t str, ChatRefused> {
        let text = text.trim();
        if text.is_empty() {
            let message = "chat text must not be empty";
            return Err(ChatRefused::new(ErrorCode::InvalidFrame, message));
        }
        let max = self.max_text_chars;
        if text.chars().count() > max {
            return Err(ChatRefused::new(
                ErrorCode::TextTooLong,
                format!("chat text is longer than {max} characters"),
            ));
        }
        Ok(text)
    }

    /// Takes a line of table talk from `seat_id`: the same text bound as a
    /// chat, and a rate of its own per seat. Answers the text, trimmed.
    pub(super) fn take_talk<'t>(
        &self,
        text: &'t str,
        request_id: Option<&str>,
        seat_id: &SeatId,
    ) -> Result<&'t str, ChatRefused> {
        let text = self.check_text(text)?;
        if let Some(Err(message)) = request_id.map(check_request_id) {
            return Err(ChatRefused::new(ErrorCode::InvalidFrame, message));
        }
        let talk = self.talk.get(self.chat_quota, rate::owned_keyed);
        spend(talk, seat_id, "too much table talk")?;
        Ok(text)
    }

    /// `request_id` was taken by `turn_id`: a chat with it again is a
    /// duplicate of that turn.
    fn remember(&mut self, request_id: RequestId, turn_id: TurnId) {
        self.requests.insert(request_id, turn_id);
    }
}

/// Spends one of `seat_id`'s from `limiter`, or refuses with `RATE_LIMITED`.
fn spend(
    limiter: &rate::OwnedKeyed<SeatId>,
    seat_id: &SeatId,
    what: &str,
) -> Result<(), ChatRefused> {
    limited(limiter.check_key(seat_id), what)
}

/// Spends one from `limiter`, or refuses with `RATE_LIMITED`.
fn spend_one(limiter: &DefaultDirectRateLimiter, what: &str) -> Result<(), ChatRefused> {
    limited(limiter.check(), what)
}

/// A limiter's answer as a refusal saying `what` and how long to wait.
fn limited(
    checked: Result<(), governor::NotUntil<<DefaultClock as Clock>::Instant>>,
    what: &str,
) -> Result<(), ChatRefused> {
    checked.map_err(|not_until| {
        let wait = rate::wait(&not_until);
        ChatRefused::new(
            ErrorCode::RateLimited,
            format!("{what}; try again in {} ms", wait.as_millis()),
        )
        .with_retry_after(wait.as_millis() as u64 + 1)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::game::party::host_seat as host;
    use crate::protocol::MAX_REQUEST_ID_CHARS;

    const MAX_TEXT: usize = 10;
    const MAX_QUEUE: usize = 2;
    const BURST: u32 = 2;
    const CALLS_BURST: u32 = 6;

    fn limits(per_minute: u32, burst: u32) -> Limits {
        Limits {
            max_iterations: 4,
            history_tokens: 0,
            chat_per_minute: per_minute,
            chat_burst: burst,
            calls_per_minute: 1,
            calls_burst: CALLS_BURST,
            max_queued_turns: MAX_QUEUE,
            max_text_chars: MAX_TEXT,
            turn_deadline: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        }
    }

    /// An intake allowing one chat a minute in bursts of [`BURST`], that
    /// took request id `r-old` as `turn_7`.
    fn intake() -> Intake {
        let mut requests = RecentRequests::default();
        requests.insert("r-old".into(), "turn_7".into());
        Intake::new(&limits(1, BURST), requests, 8)
    }

    /// A session that takes work.
    const OPEN: Lifecycle = Lifecycle::Open;
    /// A session unloading, or whose storage failed.
    const STOPPED: Lifecycle = Lifecycle::Stopping { closed_at: None };

    const IDLE: Load = Load {
        life: OPEN,
        busy: false,
        waiting: 0,
    };
    const STOPPING: Load = Load {
        life: STOPPED,
        ..IDLE
    };
    /// A turn runs and the queue behind it is full.
    const FULL: Load = Load {
        life: OPEN,
        busy: true,
        waiting: MAX_QUEUE,
    };

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Want {
        New(&'static str),
        Duplicate(&'static str),
        Refused(ErrorCode),
        Reloading,
    }

    struct Case {
        name: &'static str,
        text: &'static str,
        request_id: Option<&'static str>,
        load: Load,
        refusing: Option<&'static str>,
        /// The rate limit's burst is spent first.
        rate_spent: bool,
        want: Want,
    }

    /// A chat that passes everything, to vary one thing at a time.
    const OK: Case = Case {
        name: "",
        text: "look",
        request_id: None,
        load: IDLE,
        refusing: None,
        rate_spent: false,
        want: Want::New("look"),
    };

    fn check(cases: &[Case]) {
        for c in cases {
            let name = c.name;
            let mut intake = intake();
            if c.rate_spent {
                for _ in 0..BURST {
                    assert!(
                        matches!(
                            intake.admit("spend", None, &host(), IDLE, || None),
                            Ok(Admission::New { .. })
                        ),
                        "{name}: spending the burst"
                    );
                }
            }
            let asked = std::cell::Cell::new(false);
            let got = intake.admit(c.text, c.request_id, &host(), c.load, || {
                asked.set(true);
                c.refusing
            });
            match (c.want, got) {
                (Want::New(text), Ok(got)) => assert_eq!(got, Admission::New { text }, "{name}"),
                (Want::Duplicate(turn_id), Ok(got)) => assert_eq!(
                    got,
                    Admission::Duplicate {
                        turn_id: turn_id.into()
                    },
                    "{name}"
                ),
                (Want::Reloading, Err(r)) => {
                    assert!(r.is_reloading(), "{name}: {r:?}");
                    assert_eq!(r.code, ErrorCode::InternalError, "{name}");
                    assert_eq!(r.retry_after_ms, None, "{name}");
                }
                (Want::Refused(code), Err(r)) => {
                    assert_eq!(r.code, code, "{name}: {}", r.message);
                    assert!(!r.is_reloading(), "{name}");
                    match code {
                        ErrorCode::Overloaded => {
                            assert_eq!(r.retry_after_ms, Some(1000), "{name}");
                            assert_eq!(Some(r.message.as_str()), c.refusing, "{name}");
                        }
                        ErrorCode::RateLimited => assert!(
                            r.retry_after_ms.is_some_and(|ms| ms > 0),
                            "{name}: {:?}",
                            r.retry_after_ms
                        ),
                        _ => assert_eq!(r.retry_after_ms, None, "{name}"),
                    }
                }
                (want, got) => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
            // Storage is asked only by a chat that gets past the duplicate
            // check, as the actor asked it before.
            let reaches_storage = matches!(
                c.want,
                Want::New(_)
                    | Want::Refused(
                        ErrorCode::Overloaded | ErrorCode::QueueFull | ErrorCode::RateLimited
                    )
            );
            assert_eq!(asked.get(), reaches_storage, "{name}: storage asked");
        }
    }

    #[test]
    fn each_refusal_has_its_code() {
        check(&[
            Case {
                name: "a chat that passes everything",
                ..OK
            },
            Case {
                name: "the session is stopping",
                load: STOPPING,
                want: Want::Reloading,
                ..OK
            },
            Case {
                name: "empty text",
                text: "",
                want: Want::Refused(ErrorCode::InvalidFrame),
                ..OK
            },
            Case {
                name: "only white space",
                text: " \n\t  ",
                want: Want::Refused(ErrorCode::InvalidFrame),
                ..OK
            },
            Case {
                name: "text one character too long",
                text: "abcdefghijk",
                want: Want::Refused(ErrorCode::TextTooLong),
                ..OK
            },
            Case {
                name: "text at the limit once trimmed",
                text: "   abcdefghij \n",
                want: Want::New("abcdefghij"),
                ..OK
            },
            Case {
                name: "characters are counted, not bytes",
                text: "éééééééééé",
                want: Want::New("éééééééééé"),
                ..OK
            },
            Case {
                name: "an empty request id",
                request_id: Some(""),
                want: Want::Refused(ErrorCode::InvalidFrame),
                ..OK
            },
            Case {
                name: "a request id with a control character",
                request_id: Some("r\u{7}1"),
                want: Want::Refused(ErrorCode::InvalidFrame),
                ..OK
            },
            Case {
                name: "a new request id",
                request_id: Some("r-new"),
                ..OK
            },
            Case {
                name: "a request id already taken",
                request_id: Some("r-old"),
                want: Want::Duplicate("turn_7"),
                ..OK
            },
            Case {
                name: "storage refusing",
                refusing: Some("storage is behind"),
                want: Want::Refused(ErrorCode::Overloaded),
                ..OK
            },
            Case {
                name: "the queue full while a turn runs",
                load: FULL,
                want: Want::Refused(ErrorCode::QueueFull),
                ..OK
            },
            Case {
                name: "the queue one short of full",
                load: Load {
                    waiting: MAX_QUEUE - 1,
                    ..FULL
                },
                ..OK
            },
            Case {
                name: "a full queue with no turn running",
                load: Load {
                    busy: false,
                    ..FULL
                },
                ..OK
            },
            Case {
                name: "the rate spent",
                rate_spent: true,
                want: Want::Refused(ErrorCode::RateLimited),
                ..OK
            },
        ]);
    }

    #[test]
    fn the_first_failing_check_answers() {
        check(&[
            Case {
                name: "stopping before empty text",
                text: "",
                load: STOPPING,
                want: Want::Reloading,
                ..OK
            },
            Case {
                name: "stopping before a duplicate",
                request_id: Some("r-old"),
                load: STOPPING,
                want: Want::Reloading,
                ..OK
            },
            Case {
                name: "empty text before a bad request id",
                text: " ",
                request_id: Some(""),
                want: Want::Refused(ErrorCode::InvalidFrame),
                ..OK
            },
            Case {
                name: "empty text before a duplicate",
                text: "",
                request_id: Some("r-old"),
                want: Want::Refused(ErrorCode::InvalidFrame),
                ..OK
            },
            Case {
                name: "long text before a bad request id",
                text: "abcdefghijk",
                request_id: Some(""),
                want: Want::Refused(ErrorCode::TextTooLong),
                ..OK
            },
            Case {
                name: "long text before a duplicate",
                text: "abcdefghijk",
                request_id: Some("r-old"),
                want: Want::Refused(ErrorCode::TextTooLong),
                ..OK
            },
            Case {
                name: "a bad request id before storage, queue and rate",
                request_id: Some("\n"),
                load: FULL,
                refusing: Some("storage is behind"),
                rate_spent: true,
                want: Want::Refused(ErrorCode::InvalidFrame),
                ..OK
            },
            Case {
                name: "a duplicate while storage refuses",
                request_id: Some("r-old"),
                refusing: Some("storage is behind"),
                want: Want::Duplicate("turn_7"),
                ..OK
            },
            Case {
                name: "a duplicate while the queue is full",
                request_id: Some("r-old"),
                load: FULL,
                want: Want::Duplicate("turn_7"),
                ..OK
            },
            Case {
                name: "a duplicate while the rate is spent",
                request_id: Some("r-old"),
                rate_spent: true,
                want: Want::Duplicate("turn_7"),
                ..OK
            },
            Case {
                name: "storage refusing before a full queue",
                load: FULL,
                refusing: Some("storage is behind"),
                want: Want::Refused(ErrorCode::Overloaded),
                ..OK
            },
            Case {
                name: "storage refusing before the rate",
                refusing: Some("storage is behind"),
                rate_spent: true,
                want: Want::Refused(ErrorCode::Overloaded),
                ..OK
            },
            Case {
                name: "a full queue before the rate",
                load: FULL,
                rate_spent: true,
                want: Want::Refused(ErrorCode::QueueFull),
                ..OK
            },
        ]);
    }

    #[test]
    fn a_request_id_too_long_is_an_invalid_frame() {
        let mut intake = intake();
        let at_limit = "r".repeat(MAX_REQUEST_ID_CHARS);
        let over = "r".repeat(MAX_REQUEST_ID_CHARS + 1);
        assert!(matches!(
            intake.admit("hi", Some(&at_limit), &host(), IDLE, || None),
            Ok(Admission::New { text: "hi" })
        ));
        let refused = intake
            .admit("hi", Some(&over), &host(), IDLE, || None)
            .expect_err("over the limit");
        assert_eq!(refused.code, ErrorCode::InvalidFrame);
    }

    #[test]
    fn only_an_admitted_chat_spends_from_the_rate_limit() {
        let mut intake = Intake::new(&limits(1, 1), RecentRequests::default(), 1);
        intake.remember("r-1".into(), "turn_1".into());
        let refused: [(&str, Option<&str>, Load, Option<&'static str>); 5] = [
            ("", None, IDLE, None),
            ("hi", None, STOPPING, None),
            ("hi", Some("r-1"), IDLE, None),
            ("hi", None, IDLE, Some("storage is behind")),
            ("hi", None, FULL, None),
        ];
        for (text, request_id, load, refusing) in refused {
            assert!(
                !matches!(
                    intake.admit(text, request_id, &host(), load, || refusing),
                    Ok(Admission::New { .. })
                ),
                "{text:?} {request_id:?} {load:?} {refusing:?}"
            );
        }
        assert_eq!(
            intake.admit("hi", None, &host(), IDLE, || None),
            Ok(Admission::New { text: "hi" }),
            "the one chat of the burst is still there"
        );
        let limited = intake
            .admit("again", None, &host(), IDLE, || None)
            .expect_err("the burst is spent");
        assert_eq!(limited.code, ErrorCode::RateLimited);
        // One chat a minute: the next is a minute (less the time since the
        // first) away.
        let ms = limited.retry_after_ms.expect("says when to retry");
        assert!((50_000..=60_001).contains(&ms), "retry after {ms} ms");
        assert!(
            limited
                .message
                .contains(&format!("try again in {} ms", ms - 1)),
            "{}",
            limited.message
        );
    }

    #[test]
    fn each_seat_has_its_own_rates_for_chat_and_table_talk() {
        let mut intake = Intake::new(&limits(1, 1), RecentRequests::default(), 1);
        let (brin, cara) = (SeatId::from("seat_2"), SeatId::from("seat_3"));
        assert!(intake.admit("hi", None, &brin, IDLE, || None).is_ok());
        let spent = intake.admit("again", None, &brin, IDLE, || None);
        assert_eq!(spent.map_err(|r| r.code), Err(ErrorCode::RateLimited));
        assert!(
            intake.admit("hi", None, &cara, IDLE, || None).is_ok(),
            "another seat's chat is not held back"
        );
        assert_eq!(
            intake.take_talk(" psst ", None, &brin),
            Ok("psst"),
            "talk has its own rate"
        );
        let talked = intake.take_talk("more", None, &brin);
        assert_eq!(talked.map_err(|r| r.code), Err(ErrorCode::RateLimited));
        let long = "x".repeat(MAX_TEXT + 1);
        let too_long = intake.take_talk(&long, None, &cara);
        assert_eq!(too_long.map_err(|r| r.code), Err(ErrorCode::TextTooLong));
    }

    #[test]
    fn a_remembered_request_is_a_duplicate_of_its_turn() {
        let mut intake = Intake::new(&limits(1000, 1000), RecentRequests::default(), 1);
        for _ in 0..2 {
            assert_eq!(
                intake.admit("hi", Some("r-1"), &host(), IDLE, || None),
                Ok(Admission::New { text: "hi" }),
                "admitting alone does not remember"
            );
        }
        intake.remember("r-1".into(), "turn_1".into());
        intake.remember("r-2".into(), "turn_2".into());
        for (request_id, turn_id) in [("r-1", "turn_1"), ("r-2", "turn_2")] {
            assert_eq!(
                intake.admit("hi", Some(request_id), &host(), IDLE, || None),
                Ok(Admission::Duplicate {
                    turn_id: turn_id.into()
                }),
                "{request_id}"
            );
        }
        assert_eq!(
            intake.admit("hi", Some("r-3"), &host(), IDLE, || None),
            Ok(Admission::New { text: "hi" })
        );
        assert_eq!(
            intake.admit("hi", None, &host(), IDLE, || None),
            Ok(Admission::New { text: "hi" }),
            "no request id is never a duplicate"
        );
    }

    #[test]
    fn remembered_requests_forget_the_oldest() {
        let extra = 3;
        let mut requests = RecentRequests::default();
        assert!(requests.0.is_none(), "no room before a request id");
        assert_eq!(requests.get("r-0"), None);
        for i in 0..REMEMBERED_REQUESTS + extra {
            requests.insert(format!("r-{i}").into(), format!("turn_{i}").into());
        }
        for i in 0..extra {
            assert_eq!(requests.get(&format!("r-{i}")), None, "r-{i} is forgotten");
        }
        for i in [extra, REMEMBERED_REQUESTS, REMEMBERED_REQUESTS + extra - 1] {
            assert_eq!(
                requests.get(&format!("r-{i}")).map(TurnId::as_str),
                Some(format!("turn_{i}").as_str()),
                "r-{i} is kept"
            );
        }
        let known = |r: &RecentRequests| r.0.as_ref().map(|k| (k.order.len(), k.map.len()));
        assert_eq!(
            known(&requests),
            Some((REMEMBERED_REQUESTS, REMEMBERED_REQUESTS))
        );

        // An id taken twice holds one place: nothing more is forgotten.
        let newest = format!("r-{}", REMEMBERED_REQUESTS + extra - 1);
        requests.insert(newest.clone().into(), "turn_again".into());
        assert!(requests.get(&format!("r-{extra}")).is_some());
        assert_eq!(
            known(&requests),
            Some((REMEMBERED_REQUESTS, REMEMBERED_REQUESTS))
        );

        // Through the intake: a forgotten request id is new again.
        let mut intake = Intake::new(&limits(1000, 1000), requests, 1);
        assert_eq!(
            intake.admit("hi", Some("r-0"), &host(), IDLE, || None),
            Ok(Admission::New { text: "hi" })
        );
        assert_eq!(
            intake.admit("hi", Some(&format!("r-{extra}")), &host(), IDLE, || None),
            Ok(Admission::Duplicate {
                turn_id: format!("turn_{extra}").into()
            })
        );
    }

    /// A direct call of `tool`, and where its answer would go.
    fn direct(tool: &str) -> (QueuedCall, oneshot::Receiver<DirectCallDone>) {
        let (reply, rx) = oneshot::channel();
        let call = CallTool {
            tool: tool.into(),
            args: serde_json::json!({}),
            args_hash: None,
            role: crate::tools::Role::Service,
            trace_id: "tr_1".into(),
            origin: Default::default(),
        };
        (QueuedCall { call, reply }, rx)
    }

    /// What waits, in order: turn ids and tools.
    fn queued(intake: &Intake) -> Vec<String> {
        intake
            .queue
            .iter()
            .map(|w| match w {
                Work::Turn(q) => q.turn_id.to_string(),
                Work::Call(c) => c.call.tool.clone(),
            })
            .collect()
    }

    #[test]
    fn chats_taken_are_numbered_from_the_restored_turn_and_queued_in_order() {
        let mut intake = intake();
        let first = intake.take_chat(" look ", Some("r-1".into()), host(), OPEN, false, || None);
        let want = |turn_id: &str, duplicate, queued| {
            Ok(ChatAccepted {
                turn_id: turn_id.into(),
                duplicate,
                queued,
                acked: false,
                action: None,
            })
        };
        assert_eq!(first, want("turn_8", false, 0));
        let Some(Work::Turn(q)) = intake.next(false) else {
            panic!("the turn starts");
        };
        assert_eq!(
            (q.turn_no, q.text.as_str()),
            (8, "look"),
            "numbered, trimmed"
        );
        assert_eq!(q.request_id.as_deref(), Some("r-1"));
        // It runs now: the next chat has it ahead.
        let second = intake.take_chat("go", None, host(), OPEN, true, || None);
        assert_eq!(second, want("turn_9", false, 1));
        assert!(intake.holds_turn(&"turn_9".into()));
        assert!(!intake.holds_turn(&"turn_8".into()), "started");

        // Its request id again is that turn, and queues nothing; so is one
        // restored from the journal.
        let again = intake.take_chat("look", Some("r-1".into()), host(), OPEN, true, || None);
        assert_eq!(again, want("turn_8", true, 0));
        let restored = intake.take_chat("x", Some("r-old".into()), host(), OPEN, true, || None);
        assert_eq!(restored, want("turn_7", true, 0));
        assert_eq!(queued(&intake), ["turn_9"]);

        // A call joins the queue, which is then full behind the running
        // turn: a chat is refused and nothing is taken.
        intake
            .take_call(direct("roll_dice").0, OPEN, true, || None)
            .expect("taken");
        let full = intake.take_chat("wait", None, host(), OPEN, true, || None);
        assert_eq!(full.map_err(|r| r.code), Err(ErrorCode::QueueFull));
        assert_eq!(queued(&intake), ["turn_9", "roll_dice"]);
    }

    #[test]
    fn a_direct_call_is_refused_in_order_and_spends_no_chat_rate() {
        // (name, what the session is doing, storage refusing, the refusal)
        let cases: [(&str, Load, Option<&'static str>, Option<ErrorCode>); 6] = [
            ("taken", IDLE, None, None),
            (
                "taken behind a short queue",
                Load {
                    waiting: MAX_QUEUE - 1,
                    ..FULL
                },
                None,
                None,
            ),
            (
                "a full queue with nothing running",
                Load {
                    busy: false,
                    ..FULL
                },
                None,
                None,
            ),
            (
                "stopping",
                Load {
                    life: STOPPED,
                    ..FULL
                },
                Some("full"),
                Some(ErrorCode::InternalError),
            ),
            (
                "a full queue behind a turn",
                FULL,
                Some("full"),
                Some(ErrorCode::QueueFull),
            ),
            (
                "storage refusing",
                IDLE,
                Some("disk full"),
                Some(ErrorCode::Overloaded),
            ),
        ];
        for (name, load, refusing, want) in cases {
            let Load {
                life,
                busy,
                waiting,
            } = load;
            let stopping = life.refuses_work();
            let mut intake = intake();
            for i in 0..waiting {
                intake
                    .queue
                    .push_back(Work::Call(direct(&format!("before_{i}")).0));
            }
            let (call, _rx) = direct("roll_dice");
            let got = intake.take_call(call, life, busy, || refusing);
            match want {
                None => {
                    assert_eq!(got, Ok(()), "{name}");
                    assert_eq!(
                        queued(&intake).last().map(String::as_str),
                        Some("roll_dice")
                    );
                }
                Some(code) => {
                    let r = got.expect_err(name);
                    assert_eq!(r.code, code, "{name}");
                    assert_eq!(r.is_reloading(), stopping, "{name}");
                    assert_eq!(r.retry_after_ms, None, "{name}");
                    assert_eq!(intake.queue.len(), waiting, "{name}: nothing taken");
                    if code == ErrorCode::QueueFull {
                        let full = format!("{MAX_QUEUE} calls are already waiting");
                        assert_eq!(r.message, full, "{name}");
                    }
                }
            }
        }
        // Calls leave the chat burst whole, and spend their own: past it a
        // call is refused with a wait, and a chat still goes through.
        let mut intake = intake();
        for _ in 0..CALLS_BURST {
            assert_eq!(
                intake.take_call(direct("roll_dice").0, OPEN, false, || None),
                Ok(())
            );
        }
        let spent = intake.take_call(direct("roll_dice").0, OPEN, false, || None);
        let r = spent.expect_err("the call rate is spent");
        assert_eq!(r.code, ErrorCode::RateLimited);
        assert!(r.retry_after_ms.is_some_and(|ms| ms > 0), "{r:?}");
        assert_eq!(intake.queue.len(), CALLS_BURST as usize, "nothing taken");
        for _ in 0..BURST {
            assert!(
                intake
                    .take_chat("hi", None, host(), OPEN, false, || None)
                    .is_ok()
            );
        }
    }

    #[test]
    fn work_starts_in_order_and_a_call_waits_for_effects_in_flight() {
        let mut intake = Intake::new(&limits(1000, 1000), RecentRequests::default(), 1);
        intake
            .take_chat("a", None, host(), OPEN, false, || None)
            .expect("taken");
        intake
            .take_call(direct("roll_dice").0, OPEN, false, || None)
            .expect("taken");
        intake
            .take_chat("b", None, host(), OPEN, false, || None)
            .expect("taken");
        assert!(intake.has_work());
        assert_eq!(intake.waiting_chats(), 2, "the call is not a chat");
        let started = |w: Option<Work>| match w {
            Some(Work::Turn(q)) => q.turn_id.to_string(),
            Some(Work::Call(c)) => c.call.tool,
            None => "nothing".into(),
        };
        // A turn starts while effects are in flight; a call does not.
        assert_eq!(started(intake.next(true)), "turn_1");
        assert_eq!(intake.waiting_chats(), 1);
        assert_eq!(started(intake.next(true)), "nothing");
        assert_eq!(
            queued(&intake),
            ["roll_dice", "turn_2"],
            "the call keeps its place"
        );
        assert_eq!(started(intake.next(false)), "roll_dice");
        // turn_2 was taken behind other work: stored before it may start.
        assert_eq!(started(intake.next(false)), "nothing");
        let turn_2 = TurnId::from("turn_2");
        intake.stored(&turn_2);
        assert_eq!(started(intake.next(true)), "turn_2");
        assert_eq!(started(intake.next(false)), "nothing");
        assert!(!intake.has_work());
        assert_eq!(intake.waiting_chats(), 0);
    }

    #[test]
    fn chats_stored_by_an_earlier_run_come_first_and_keep_their_ids() {
        let mut intake = Intake::new(&limits(1000, 1000), RecentRequests::default(), 5);
        let stored = |turn_no: u64, rid: &str| QueuedChat {
            session_id: "s".into(),
            turn_id: format!("turn_{turn_no}").into(),
            turn_no,
            request_id: Some(rid.into()),
            text: rid.into(),
            after_seq: 40,
            created_at: 0,
            seat_id: host(),
        };
        intake.restore_stored(vec![stored(5, "r-5"), stored(6, "r-6")]);
        let again = intake
            .take_chat("again", Some("r-6".into()), host(), OPEN, true, || None)
            .expect("taken");
        assert_eq!((again.duplicate, again.turn_id.as_str()), (true, "turn_6"));
        let new = intake
            .take_chat("new", Some("r-7".into()), host(), OPEN, false, || None)
            .expect("taken");
        assert_eq!(new.turn_id.as_str(), "turn_7", "numbered after them");
        let order: Vec<String> = std::iter::from_fn(|| match intake.next(false) {
            Some(Work::Turn(q)) => {
                let id = q.turn_id.to_string();
                // The new chat's row is written by now.
                if let Some(next) = intake.queue.iter_mut().find_map(|w| match w {
                    Work::Turn(q) => Some(q),
                    _ => None,
                }) {
                    next.stored = Stored::InInbox;
                }
                Some(id)
            }
            _ => None,
        })
        .collect();
        assert_eq!(order, ["turn_5", "turn_6", "turn_7"]);
    }
}
