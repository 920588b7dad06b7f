//! The session actor: a thin shell around the session's [`Core`]. It hands
//! the messages a session answers to the core and carries out the
//! [`Command`]s the core answers with, in order: rows to the writer, frames
//! to the connections ([`Fanout`], whose sockets and presence timer are the
//! actor's), timers, model streams, inbox and snapshot writes, stopping.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;

use super::core::{AfterSnapshot, Command, Core, CoreDeps};
use super::fanout::Fanout;
use super::messages::{
    AwaitDurable, AwaitTurnEnd, CallTool, ChatAccepted, ChatRefused, CloseSession, CreateInvite,
    Decide, DecisionTaken, DirectCallDone, Drain, GetSeats, GetSnapshot, HostPower, InviteMade,
    JoinParty, Joined, LeaseLost, RemoteAudience, Say, SeatGiven, SubmitChat, Subscribe,
    Unsubscribe, UseHostPower,
};
use super::model::{self, ModelMsg};
use super::replay::{self, Restored};
use super::types::{
    AUDIENCE_REFRESH, CLOSE_SEAT_KICKED, HubLink, KICKED, LEFT, Outbound, SessionDeps, Unregister,
};
use crate::llm::ModelRequest;
use crate::protocol::TurnEnd;
use crate::storage::{DurableSink, Epoch, SessionMeta, SessionWrite, StorageError};

/// The writer's notice: everything up to this seq is durable (or it failed).
#[derive(Message)]
#[rtype(result = "()")]
struct Durable(Result<u64, StorageError>);

/// Hands the rows of the step just over to the writer.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

/// Owns one session. Started on one of the session arbiters by the hub; stops
/// when idle (once what it wrote is durable) or when storage fails.
pub struct SessionActor {
    deps: Arc<SessionDeps>,
    /// The hub that started this actor; told about stats and unloading.
    hub: HubLink<Self>,
    /// The state and every decision about it.
    core: Core,
    /// The connections, what they are sent, and when presence goes out.
    fanout: Fanout,
    /// Hands durability notices back to this actor; set in `started`.
    sink: Option<DurableSink>,
    /// The claim this node runs the session under.
    epoch: Epoch,
}

impl SessionActor {
    pub(super) fn new(
        meta: Arc<SessionMeta>,
        deps: Arc<SessionDeps>,
        hub: HubLink<Self>,
        restored: Restored,
    ) -> Self {
        let core_deps = CoreDeps::of(&deps, hub.stats.clone());
        Self {
            epoch: restored.epoch,
            core: Core::new(meta, core_deps, restored),
            deps,
            hub,
            fanout: Fanout::default(),
            sink: None,
        }
    }

    /// Carries out what the core asked for, in order, until it asks nothing.
    fn run(&mut self, ctx: &mut Context<Self>) {
        while let Some(command) = self.core.next_command() {
            self.carry_out(command, ctx);
        }
        self.core.settled();
    }

    fn carry_out(&mut self, command: Command, ctx: &mut Context<Self>) {
        let (store, id, epoch) = (&self.deps.store, self.core.session_id(), self.epoch);
        match command {
            Command::FlushLater => ctx.address().do_send(Flush),
            Command::Write(writes) => self.write(writes),
            Command::Send(batch) => {
                if self.fanout.deliver(batch, &self.deps.metrics) {
                    self.presence_changed(ctx);
                }
            }
            Command::Tell(waiters) => waiters.into_iter().for_each(|waiter| waiter()),
            Command::SendTo(conn_id, ack) => {
                self.fanout.send_to(conn_id, Outbound::Frame(ack));
            }
            Command::Enqueue(chat) => {
                let (done, stored) = oneshot::channel();
                let turn_id = chat.turn_id.as_str().into();
                store.enqueue(chat, epoch, done);
                let stored = actix::fut::wrap_future::<_, Self>(stored);
                ctx.spawn(stored.map(move |res, act, ctx| {
                    match res.unwrap_or(Err(StorageError::WriterGone)) {
                        Ok(()) => act.core.chat_stored(&turn_id),
                        Err(e) => act.core.storage_failed(e),
                    }
                    act.run(ctx);
                }));
            }
            Command::Dequeue(turn_id) => store.dequeue(id, &turn_id, epoch),
            Command::Snapshot(write, then) => {
                let (done, rx) = oneshot::channel();
                match write {
                    Ok(write) => store.snapshot(id, epoch, write, Some(done)),
                    Err(e) => drop(done.send(Err(e))),
                }
                // The last snapshot holds every other message until it is
                // written: the session stops right after.
                let last = matches!(then, AfterSnapshot::Leave);
                let durable = actix::fut::wrap_future::<_, Self>(rx).map(|res, act, ctx| {
                    act.core.snapshot_stored(then, matches!(res, Ok(Ok(()))));
                    act.run(ctx);
                });
                if last {
                    ctx.wait(durable);
                } else {
                    ctx.spawn(durable);
                }
            }
            Command::Deadline(turn_id, after) => {
                let id = turn_id.clone();
                let timer = ctx.run_later(after, move |act, ctx| {
                    act.core.deadline(&id);
                    act.run(ctx);
                });
                self.core.deadline_set(&turn_id, timer);
            }
            Command::RoundAt(after) => {
                ctx.run_later(after, |act, ctx| {
                    act.core.round_deadline();
                    act.run(ctx);
                });
            }
            Command::TimerAt(after) => {
                ctx.run_later(after, |act, ctx| {
                    act.core.timer_wake();
                    act.run(ctx);
                });
            }
            Command::AskModel(tag, request) => self.ask_model(tag, request, ctx),
            Command::Cancel(handles) => handles.into_iter().for_each(|h| {
                ctx.cancel_future(h);
            }),
            Command::PresenceAt(after) => {
                ctx.run_later(after, |act, ctx| {
                    let presence = act.fanout.presence_due(Instant::now());
                    act.core.presence(presence, Instant::now());
                    act.run(ctx);
                });
            }
            Command::CloseAll(code, reason) => self.fanout.close_all(code, reason),
            Command::Leave => self.leave(ctx),
            Command::LeaveWhenWritten => {
                let store = self.deps.store.clone();
                let written = async move { store.settled().await };
                ctx.wait(
                    actix::fut::wrap_future::<_, Self>(written).map(|(), act, ctx| act.leave(ctx)),
                );
            }
        }
    }

