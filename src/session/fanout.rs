//! The fan-out of one session: the connections subscribed to it, the story
//! frames sent to each of them, and when a `presence` frame tells them who
//! is there.
//!
//! It sits inside [`super::SessionActor`], which owns it: the actor adds and
//! removes connections, hands every durable frame to [`Fanout::broadcast`],
//! and has the core journal the `presence` frames this module asks for. The deferred
//! presence check needs a timer on the actor's context, so the actor keeps
//! the timer; *when* to send (now, at an instant, or not at all) is decided
//! here from the time of the last frame and the counts, with no actix, and
//! tested from tables. Broadcast sends through each connection's [`Sink`]:
//! its lane (a WebSocket served here: one hand-off per thread, `lanes`) or
//! its mailbox, so its tests run lanes that keep what they take and tiny
//! actors with small mailboxes.
//!
//! Invariants:
//! - every connection gets the same bytes, in the order they are broadcast;
//! - a connection whose mailbox is full, or whose [`Outbox`] holds its
//!   bound in bytes, is marked overflowed, sent one close
//!   ([`CLOSE_OVERFLOW`]) past its capacity and forgotten (a lane holds its
//!   bound in frames itself, and closes alike); one whose mailbox is
//!   closed is forgotten; neither ever slows the others;
//! - every byte queued for a connection is counted in its [`Outbox`]
//!   until the connection takes it;
//! - a `presence` frame goes out only with counts other than the last sent,
//!   and at most once per [`PRESENCE_EVERY`] ([`SPECTATORS_EVERY`] when
//!   only the spectators changed): a change after a quiet spell goes out
//!   at once, changes within the window go out together, as one frame,
//!   when it ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::SendError;
use bytestring::ByteString;

use super::lanes::{Post, Sink};
use super::messages::Subscribe;
use super::release::Batch;
use super::types::{Outbound, Outbox, Wire};
use crate::ids::{NodeId, SeatId};
use crate::metrics::Metrics;
use crate::protocol::{ConnRole, SeatOnline, StoryEvent};
use crate::room::FewMap;

/// WebSocket close code for "too slow: reconnect and resume with last_seq".
pub const CLOSE_OVERFLOW: u16 = 1013;
/// Shortest time between two `presence` frames of a session. A change after
/// a quiet spell is sent at once; changes within this time of the last
/// frame are sent together when it has passed, so a crowd joining costs a
/// few frames, not one per connection to every connection.
pub const PRESENCE_EVERY: Duration = Duration::from_millis(250);
/// Shortest time between two `presence` frames when only the number of
/// spectators changed. A public session's spectator token is anyone's,
/// and every frame is journalled: a stranger connecting and closing in a
/// loop adds at most one frame per this time to the story.
pub const SPECTATORS_EVERY: Duration = Duration::from_secs(5);
/// Connections from which frames released together are framed for the
/// wire once and shared ([`Wire`]); measured: with one spectator framing
/// cost a turn 1 % more instructions, with 10,000 it saved about 3 % of the
/// server's CPU (BENCHMARKS.md, "Fan-out").
const WIRE_FROM: usize = 8;

/// One connection of the session.
pub(super) struct Subscriber {
    pub(super) role: ConnRole,
    /// A player's seat (docs/protocol.md §8).
    pub(super) seat: Option<SeatId>,
    /// Where its messages go: its lane, or its mailbox (bounded; it
    /// closes when the connection stops).
    pub(super) sink: Sink,
    /// Shared with the connection: the bytes queued for it and not taken,
    /// marked overflowed here when it falls too far behind, so it drops the
    /// frames still queued and closes.
    pub(super) outbox: Arc<Outbox>,
}

/// What one broadcast did.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Delivery {
    /// Connections the frame was queued for.
    pub(super) sent: u64,
    /// Connections dropped because their queue was full.
    pub(super) overflowed: u64,
    /// Connections dropped (full or closed): presence changed if any were.
    pub(super) dropped: usize,
}

/// What to do about presence after connections came or went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Presence {
    /// Send a `presence` frame with these counts now; they count as sent.
    /// The seats online are the core's to name (it knows the party).
    Now { players: usize, spectators: usize },
    /// Ask again with [`Fanout::presence_due`] at this instant; every
    /// change until then goes out in that one answer.
    At(Instant),
    /// Nothing to send: the counts are the ones last sent, or a later
    /// check is already due.
    Nothing,
}

impl Presence {
    /// The `presence` frame to journal, if one goes out now, naming
    /// `seats` with whether each is online.
    pub(super) fn event(self, seats: Vec<SeatOnline>) -> Option<StoryEvent> {
        match self {
            Self::Now {
                players,
                spectators,
            } => Some(StoryEvent::Presence {
                players,
                spectators,
                seats,
            }),
            Self::At(_) | Self::Nothing => None,
        }
    }
}

/// Nodes whose spectators of one session are counted at most.
pub const MAX_REMOTE_AUDIENCES: usize = 256;

/// The subscribed connections and the presence throttle.
#[derive(Default)]
pub(super) struct Fanout {
    /// Mostly one player, sometimes a crowd ([`FewMap`]).
    subscribers: FewMap<u64, Subscriber>,
    /// How many of `subscribers` are players, kept as they come and go so
    /// that counting who is there does not walk every connection.
    players: usize,
    /// Connections per seat, for the seats online, in seat order: a party
    /// has a few seats, and a list of one keeps less than a map.
    seats: Vec<(SeatId, usize)>,
    /// Counts every time a seat comes online or goes offline, so that the
    /// presence throttle sees a change the counts alone do not show.
    seat_changes: usize,
    presence: PresenceThrottle,
    /// Spectators served by other nodes' tails of this session, by node,
    /// each with when its report runs out.
    /// A tree: no room while empty, as it mostly is.
    remote: BTreeMap<NodeId, (usize, Instant)>,
}

