//! Lanes: a session's frames written straight into its connections'
//! sockets, one hand-off per thread instead of one message per connection.
//!
//! A connection served on this node's socket layer registers a [`Lane`] on
//! its own thread (`http::ws`) and subscribes with a [`LaneRef`] naming
//! it. When the session (or a tail) sends, a [`Post`] gathers what goes to
//! each thread: the lanes on the sender's own thread take their messages at
//! once, every other thread gets its share in one closure run on its
//! arbiter, which hands each lane its message there. Measured with 10,000
//! spectators of one session: a message, a wake-up and a poll of the
//! connection's actor per connection per commit were about a sixth of the
//! server's CPU (BENCHMARKS.md, "Fan-out").
//!
//! Invariants:
//! - a lane is only ever touched on its own thread (the registry is
//!   thread-local, and only the `Send` [`LaneRef`] leaves it);
//! - what one sender posts to one lane arrives in the order posted: the
//!   sender's own thread takes it at once, and a thread's share is one
//!   closure, run in the order the arbiter got them;
//! - a lane that is gone (its connection stopped) drops what comes; the
//!   session hears of it from the connection's `Unsubscribe`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::thread::ThreadId;

use actix::Recipient;

use super::placement::Home;
use super::types::Outbound;

/// Where a connection's messages go.
#[derive(Clone)]
pub enum Sink {
    /// Straight into its socket, on its own thread.
    Lane(LaneRef),
    /// Its actor's mailbox, bounded: a message that does not fit drops
    /// the connection.
    Mailbox(Recipient<Outbound>),
}

impl Sink {
    /// Sends `msg` whatever the bound (a close, an ack), after everything
    /// `post` holds or took for the connection.
    pub fn force(&self, post: &mut Post, msg: Outbound) {
        match self {
            Self::Lane(lane) => post.push(lane, msg),
            Self::Mailbox(recipient) => recipient.do_send(msg),
        }
    }

    /// [`Sink::force`] alone: a lane takes `msg` at once on its own
    /// thread, else in a closure of its own on its arbiter.
    pub fn force_now(&self, msg: Outbound) {
        let mut post = Post::default();
        self.force(&mut post, msg);
        post.send();
    }
}

/// Where a connection takes its messages on its own thread.
pub trait Lane {
    /// Takes `msg` for the connection, in the order given.
    fn take(&self, msg: Outbound);
}

thread_local! {
    static LANES: RefCell<HashMap<u64, Rc<dyn Lane>>> = RefCell::new(HashMap::new());
}

/// A registered lane, named from any thread.
#[derive(Clone)]
pub struct LaneRef {
    conn_id: u64,
    home: Home,
}

impl LaneRef {
    /// Registers `lane` for connection `conn_id` on this thread, until
    /// [`LaneRef::unregister`] (on this thread).
    pub fn register(conn_id: u64, lane: Rc<dyn Lane>) -> Self {
        LANES.with(|lanes| lanes.borrow_mut().insert(conn_id, lane));
        Self {
            conn_id,
            home: Home::current(),
        }
    }

    /// Forgets the lane: what is posted to it from now on is dropped.
    pub fn unregister(&self) {
        LANES.with(|lanes| lanes.borrow_mut().remove(&self.conn_id));
    }
}

/// Hands `msg` to the lane of `conn_id` on this thread, if there is one.
fn take_here(conn_id: u64, msg: Outbound) {
    let lane = LANES.with(|lanes| lanes.borrow().get(&conn_id).cloned());
    if let Some(lane) = lane {
        lane.take(msg);
    }
}

/// What one send goes to lanes on other threads, a share per thread.
#[derive(Default)]
pub struct Post {
    /// The sender's thread, once asked.
    here: Option<ThreadId>,
    shares: Vec<(Home, Vec<(u64, Outbound)>)>,
}

impl Post {
    /// Hands `msg` to `lane` at once if it is on this thread, else adds it
    /// to its thread's share.
    pub fn push(&mut self, lane: &LaneRef, msg: Outbound) {
        let here = *self.here.get_or_insert_with(|| std::thread::current().id());
        if lane.home.thread() == here {
            return take_here(lane.conn_id, msg);
        }
        match self
            .shares
            .iter_mut()
            .find(|(home, _)| home.thread() == lane.home.thread())
        {
            Some((_, share)) => share.push((lane.conn_id, msg)),
            None => self
                .shares
                .push((lane.home.clone(), vec![(lane.conn_id, msg)])),
        }
    }

    /// Sends every other thread its share. A thread whose arbiter has
    /// stopped has no connections left to take it.
    pub fn send(self) {
        for (home, share) in self.shares {
            home.run(move || {
                for (conn_id, msg) in share {
                    take_here(conn_id, msg);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytestring::ByteString;

    use super::*;

    /// A lane that records what it takes, by connection.
    struct Record {
        conn_id: u64,
        got: Arc<Mutex<Vec<(u64, String)>>>,
    }

    impl Lane for Record {
        fn take(&self, msg: Outbound) {
            let text = match msg {
                Outbound::Frame(f) => f.to_string(),
                Outbound::Close { code, .. } => format!("close {code}"),
                other => format!("{} bytes", other.bytes()),
            };
            self.got.lock().unwrap().push((self.conn_id, text));
        }
    }

    /// Registers a [`Record`] lane for `conn_id` on this thread.
    fn record(conn_id: u64, got: &Arc<Mutex<Vec<(u64, String)>>>) -> LaneRef {
        let got = got.clone();
        LaneRef::register(conn_id, Rc::new(Record { conn_id, got }))
    }

    fn frame(s: &str) -> Outbound {
        Outbound::Frame(ByteString::from(s.to_owned()))
    }

    #[actix::test]
    async fn lanes_here_take_at_once_and_other_threads_in_order_in_one_share() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let here = record(1, &got);
        let other = actix::Arbiter::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let got2 = got.clone();
        other.spawn_fn(move || {
            let refs: Vec<LaneRef> = (2..=3).map(|id| record(id, &got2)).collect();
            let _ = tx.send(refs);
        });
        let there = rx.await.expect("registered there");
        let mut post = Post::default();
        for n in 0..3 {
            post.push(&here, frame(&format!("a{n}")));
            for lane in &there {
                post.push(lane, frame(&format!("a{n}")));
            }
        }
        assert_eq!(post.shares.len(), 1, "one share for the other thread");
        assert_eq!(
            got.lock().unwrap().clone(),
            [(1, "a0".into()), (1, "a1".into()), (1, "a2".into())],
            "the lane here took its frames at once"
        );
        post.send();
        Sink::Lane(there[0].clone()).force_now(Outbound::Close {
            code: 1000,
            reason: "bye",
        });
        // The other thread has run everything sent to it once it answers.
        let (tx, rx) = tokio::sync::oneshot::channel();
        other.spawn_fn(move || {
            let _ = tx.send(());
        });
        rx.await.expect("ran");
        let got = got.lock().unwrap().clone();
        let of = |id: u64| -> Vec<String> {
            got.iter()
                .filter(|(c, _)| *c == id)
                .map(|(_, t)| t.clone())
                .collect()
        };
        assert_eq!(of(2), ["a0", "a1", "a2", "close 1000"]);
        assert_eq!(of(3), ["a0", "a1", "a2"]);
        other.stop();
    }

    #[actix::test]
    async fn a_lane_gone_takes_nothing() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let lane = record(7, &got);
        let sink = Sink::Lane(lane.clone());
        sink.force_now(frame("before"));
        lane.unregister();
        sink.force_now(frame("after"));
        assert_eq!(got.lock().unwrap().clone(), [(7, "before".to_string())]);
    }
}