    /// Leaves the hub and stops.
    fn leave(&mut self, ctx: &mut Context<Self>) {
        let (session_id, addr) = (self.core.session_id().clone(), ctx.address());
        self.hub.unregister.do_send(Unregister { session_id, addr });
        ctx.stop();
    }

    /// Hands rows to the writer, in the order they were made.
    fn write(&mut self, writes: Vec<SessionWrite>) {
        if let Some(sink) = &self.sink {
            self.deps.store.write_all(writes, sink);
        }
    }

    /// Asks the model: the events there at once go to the core now, the
    /// rest come back as [`ModelMsg`]s.
    fn ask_model(&mut self, tag: u64, request: ModelRequest, ctx: &mut Context<Self>) {
        let mut events = crate::llm::ask(&*self.deps.provider, request);
        if self.deps.provider.answers_at_once() && !self.core.read_ready(tag, &mut events) {
            return;
        }
        let stream = ctx.add_stream(model::messages(tag, events));
        self.core.model_streaming(tag, stream);
    }

    /// Connections came or went: the hub's counts change, and presence
    /// goes out now or later ([`Core::presence`]).
    fn presence_changed(&mut self, ctx: &mut Context<Self>) {
        let (players, spectators) = self.fanout.connection_counts();
        let stats = &self.hub.stats;
        stats.players.store(players, Ordering::Relaxed);
        stats.spectators.store(spectators, Ordering::Relaxed);
        self.core.seats_online(self.fanout.online_seats());
        let now = Instant::now();
        self.core.presence(self.fanout.presence_changed(now), now);
        self.run(ctx);
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let addr = ctx.address();
        self.sink = Some(DurableSink::new(self.epoch, move |r| {
            addr.do_send(Durable(r))
        }));
        self.core.start();
        self.run(ctx);
        let every = (self.deps.limits.idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(10));
        ctx.run_interval(every, |act, ctx| {
            if act.core.lifecycle().stopping() {
                return;
            }
            act.core.checked();
            if act.fanout.expire_remote(Instant::now()) {
                act.presence_changed(ctx);
            }
            if act.fanout.is_empty() && act.core.idle() {
                act.core.unload();
                act.run(ctx);
            }
        });
        tracing::debug!(session_id = %self.core.session_id(), seq = self.core.released(), "session started");
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        tracing::debug!(session_id = %self.core.session_id(), "session stopped");
    }
}

impl Handler<Flush> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Flush, _: &mut Self::Context) {
        let writes = self.core.take_writes();
        self.write(writes);
    }
}

impl Handler<Durable> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Durable, ctx: &mut Self::Context) {
        match msg.0 {
            Ok(up_to) => {
                // What is released goes out before the next work starts.
                self.core.durable(up_to);
                self.run(ctx);
                self.core.advance();
            }
            Err(e) => self.core.storage_failed(e),
        }
        self.run(ctx);
    }
}

impl StreamHandler<ModelMsg> for SessionActor {
    fn handle(&mut self, msg: ModelMsg, ctx: &mut Self::Context) {
        self.core.model_event(msg.tag, msg.event);
        self.run(ctx);
    }