impl Fanout {
    /// Adds (or replaces) connection `conn_id`.
    pub(super) fn subscribe(&mut self, conn_id: u64, sub: Subscriber) {
        if sub.role == ConnRole::Player {
            self.players += 1;
        }
        if let Some(seat) = &sub.seat {
            match self.seats.binary_search_by(|(s, _)| s.cmp(seat)) {
                Ok(at) => self.seats[at].1 += 1,
                Err(at) => {
                    self.seats.reserve_exact(1);
                    self.seats.insert(at, (seat.clone(), 1));
                    self.seat_changes += 1;
                }
            }
        }
        if let Some(old) = self.subscribers.insert(conn_id, sub) {
            self.forget(&old);
        }
    }

    /// Keeps the player count when `sub` leaves the subscribers.
    fn forget(&mut self, sub: &Subscriber) {
        if sub.role == ConnRole::Player {
            self.players -= 1;
        }
        if let Some(seat) = &sub.seat
            && let Ok(at) = self.seats.binary_search_by(|(s, _)| s.cmp(seat))
        {
            self.seats[at].1 -= 1;
            if self.seats[at].1 == 0 {
                self.seats.remove(at);
                self.seat_changes += 1;
            }
        }
    }

    /// The seats with a connection here.
    pub(super) fn online_seats(&self) -> super::seats::SeatSet {
        self.seats.iter().map(|(s, _)| s.clone()).collect()
    }

    /// Removes connection `conn_id`; answers whether it was there.
    fn remove(&mut self, conn_id: u64) -> bool {
        match self.subscribers.remove(&conn_id) {
            Some(old) => {
                self.forget(&old);
                true
            }
            None => false,
        }
    }

    /// Adds the connection `msg` subscribes; answers its role.
    pub(super) fn add(&mut self, msg: Subscribe) -> ConnRole {
        let role = msg.role;
        self.subscribe(
            msg.conn_id,
            Subscriber {
                role,
                seat: msg.seat_id,
                sink: msg.sink,
                outbox: msg.outbox,
            },
        );
        role
    }

    /// Forgets connection `conn_id`; answers whether it was there.
    pub(super) fn unsubscribe(&mut self, conn_id: u64) -> bool {
        self.remove(conn_id)
    }

    /// Queues `msg` for connection `conn_id` even past its capacity;
    /// answers whether the connection is subscribed.
    pub(super) fn send_to(&self, conn_id: u64, msg: Outbound) -> bool {
        match self.subscribers.get(&conn_id) {
            Some(sub) => {
                sub.outbox.force(msg.bytes());
                sub.sink.force_now(msg);
                true
            }
            None => false,
        }
    }

    /// Whether no connection is subscribed here or reported by a tail.
    pub(super) fn is_empty(&self) -> bool {
        self.subscribers.is_empty() && self.remote.is_empty()
    }

    /// Node `node` serves `spectators` of this session from its tail, as
    /// far as its report holds (`until`); answers whether it was taken (a
    /// node past the first [`MAX_REMOTE_AUDIENCES`] is not counted).
    pub(super) fn remote_audience(
        &mut self,
        node: NodeId,
        spectators: usize,
        until: Instant,
    ) -> bool {
        if spectators == 0 {
            return self.remote.remove(&node).is_some();
        }
        if self.remote.len() >= MAX_REMOTE_AUDIENCES && !self.remote.contains_key(&node) {
            return false;
        }
        self.remote.insert(node, (spectators, until));
        true
    }

    /// Forgets the reports that ran out by `now` (their nodes stopped
    /// refreshing them); answers whether any did.
    pub(super) fn expire_remote(&mut self, now: Instant) -> bool {
        let before = self.remote.len();
        self.remote.retain(|_, (_, until)| *until > now);
        self.remote.len() != before
    }

    /// Tells every connection to close with `code` and forgets them all.
    pub(super) fn close_all(&mut self, code: u16, reason: &'static str) {
        let mut post = Post::default();
        for sub in self.subscribers.values() {
            sub.sink.force(&mut post, Outbound::Close { code, reason });
        }
        post.send();
        self.subscribers.clear();
        self.players = 0;
        self.seats.clear();
        self.seat_changes += 1;
    }

    /// Tells the connections of `seat` to close with `code` and forgets
    /// them; answers whether there were any.
    pub(super) fn close_seat(&mut self, seat: &SeatId, code: u16, reason: &'static str) -> bool {
        let conns: Vec<u64> = self
            .subscribers
            .iter()
            .filter(|(_, sub)| sub.seat.as_ref() == Some(seat))
            .map(|(id, _)| *id)
            .collect();
        let mut post = Post::default();
        for conn_id in &conns {
            if let Some(sub) = self.subscribers.get(conn_id) {
                sub.sink.force(&mut post, Outbound::Close { code, reason });
            }
            self.remove(*conn_id);
        }
        post.send();
        !conns.is_empty()
    }

    /// Sends the same bytes to every connection. One that cannot keep up is
    /// dropped and told to reconnect; it never slows the others.
    pub(super) fn broadcast(&mut self, bytes: &ByteString) -> Delivery {
        self.send_all(|| Outbound::Frame(bytes.clone()), 1)
    }

    /// [`Fanout::broadcast`] for frames released together, in order: one
    /// message to each connection carries them all. `sent` counts frames.
    pub(super) fn broadcast_all(&mut self, frames: Vec<ByteString>) -> Delivery {
        match frames.len() {
            0 => Delivery::default(),
            1 => self.broadcast(&frames[0]),
            n => {
                let shared = self.shared(frames);
                self.send_all(|| shared.clone(), n as u64)
            }
        }
    }

    /// Sends `batch` ([`Fanout::broadcast_after`]) and counts it in
    /// `metrics`; answers whether a connection that could not keep up was
    /// dropped (presence changed).
    pub(super) fn deliver(&mut self, batch: Batch, metrics: &Metrics) -> bool {
        let delivery = self.broadcast_after(batch.acks, batch.frames);
        metrics.outbound_drops.add(delivery.overflowed);
        metrics.frames_sent.add(delivery.sent);
        delivery.dropped > 0
    }

    /// [`Fanout::broadcast_all`], with `first` ahead of the frames for the
    /// connections it names (a chat's ack, to the connection that sent
    /// it), in the same message. `sent` counts story frames.
    pub(super) fn broadcast_after(
        &mut self,
        first: Vec<(u64, ByteString)>,
        frames: Vec<ByteString>,
    ) -> Delivery {
        if first.is_empty() {
            return self.broadcast_all(frames);
        }
        // Acks go to one connection or a few: a list, in the order they
        // came, not a map built per release.
        let mut own: Vec<(u64, Vec<ByteString>)> = Vec::new();
        for (conn_id, bytes) in first {
            match own.iter_mut().find(|(id, _)| *id == conn_id) {
                Some((_, out)) => out.push(bytes),
                None => own.push((conn_id, vec![bytes])),
            }
        }
        let own: Vec<(u64, Arc<[ByteString]>)> = own
            .into_iter()
            .map(|(conn_id, mut out)| {
                out.extend(frames.iter().cloned());
                (conn_id, out.into())
            })
            .collect();
        let n = frames.len() as u64;
        let shared = match frames.len() {
            0 => None,
            1 => Some(Outbound::Frame(frames[0].clone())),
            _ => Some(self.shared(frames)),
        };
        self.send_each(
            |id| match own.iter().find(|(conn_id, _)| *conn_id == id) {
                Some((_, out)) => Some(Outbound::Frames(out.clone())),
                None => shared.clone(),
            },
            n,
        )
    }

    /// Frames released together, for every connection alike: framed for
    /// the wire once when at least [`WIRE_FROM`] connections get them
    /// (then each queues one shared buffer and writes one slice), else
    /// handed over as they are (framing them costs a copy that a few
    /// connections do not win back).
    fn shared(&self, frames: Vec<ByteString>) -> Outbound {
        if self.subscribers.len() >= WIRE_FROM {
            Outbound::Wire(Wire::of(&frames))
        } else {
            Outbound::Frames(frames.into())
        }
    }

    /// Sends what `message` makes to every connection; a connection whose
    /// queue is full is told to close and dropped.
    fn send_all(&mut self, message: impl Fn() -> Outbound, frames: u64) -> Delivery {
        self.send_each(|_| Some(message()), frames)
    }

    /// Sends each connection what `message` makes for it, if anything; a
    /// connection whose queue is full is told to close and dropped.
    fn send_each(&mut self, message: impl Fn(u64) -> Option<Outbound>, frames: u64) -> Delivery {
        let mut delivery = Delivery::default();
        let mut dropped = Vec::new();
        let mut post = Post::default();
        for (id, sub) in self.subscribers.iter() {
            let Some(message) = message(*id) else {
                continue;
            };
            let bytes = message.bytes();
            let sent = if !sub.outbox.offer(bytes) {
                Err(SendError::Full(()))
            } else {
                match &sub.sink {
                    // A lane holds its queue to its bound itself.
                    Sink::Lane(lane) => {
                        post.push(lane, message);
                        Ok(())
                    }
                    Sink::Mailbox(recipient) => recipient.try_send(message).map_err(|e| {
                        sub.outbox.taken(bytes);
                        match e {
                            SendError::Full(_) => SendError::Full(()),
                            SendError::Closed(_) => SendError::Closed(()),
                        }
                    }),
                }
            };
            match sent {
                Ok(()) => delivery.sent += frames,
                Err(SendError::Full(())) => {
                    delivery.overflowed += 1;
                    sub.outbox.overflow();
                    // Past the capacity on purpose: one close request.
                    let close = Outbound::Close {
                        code: CLOSE_OVERFLOW,
                        reason: "too slow: reconnect with last_seq",
                    };
                    sub.sink.force(&mut post, close);
                    dropped.push(*id);
                }
                Err(SendError::Closed(())) => dropped.push(*id),
            }
        }
        post.send();
        delivery.dropped = dropped.len();
        for id in dropped {
            self.remove(id);
        }
        delivery
    }

    /// Players and spectators connected now, here and (spectators) to
    /// other nodes' tails.
    pub(super) fn connection_counts(&self) -> (usize, usize) {
        let remote: usize = self.remote.values().map(|(n, _)| n).sum();
        (self.players, self.subscribers.len() - self.players + remote)
    }

    /// Connections came or went at `now`: whether a `presence` frame goes
    /// out now, at the end of the window since the last one, or not at all.
    pub(super) fn presence_changed(&mut self, now: Instant) -> Presence {
        let counts = self.connection_counts();
        self.presence.changed(now, counts, self.seat_changes)
    }