    // Each model call is its own stream; its end must not stop the actor.
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<SubmitChat> for SessionActor {
    type Result = Result<ChatAccepted, ChatRefused>;

    fn handle(&mut self, msg: SubmitChat, ctx: &mut Self::Context) -> Self::Result {
        let accepted = self.core.submit_chat(msg, self.deps.store.refusing());
        self.run(ctx);
        accepted
    }
}

impl Handler<Say> for SessionActor {
    type Result = Result<(), ChatRefused>;

    fn handle(&mut self, msg: Say, ctx: &mut Self::Context) -> Self::Result {
        let said = self
            .core
            .say(&msg.seat_id, &msg.text, msg.request_id.as_ref());
        self.run(ctx);
        said
    }
}

impl Handler<CallTool> for SessionActor {
    type Result = ResponseFuture<Result<DirectCallDone, ChatRefused>>;

    fn handle(&mut self, msg: CallTool, ctx: &mut Self::Context) -> Self::Result {
        let taken = self.core.call_tool(msg, self.deps.store.refusing());
        self.run(ctx);
        Box::pin(async move { taken?.await.map_err(|_| ChatRefused::call_lost()) })
    }
}

/// What a party change's caller waits for: the answer once durable, or
/// the session stopped first.
fn party_answer<T: Send + 'static>(
    taken: Result<oneshot::Receiver<T>, ChatRefused>,
) -> ResponseFuture<Result<T, ChatRefused>> {
    Box::pin(async move { taken?.await.map_err(|_| ChatRefused::call_lost()) })
}

impl Handler<Decide> for SessionActor {
    type Result = ResponseFuture<Result<DecisionTaken, ChatRefused>>;

    fn handle(&mut self, msg: Decide, ctx: &mut Self::Context) -> Self::Result {
        let taken = self.core.decide(msg, self.deps.store.refusing());
        self.run(ctx);
        party_answer(taken)
    }
}

impl Handler<CreateInvite> for SessionActor {
    type Result = ResponseFuture<Result<InviteMade, ChatRefused>>;

    fn handle(&mut self, msg: CreateInvite, ctx: &mut Self::Context) -> Self::Result {
        let taken = self.core.create_invite(msg, self.deps.store.refusing());
        self.run(ctx);
        party_answer(taken)
    }
}

impl Handler<JoinParty> for SessionActor {
    type Result = ResponseFuture<Result<SeatGiven, ChatRefused>>;

    fn handle(&mut self, msg: JoinParty, ctx: &mut Self::Context) -> Self::Result {
        let taken = self.core.join_party(msg, self.deps.store.refusing());
        self.run(ctx);
        party_answer(taken)
    }
}

impl Handler<UseHostPower> for SessionActor {
    type Result = ResponseActFuture<Self, Result<(), ChatRefused>>;

    /// A kick or a leave closes the seat's connections once it is durable
    /// (its token is refused from then on).
    fn handle(&mut self, msg: UseHostPower, ctx: &mut Self::Context) -> Self::Result {
        let removed = match &msg.power {
            HostPower::Kick(seat_id) => Some((seat_id.clone(), KICKED)),
            HostPower::Leave(seat_id) => Some((seat_id.clone(), LEFT)),
            _ => None,
        };
        let taken = self.core.host_power(msg, self.deps.store.refusing());
        self.run(ctx);
        Box::pin(
            party_answer(taken)
                .into_actor(self)
                .map(move |answer, act, ctx| {
                    if answer.is_ok()
                        && let Some((seat_id, reason)) = removed
                        && act.fanout.close_seat(&seat_id, CLOSE_SEAT_KICKED, reason)
                    {
                        act.presence_changed(ctx);
                    }
                    answer
                }),
        )
    }
}

impl Handler<AwaitDurable> for SessionActor {
    type Result = ResponseFuture<Result<(), ChatRefused>>;

    fn handle(&mut self, msg: AwaitDurable, _: &mut Self::Context) -> Self::Result {
        let told = self.core.await_durable(msg.seq);
        Box::pin(async move { told.await.map_err(|_| ChatRefused::reloading()) })
    }
}

impl Handler<AwaitTurnEnd> for SessionActor {
    type Result = ResponseFuture<Result<TurnEnd, ChatRefused>>;

    fn handle(&mut self, msg: AwaitTurnEnd, _: &mut Self::Context) -> Self::Result {
        let Some(rx) = self.core.await_turn_end(msg.turn_id.clone()) else {
            let (store, session_id) = (self.deps.store.clone(), self.core.session_id().clone());
            return Box::pin(replay::turn_end(store, session_id, msg.turn_id));
        };
        Box::pin(async move { rx.await.map_err(|_| ChatRefused::turn_lost()) })
    }
}