    /// The instant a [`Presence::At`] named has come: a frame now if the
    /// counts changed meanwhile, else nothing. Never answers `At`.
    pub(super) fn presence_due(&mut self, now: Instant) -> Presence {
        let counts = self.connection_counts();
        self.presence.due(now, counts, self.seat_changes)
    }
}

/// When `presence` frames go out: a pure function of the last frame's time
/// and counts, the counts now, and the check already due, if any.
#[derive(Debug, Default)]
struct PresenceThrottle {
    /// When the last `presence` frame went out, with its counts and the
    /// fan-out's seat changes then.
    last: Option<(Instant, usize, usize, usize)>,
    /// When the check asked for last ([`Presence::At`]) is due.
    scheduled: Option<Instant>,
}

impl PresenceThrottle {
    fn changed(&mut self, now: Instant, counts: (usize, usize), seats: usize) -> Presence {
        self.decide(now, counts, seats)
    }

    fn due(&mut self, now: Instant, counts: (usize, usize), seats: usize) -> Presence {
        self.scheduled = None;
        self.decide(now, counts, seats)
    }

    /// A frame now when the counts are new and their window since the last
    /// frame has passed; a check at its end when it has not (unless one as
    /// early is due already); nothing when nothing is new. The window is
    /// [`PRESENCE_EVERY`] when players or seats changed, and
    /// [`SPECTATORS_EVERY`] when only the spectators did: anyone holding a
    /// public session's spectator token can come and go, and each frame is
    /// journalled for good.
    fn decide(&mut self, now: Instant, counts: (usize, usize), seats: usize) -> Presence {
        let (players, spectators) = counts;
        let Some((at, p, s, c)) = self.last else {
            return self.send(now, counts, seats);
        };
        if (p, s, c) == (players, spectators, seats) {
            return Presence::Nothing;
        }
        let window = if (p, c) == (players, seats) {
            SPECTATORS_EVERY
        } else {
            PRESENCE_EVERY
        };
        let when = at + window;
        if now >= when {
            return self.send(now, counts, seats);
        }
        if self.scheduled.is_some_and(|t| t <= when) {
            return Presence::Nothing;
        }
        self.scheduled = Some(when);
        Presence::At(when)
    }

    fn send(
        &mut self,
        now: Instant,
        (players, spectators): (usize, usize),
        seats: usize,
    ) -> Presence {
        self.last = Some((now, players, spectators, seats));
        Presence::Now {
            players,
            spectators,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use actix::{Actor, AsyncContext, Context, Handler};

    use super::*;

    /// One step of a presence run, `ms` after the start.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// Connections came or went; the counts are now these.
        Changed(u64, (usize, usize)),
        /// The check a `Presence::At` asked for, with the counts then.
        Due(u64, (usize, usize)),
    }

    /// The answer a step should get; `At` is in ms after the start.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Want {
        Now(usize, usize),
        At(u64),
        Nothing,
    }

    #[test]
    fn presence_goes_out_at_once_after_a_quiet_spell_and_once_per_window() {
        use Step::{Changed, Due};
        use Want::{At, Nothing, Now};
        let window = PRESENCE_EVERY.as_millis() as u64;
        let spectators = SPECTATORS_EVERY.as_millis() as u64;
        let cases: &[(&str, &[(Step, Want)])] = &[
            ("the first change", &[(Changed(0, (1, 0)), Now(1, 0))]),
            (
                "the first change, even to nobody",
                &[(Changed(0, (0, 0)), Now(0, 0))],
            ),
            (
                "a change after a quiet spell",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(1000, (2, 1)), Now(2, 1)),
                ],
            ),
            (
                "spectators alone wait for their longer window",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(1000, (1, 1)), At(spectators)),
                    (Changed(2000, (1, 2)), Nothing),
                    (Due(spectators, (1, 2)), Now(1, 2)),
                ],
            ),
            (
                "spectators after a quiet spell go out at once",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(spectators + 1, (1, 1)), Now(1, 1)),
                ],
            ),
            (
                "a spectator coming and going in a loop costs a frame per window",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(100, (1, 1)), At(spectators)),
                    (Changed(200, (1, 0)), Nothing),
                    (Changed(300, (1, 1)), Nothing),
                    (Due(spectators, (1, 1)), Now(1, 1)),
                    (Changed(spectators + 100, (1, 0)), At(2 * spectators)),
                ],
            ),
            (
                "a player does not wait behind the spectators' window",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(1000, (1, 1)), At(spectators)),
                    (Changed(1100, (2, 1)), Now(2, 1)),
                    (Due(spectators, (2, 1)), Nothing),
                ],
            ),
            (
                "a player within the window moves the spectators' check earlier",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(50, (1, 1)), At(spectators)),
                    (Changed(100, (2, 1)), At(window)),
                    (Due(window, (2, 1)), Now(2, 1)),
                    (Due(spectators, (2, 1)), Nothing),
                ],
            ),
            (
                "a change just as the window ends",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(window, (2, 0)), Now(2, 0)),
                ],
            ),
            (
                "a change within the window waits for its end",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(100, (2, 0)), At(window)),
                    (Due(window, (2, 0)), Now(2, 0)),
                ],
            ),
            (
                "a change just before the window ends",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(window - 1, (2, 0)), At(window)),
                    (Due(window, (2, 0)), Now(2, 0)),
                ],
            ),
            (
                "several changes in the window give one frame",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(50, (2, 0)), At(window)),
                    (Changed(100, (3, 0)), Nothing),
                    (Changed(200, (3, 1)), Nothing),
                    (Due(window, (3, 1)), Now(3, 1)),
                ],
            ),
            (
                "changes in the window that cancel out give none",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(10, (2, 0)), At(window)),
                    (Changed(20, (1, 0)), Nothing),
                    (Due(window, (1, 0)), Nothing),
                ],
            ),
            (
                "no change, nothing",
                &[
                    (Changed(0, (2, 3)), Now(2, 3)),
                    (Changed(500, (2, 3)), Nothing),
                    (Changed(5000, (2, 3)), Nothing),
                ],
            ),
            (
                "the window runs from the last frame, not the last change",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(100, (2, 0)), At(window)),
                    (Due(window, (2, 0)), Now(2, 0)),
                    (Changed(window + 50, (3, 0)), At(2 * window)),
                    (Due(2 * window, (3, 0)), Now(3, 0)),
                ],
            ),
            (
                "a change with no new counts does not restart the window",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(window + 100, (1, 0)), Nothing),
                    (Changed(window + 150, (2, 0)), Now(2, 0)),
                ],
            ),
            (
                "a due check with nothing new ends the wait",
                &[
                    (Changed(0, (1, 0)), Now(1, 0)),
                    (Changed(10, (2, 0)), At(window)),
                    (Due(window, (1, 0)), Nothing),
                    (Changed(window + 10, (2, 0)), Now(2, 0)),
                ],
            ),
        ];
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        for (name, steps) in cases {
            let mut throttle = PresenceThrottle::default();
            for (i, (step, want)) in steps.iter().enumerate() {
                let got = match *step {
                    Changed(ms, counts) => throttle.changed(at(ms), counts, 0),
                    Due(ms, counts) => throttle.due(at(ms), counts, 0),
                };
                let want = match *want {
                    Now(players, spectators) => Presence::Now {
                        players,
                        spectators,
                    },
                    At(ms) => Presence::At(at(ms)),
                    Nothing => Presence::Nothing,
                };
                assert_eq!(got, want, "{name}: step {i} {step:?}");
            }
        }
    }

    /// A connection's mailbox: keeps what it is sent, and takes its bytes
    /// from the outbox as a connection does.
    struct Sink(Arc<Mutex<Vec<String>>>, Arc<Outbox>);

    impl Actor for Sink {
        type Context = Context<Self>;
    }

    impl Handler<Outbound> for Sink {
        type Result = ();

        fn handle(&mut self, msg: Outbound, _: &mut Self::Context) {
            self.1.taken(msg.bytes());
            let got = match msg {
                Outbound::Frame(bytes) => bytes.to_string(),
                Outbound::Frames(frames) => frames.join("+"),
                Outbound::Wire(wire) => {
                    let texts = wire_texts(&wire.bytes);
                    assert_eq!(texts.len(), wire.frames, "the frames it says");
                    assert_eq!(wire.text, texts.iter().map(String::len).sum::<usize>());
                    format!("wire {}", texts.join("+"))
                }
                Outbound::Close { code, .. } => format!("close {code}"),
            };
            self.0.lock().expect("sink lock").push(got);
        }
    }

    /// The texts of text frames framed for the wire, as a client reads them.
    fn wire_texts(bytes: &[u8]) -> Vec<String> {
        crate::http::wsframe::unmasked_frames(bytes)
            .into_iter()
            .map(|(opcode, payload)| {
                assert_eq!(opcode, 0x1, "a text frame");
                String::from_utf8(payload).expect("UTF-8")
            })
            .collect()
    }

    /// A running connection with room for `capacity` queued messages, with
    /// what it received and its outbox.
    struct Conn {
        got: Arc<Mutex<Vec<String>>>,
        outbox: Arc<Outbox>,
    }

    impl Conn {
        fn got(&self) -> Vec<String> {
            self.got.lock().expect("sink lock").clone()
        }

        fn overflowed(&self) -> bool {
            self.outbox.overflowed()
        }
    }

    fn connect(fanout: &mut Fanout, conn_id: u64, role: ConnRole, capacity: usize) -> Conn {
        connect_bounded(fanout, conn_id, role, capacity, usize::MAX)
    }

    /// [`connect`] with an outbox of `bytes`.
    fn connect_bounded(
        fanout: &mut Fanout,
        conn_id: u64,
        role: ConnRole,
        capacity: usize,
        bytes: usize,
    ) -> Conn {
        let got = Arc::new(Mutex::new(Vec::new()));
        let outbox = Arc::new(Outbox::new(bytes));
        let (sink, taker) = (Arc::clone(&got), Arc::clone(&outbox));
        let addr = Sink::create(move |ctx| {
            ctx.set_mailbox_capacity(capacity);
            Sink(sink, taker)
        });
        fanout.subscribe(
            conn_id,
            Subscriber {
                role,
                seat: None,
                sink: super::Sink::Mailbox(addr.recipient()),
                outbox: Arc::clone(&outbox),
            },
        );
        Conn { got, outbox }
    }

    /// A connection that has stopped: its mailbox is closed.
    fn connect_closed(fanout: &mut Fanout, conn_id: u64) {
        let ctx = Context::<Sink>::new();
        let recipient = ctx.address().recipient();
        drop(ctx);
        fanout.subscribe(
            conn_id,
            Subscriber {
                role: ConnRole::Player,
                seat: None,
                sink: super::Sink::Mailbox(recipient),
                outbox: Arc::new(Outbox::new(usize::MAX)),
            },
        );
    }

    /// Lets the connections' actors read their mailboxes.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[actix::test]
    async fn counts_are_by_role() {
        use ConnRole::{Player, Spectator};
        let cases: &[(&str, &[ConnRole], (usize, usize))] = &[
            ("nobody", &[], (0, 0)),
            ("one player", &[Player], (1, 0)),
            ("one spectator", &[Spectator], (0, 1)),
            (
                "a mix",
                &[Player, Spectator, Spectator, Player, Spectator],
                (2, 3),
            ),
        ];
        for (name, roles, want) in cases {
            let mut fanout = Fanout::default();
            let _conns: Vec<Conn> = roles
                .iter()
                .enumerate()
                .map(|(i, role)| connect(&mut fanout, i as u64, *role, 16))
                .collect();
            assert_eq!(fanout.connection_counts(), *want, "{name}");
            assert_eq!(fanout.is_empty(), roles.is_empty(), "{name}");
        }

        let mut fanout = Fanout::default();
        let _a = connect(&mut fanout, 1, Player, 16);
        let _b = connect(&mut fanout, 2, Spectator, 16);
        // The same id again replaces the connection, it is not a second one.
        let _c = connect(&mut fanout, 2, Player, 16);
        assert_eq!(fanout.connection_counts(), (2, 0));
        assert!(fanout.unsubscribe(1));
        assert!(!fanout.unsubscribe(1), "already gone");
        assert_eq!(fanout.connection_counts(), (1, 0));
        assert!(fanout.unsubscribe(2));
        assert!(fanout.is_empty());
        assert_eq!(fanout.connection_counts(), (0, 0));
    }

    #[actix::test]
    async fn frames_released_together_go_as_one_message_in_order() {
        let mut fanout = Fanout::default();
        let a = connect(&mut fanout, 1, ConnRole::Player, 16);
        let b = connect(&mut fanout, 2, ConnRole::Spectator, 16);
        let frames = |names: &[&'static str]| -> Vec<ByteString> {
            names.iter().map(|n| ByteString::from_static(n)).collect()
        };
        let delivery = fanout.broadcast_all(frames(&["f1", "f2", "f3"]));
        assert_eq!((delivery.sent, delivery.dropped), (6, 0), "frames counted");
        assert_eq!(fanout.broadcast_all(frames(&["f4"])).sent, 2);
        assert_eq!(fanout.broadcast_all(Vec::new()), Delivery::default());
        settle().await;
        for conn in [&a, &b] {
            assert_eq!(conn.got(), ["f1+f2+f3", "f4"]);
        }
    }

    #[actix::test]
    async fn acks_go_ahead_of_the_frames_only_to_their_connections() {
        let mut fanout = Fanout::default();
        let a = connect(&mut fanout, 1, ConnRole::Player, 16);
        let b = connect(&mut fanout, 2, ConnRole::Player, 16);
        let c = connect(&mut fanout, 3, ConnRole::Spectator, 16);
        let s = ByteString::from_static;
        // Two acks for one connection, one for another, in the order given.
        let delivery = fanout.broadcast_after(
            vec![(1, s("ack1")), (2, s("ack2")), (1, s("dup1"))],
            vec![s("f1"), s("f2")],
        );
        assert_eq!(
            (delivery.sent, delivery.dropped),
            (6, 0),
            "story frames counted"
        );
        // Acks with no frames reach only their own connections.
        fanout.broadcast_after(vec![(2, s("ack3"))], Vec::new());
        settle().await;
        assert_eq!(a.got(), ["ack1+dup1+f1+f2"]);
        assert_eq!(b.got(), ["ack2+f1+f2", "ack3"]);
        assert_eq!(c.got(), ["f1+f2"]);
    }

    #[actix::test]
    async fn a_crowd_gets_frames_released_together_framed_once_and_acks_their_own_way() {
        let mut fanout = Fanout::default();
        let conns: Vec<Conn> = (0..WIRE_FROM as u64)
            .map(|i| connect(&mut fanout, i, ConnRole::Spectator, 16))
            .collect();
        let s = ByteString::from_static;
        let delivery = fanout.broadcast_after(vec![(0, s("ack"))], vec![s("f1"), s("f2")]);
        assert_eq!(delivery.sent, 2 * WIRE_FROM as u64);
        fanout.broadcast_all(vec![s("f3"), s("f4")]);
        // One frame alone is sent as it is.
        fanout.broadcast_all(vec![s("f5")]);
        settle().await;
        assert_eq!(conns[0].got(), ["ack+f1+f2", "wire f3+f4", "f5"]);
        for conn in &conns[1..] {
            assert_eq!(conn.got(), ["wire f1+f2", "wire f3+f4", "f5"]);
        }
        // Below WIRE_FROM connections, frames go as they are.
        fanout.remove(0);
        fanout.broadcast_all(vec![s("f6"), s("f7")]);
        settle().await;
        assert_eq!(conns[1].got().last().map(String::as_str), Some("f6+f7"));
    }

    #[actix::test]
    async fn other_nodes_spectators_count_until_their_reports_run_out() {
        let mut fanout = Fanout::default();
        let now = Instant::now();
        let _a = connect(&mut fanout, 1, ConnRole::Player, 16);
        assert!(fanout.remote_audience("b".into(), 3, now + Duration::from_secs(30)));
        assert!(fanout.remote_audience("c".into(), 2, now + Duration::from_secs(10)));
        assert_eq!(fanout.connection_counts(), (1, 5));
        // A new report replaces the node's last one.
        assert!(fanout.remote_audience("b".into(), 1, now + Duration::from_secs(30)));
        assert_eq!(fanout.connection_counts(), (1, 3));
        // C stopped reporting: its count goes once its report runs out.
        assert!(!fanout.expire_remote(now + Duration::from_secs(5)));
        assert!(fanout.expire_remote(now + Duration::from_secs(10)));
        assert_eq!(fanout.connection_counts(), (1, 1));
        // Remote spectators keep the session from being idle; a report of
        // none forgets the node.
        assert!(fanout.unsubscribe(1));
        assert!(!fanout.is_empty());
        assert!(fanout.remote_audience("b".into(), 0, now));
        assert!(fanout.is_empty());
        // The nodes counted are bounded.
        for n in 0..MAX_REMOTE_AUDIENCES {
            assert!(fanout.remote_audience(n.to_string().into(), 1, now + Duration::from_secs(30)));
        }
        assert!(!fanout.remote_audience("one more".into(), 1, now + Duration::from_secs(30)));
        assert!(fanout.remote_audience("0".into(), 2, now + Duration::from_secs(30)));
        assert_eq!(fanout.connection_counts().1, MAX_REMOTE_AUDIENCES + 1);
    }

    #[actix::test]
    async fn presence_reads_the_counts_of_the_subscribers() {
        let mut fanout = Fanout::default();
        let start = Instant::now();
        let _a = connect(&mut fanout, 1, ConnRole::Player, 16);
        let _b = connect(&mut fanout, 2, ConnRole::Spectator, 16);
        assert_eq!(
            fanout.presence_changed(start),
            Presence::Now {
                players: 1,
                spectators: 1
            }
        );
        // A spectator leaving waits for the spectators' window.
        fanout.unsubscribe(2);
        let end = start + SPECTATORS_EVERY;
        assert_eq!(
            fanout.presence_changed(start + Duration::from_millis(1)),
            Presence::At(end)
        );
        assert_eq!(
            fanout.presence_due(end),
            Presence::Now {
                players: 1,
                spectators: 0
            }
        );
    }

    #[test]
    fn only_presence_now_is_a_frame() {
        let now = Presence::Now {
            players: 2,
            spectators: 1,
        };
        assert!(matches!(
            now.event(Vec::new()),
            Some(StoryEvent::Presence {
                players: 2,
                spectators: 1,
                ..
            })
        ));
        assert!(Presence::At(Instant::now()).event(Vec::new()).is_none());
        assert!(Presence::Nothing.event(Vec::new()).is_none());
    }

    #[actix::test]
    async fn broadcast_drops_a_full_or_closed_connection_and_keeps_the_rest() {
        let mut fanout = Fanout::default();
        let fast = connect(&mut fanout, 1, ConnRole::Player, 16);
        // Room for one message: the second broadcast finds it full.
        let slow = connect(&mut fanout, 2, ConnRole::Spectator, 1);
        connect_closed(&mut fanout, 3);
        let frame = |s: &str| ByteString::from(s.to_owned());

        // Nothing runs between these three: the mailboxes only fill.
        let first = fanout.broadcast(&frame("a"));
        let second = fanout.broadcast(&frame("b"));
        let third = fanout.broadcast(&frame("c"));
        let closed = Delivery {
            sent: 2,
            overflowed: 0,
            dropped: 1,
        };
        assert_eq!(first, closed, "the closed connection is dropped");
        let full = Delivery {
            sent: 1,
            overflowed: 1,
            dropped: 1,
        };
        assert_eq!(second, full, "the full connection is dropped");
        let alone = Delivery {
            sent: 1,
            overflowed: 0,
            dropped: 0,
        };
        assert_eq!(third, alone, "a dropped connection gets nothing more");
        assert_eq!(fanout.connection_counts(), (1, 0));

        settle().await;
        assert_eq!(fast.got(), ["a", "b", "c"], "the fast one gets everything");
        assert!(!fast.overflowed());
        let close = format!("close {CLOSE_OVERFLOW}");
        assert_eq!(
            slow.got(),
            ["a", close.as_str()],
            "the slow one gets what fit, then one close past its capacity"
        );
        assert!(slow.overflowed(), "the slow one is told it overflowed");
    }

    /// A connection's lane on this thread: keeps what it takes, and leaves
    /// its bytes in the outbox (a socket that takes nothing).
    struct Kept(Arc<Mutex<Vec<String>>>);

    impl super::super::lanes::Lane for Kept {
        fn take(&self, msg: Outbound) {
            let got = match msg {
                Outbound::Frame(bytes) => bytes.to_string(),
                Outbound::Wire(wire) => format!("wire {}", wire_texts(&wire.bytes).join("+")),
                Outbound::Frames(frames) => frames.join("+"),
                Outbound::Close { code, .. } => format!("close {code}"),
            };
            self.0.lock().expect("lane lock").push(got);
        }
    }

    #[actix::test]
    async fn lanes_take_frames_as_they_are_sent_and_a_full_one_its_close_after_them() {
        use super::super::lanes::LaneRef;
        let mut fanout = Fanout::default();
        let mut lanes = Vec::new();
        for conn_id in 1..=8u64 {
            let got = Arc::new(Mutex::new(Vec::new()));
            let lane = LaneRef::register(100 + conn_id, std::rc::Rc::new(Kept(got.clone())));
            // The first has room for 10 bytes, the rest for plenty.
            let outbox = Arc::new(Outbox::new(if conn_id == 1 { 10 } else { 1 << 20 }));
            fanout.subscribe(
                100 + conn_id,
                Subscriber {
                    role: ConnRole::Spectator,
                    seat: None,
                    sink: super::Sink::Lane(lane.clone()),
                    outbox,
                },
            );
            lanes.push((lane, got));
        }
        let frame = |s: &str| ByteString::from(s.to_owned());
        let first = fanout.broadcast_all(vec![frame("aaaa"), frame("bbbb")]);
        assert_eq!((first.sent, first.overflowed), (16, 0));
        // Taken at once, with nothing to wait for: the lanes are here.
        for (_, got) in &lanes {
            assert_eq!(got.lock().unwrap().clone(), ["wire aaaa+bbbb"]);
        }
        let second = fanout.broadcast(&frame("ccc"));
        assert_eq!((second.overflowed, second.dropped), (1, 1), "past 10 bytes");
        let close = format!("close {CLOSE_OVERFLOW}");
        assert_eq!(
            lanes[0].1.lock().unwrap().clone(),
            ["wire aaaa+bbbb", close.as_str()]
        );
        assert_eq!(
            lanes[1].1.lock().unwrap().clone(),
            ["wire aaaa+bbbb", "ccc"]
        );
        assert_eq!(fanout.connection_counts(), (0, 7));
        fanout.close_all(1001, "bye");
        assert_eq!(
            lanes[7].1.lock().unwrap().clone(),
            ["wire aaaa+bbbb", "ccc", "close 1001"]
        );
        for (lane, _) in lanes {
            lane.unregister();
        }
    }

    #[actix::test]
    async fn a_connection_whose_queued_bytes_pass_its_bound_is_dropped() {
        let mut fanout = Fanout::default();
        // Room for many messages but 10 bytes: the bound is the bytes.
        let slow = connect_bounded(&mut fanout, 1, ConnRole::Spectator, 64, 10);
        let fast = connect(&mut fanout, 2, ConnRole::Player, 64);
        let frame = |s: &str| ByteString::from(s.to_owned());
        // Nothing runs between these: the bytes only add up.
        let first = fanout.broadcast(&frame("aaaa"));
        assert_eq!(slow.outbox.queued(), 4);
        let second = fanout.broadcast(&frame("bbbbbb"));
        assert_eq!(slow.outbox.queued(), 10, "exactly the bound still fits");
        let third = fanout.broadcast(&frame("c"));
        assert_eq!((first.overflowed, second.overflowed), (0, 0));
        assert_eq!((third.overflowed, third.dropped), (1, 1), "one byte over");
        assert!(slow.overflowed());
        assert_eq!(fanout.connection_counts(), (1, 0));
        settle().await;
        let close = format!("close {CLOSE_OVERFLOW}");
        assert_eq!(slow.got(), ["aaaa", "bbbbbb", close.as_str()]);
        assert_eq!(slow.outbox.queued(), 0, "all it was sent was taken");
        assert_eq!(fast.got(), ["aaaa", "bbbbbb", "c"]);
        assert_eq!(fast.outbox.queued(), 0);

        // A message larger than the bound reaches a connection that has
        // taken everything before it, and then nothing more fits.
        let mut fanout = Fanout::default();
        let big = connect_bounded(&mut fanout, 1, ConnRole::Player, 64, 4);
        assert_eq!(fanout.broadcast(&frame("0123456789")).overflowed, 0);
        assert_eq!(fanout.broadcast(&frame("x")).overflowed, 1);
        settle().await;
        let close = format!("close {CLOSE_OVERFLOW}");
        assert_eq!(big.got(), ["0123456789", close.as_str()]);

        // Frames sent together count together; acks count past the bound.
        let mut fanout = Fanout::default();
        let c = connect_bounded(&mut fanout, 1, ConnRole::Player, 64, 100);
        fanout.broadcast_all(vec![frame("ab"), frame("cde")]);
        assert!(fanout.send_to(1, Outbound::Frame(frame("ack"))));
        assert_eq!(c.outbox.queued(), 8);
        settle().await;
        assert_eq!(c.outbox.queued(), 0);
    }

    #[test]
    fn an_outbox_counts_what_is_offered_and_taken() {
        let outbox = Outbox::new(10);
        assert!(outbox.offer(6));
        assert!(!outbox.offer(5), "past the bound");
        assert_eq!(outbox.queued(), 6, "a refused offer adds nothing");
        assert!(outbox.offer(4));
        outbox.taken(7);
        assert_eq!(outbox.queued(), 3);
        outbox.force(20);
        assert_eq!(outbox.queued(), 23, "forced past the bound");
        outbox.taken(100);
        assert_eq!(outbox.queued(), 0, "never below nothing");
        assert!(outbox.offer(1000), "alone, anything fits");
        assert!(!outbox.overflowed());
        outbox.overflow();
        assert!(outbox.overflowed());
    }

    #[actix::test]
    async fn close_all_and_send_to() {
        let mut fanout = Fanout::default();
        let a = connect(&mut fanout, 1, ConnRole::Player, 1);
        let b = connect(&mut fanout, 2, ConnRole::Spectator, 1);
        let ack = || Outbound::Frame(ByteString::from_static("ack"));
        assert!(fanout.send_to(1, ack()));
        // Queued even past the capacity, like the close on overflow.
        assert!(fanout.send_to(1, ack()));
        assert!(!fanout.send_to(9, ack()), "no such connection");
        fanout.close_all(1011, "stopping");
        assert!(fanout.is_empty());
        assert_eq!(fanout.connection_counts(), (0, 0));
        let _c = connect(&mut fanout, 3, ConnRole::Player, 1);
        assert_eq!(fanout.connection_counts(), (1, 0), "counted afresh");
        fanout.close_all(1011, "stopping");
        assert_eq!(
            fanout.broadcast(&ByteString::from_static("late")),
            Delivery::default()
        );
        settle().await;
        assert_eq!(a.got(), ["ack", "ack", "close 1011"]);
        assert_eq!(b.got(), ["close 1011"]);
        assert!(!a.overflowed() && !b.overflowed());
    }
}