impl Handler<Subscribe> for SessionActor {
    type Result = ResponseActFuture<Self, Result<Joined, ChatRefused>>;

    /// A connection resuming from a seq the resume ring no longer holds is
    /// served the frames in between from the journal first, then the ring's.
    fn handle(&mut self, msg: Subscribe, ctx: &mut Self::Context) -> Self::Result {
        if let Err(refused) = self.core.may_join() {
            return Box::pin(actix::fut::ready(Err(refused)));
        }
        let Some(range) = self.core.stored_range(msg.last_seq) else {
            let joined = self.join(msg, None, ctx);
            return Box::pin(actix::fut::ready(Ok(joined)));
        };
        let (store, id) = (self.deps.store.clone(), self.core.session_id().clone());
        let read = replay::stored_frames(store, id, range);
        Box::pin(read.into_actor(self).map(move |stored, act, ctx| {
            if act.core.lifecycle().stopping() {
                return Err(ChatRefused::reloading());
            }
            Ok(act.join(msg, stored, ctx))
        }))
    }
}

impl SessionActor {
    /// Adds a connection: its welcome and the frames it missed.
    fn join(
        &mut self,
        msg: Subscribe,
        stored: Option<(u64, Vec<(u64, String)>)>,
        ctx: &mut Context<Self>,
    ) -> Joined {
        let last_seq = msg.last_seq;
        let seat_id = msg.seat_id.clone();
        let role = self.fanout.add(msg);
        // The joining seat is online in its own welcome.
        self.core.seats_online(self.fanout.online_seats());
        let joined = self.core.joined(last_seq, role, seat_id.as_ref(), stored);
        self.presence_changed(ctx);
        joined
    }
}

impl Handler<RemoteAudience> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: RemoteAudience, ctx: &mut Self::Context) {
        let until = Instant::now() + AUDIENCE_REFRESH * 3;
        let fanout = &mut self.fanout;
        if fanout.remote_audience(msg.node_id, msg.spectators, until) {
            self.core.touch();
            self.presence_changed(ctx);
        }
    }
}

impl Handler<Unsubscribe> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Unsubscribe, ctx: &mut Self::Context) {
        if self.fanout.unsubscribe(msg.conn_id) {
            self.core.touch();
            self.presence_changed(ctx);
        }
    }
}

impl Handler<GetSnapshot> for SessionActor {
    type Result = Result<String, ChatRefused>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Self::Context) -> Self::Result {
        self.core.snapshot_body(&self.deps.store.node().id)
    }
}

impl Handler<GetSeats> for SessionActor {
    type Result = Result<String, ChatRefused>;

    fn handle(&mut self, _: GetSeats, _: &mut Self::Context) -> Self::Result {
        self.core.seats_body()
    }
}

impl Handler<Drain> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Drain, ctx: &mut Self::Context) {
        self.core.drain();
        self.run(ctx);
    }
}

impl Handler<CloseSession> for SessionActor {
    type Result = ResponseActFuture<Self, Result<i64, ChatRefused>>;

    /// Refuses new work at once, marks the session closed in storage, and
    /// answers when that is durable; the work already taken (the running
    /// turn, the chats acknowledged behind it) still runs, then every
    /// connection is closed for good and the session unloads, never to load
    /// again. Closing again answers the same time.
    fn handle(&mut self, _: CloseSession, _: &mut Self::Context) -> Self::Result {
        let closed_at = match self.core.close() {
            Ok(at) => at,
            Err(refused) => return Box::pin(actix::fut::ready(Err(refused))),
        };
        let (store, id) = (self.deps.store.clone(), self.core.session_id().clone());
        let write = async move { store.close_session(&id, closed_at).await };
        Box::pin(write.into_actor(self).map(move |stored, act, ctx| {
            let answer = act.core.close_stored(closed_at, stored);
            act.run(ctx);
            answer
        }))
    }
}

impl Handler<LeaseLost> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: LeaseLost, ctx: &mut Self::Context) {
        self.core.storage_failed(StorageError::Fenced);
        self.run(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's actor runs as one allocation: actix's future for it
    /// (the actor, its context and mailbox) inside a tokio task, whose own
    /// parts take 104 bytes more. At 2,048 bytes or under the task takes
    /// mimalloc's 2 KiB size class; past it, the 2.5 KiB one, and every
    /// idle session keeps 512 bytes more (BENCHMARKS.md, "1. Idle
    /// scale"). A field added to the actor or its core that fails this
    /// belongs in a box, or made only when used.
    #[test]
    fn a_session_actor_stays_in_the_allocators_2_kib_class() {
        let task =
            std::mem::size_of::<actix::dev::ContextFut<SessionActor, Context<SessionActor>>>()
                + 104;
        assert!(task <= 2048, "a session's task takes {task} bytes");
    }
}
