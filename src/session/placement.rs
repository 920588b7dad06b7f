//! Which thread a session actor (or a tail) runs on.
//!
//! By default sessions run on the HTTP workers' own threads, round robin:
//! a frame then goes from a session to the connections on its thread with
//! no wake-up of another thread, and a node has one thread per core
//! instead of two (half of them idle while the other half works, and a
//! context switch at every hop between them). `QUESTD_SESSION_THREADS`
//! gives sessions threads of their own instead.
//!
//! A connection lands on whichever worker accepted it. A player's is then
//! moved to its session's thread ([`Home`], `http::websocket::move_to`),
//! so its chats and the frames sent back never wake another thread;
//! spectators stay where they were accepted, so a crowd of them is spread
//! over the workers.
//!
//! Each HTTP worker registers its arbiter when it starts. An arbiter that
//! has stopped (a worker restarted after a panic) is dropped the next time
//! a session is placed. Until a worker has started, actors start on the
//! caller's arbiter.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;

use actix::{Actor, Addr, Arbiter, ArbiterHandle, Context};

/// The arbiters actors are placed on, shared by the hub, the tails and the
/// HTTP workers that register themselves.
#[derive(Clone, Default)]
pub struct Placement(Arc<Mutex<Arbiters>>);

#[derive(Default)]
struct Arbiters {
    /// Each with the thread it runs: a worker that registers again (its
    /// app factory called once more) replaces its own entry.
    all: Vec<(ThreadId, ArbiterHandle)>,
    next: usize,
}

impl Placement {
    /// Arbiters of their own, one thread each; answers their handles for
    /// stopping them with the server.
    pub fn own_threads(threads: usize) -> (Self, Vec<ArbiterHandle>) {
        let placement = Self::default();
        let mut handles = Vec::with_capacity(threads);
        for _ in 0..threads {
            let arbiter = Arbiter::new();
            let handle = arbiter.handle();
            // Each arbiter has its own thread; an id of its own keeps the
            // entries apart (registering from here would give this one).
            let (tx, rx) = std::sync::mpsc::channel();
            arbiter.spawn_fn(move || {
                let _ = tx.send(std::thread::current().id());
            });
            if let Ok(id) = rx.recv() {
                placement.lock().all.push((id, handle.clone()));
            }
            handles.push(handle);
        }
        (placement, handles)
    }

    /// Registers the current thread's arbiter (an HTTP worker's).
    pub fn register_current(&self) {
        let id = std::thread::current().id();
        let handle = Arbiter::current();
        let mut arbiters = self.lock();
        match arbiters.all.iter_mut().find(|(t, _)| *t == id) {
            Some(entry) => entry.1 = handle,
            None => arbiters.all.push((id, handle)),
        }
    }

    /// Starts an actor on the next live arbiter, round robin, or on the
    /// current one if none is registered yet.
    pub fn start<A, F>(&self, make: F) -> Addr<A>
    where
        A: Actor<Context = Context<A>>,
        F: FnOnce(&mut Context<A>) -> A + Send + 'static,
    {
        self.start_placed(make).0
    }

    /// [`Placement::start`], answering where the actor runs too.
    pub fn start_placed<A, F>(&self, make: F) -> (Addr<A>, Home)
    where
        A: Actor<Context = Context<A>>,
        F: FnOnce(&mut Context<A>) -> A + Send + 'static,
    {
        match self.next() {
            Some((thread, arbiter)) => {
                let addr = A::start_in_arbiter(&arbiter, make);
                (addr, Home { thread, arbiter })
            }
            None => (A::create(make), Home::current()),
        }
    }

    /// The next arbiter that still runs; stopped ones are forgotten.
    fn next(&self) -> Option<(ThreadId, ArbiterHandle)> {
        let mut arbiters = self.lock();
        while !arbiters.all.is_empty() {
            let i = arbiters.next % arbiters.all.len();
            let (thread, handle) = arbiters.all[i].clone();
            // A stopped arbiter refuses work: spawning nothing tells.
            if handle.spawn(std::future::ready(())) {
                arbiters.next = arbiters.next.wrapping_add(1);
                return Some((thread, handle));
            }
            arbiters.all.remove(i);
        }
        None
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arbiters> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The thread an actor was placed on, and its arbiter.
#[derive(Clone)]
pub struct Home {
    thread: ThreadId,
    arbiter: ArbiterHandle,
}

impl Home {
    /// The current thread's arbiter.
    pub fn current() -> Self {
        Self {
            thread: std::thread::current().id(),
            arbiter: Arbiter::current(),
        }
    }

    /// The thread.
    pub fn thread(&self) -> ThreadId {
        self.thread
    }

    /// Whether this is the current thread.
    pub fn is_here(&self) -> bool {
        self.thread == std::thread::current().id()
    }

    /// Runs `f` on this arbiter's thread; false if the arbiter has
    /// stopped (`f` is dropped unrun).
    pub fn run(&self, f: impl FnOnce() + Send + 'static) -> bool {
        self.arbiter.spawn_fn(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    struct Where(std::sync::mpsc::Sender<ThreadId>);
    impl Actor for Where {
        type Context = Context<Self>;
        fn started(&mut self, _: &mut Self::Context) {
            let _ = self.0.send(std::thread::current().id());
        }
    }

    fn placed_on(p: &Placement) -> ThreadId {
        let (tx, rx) = std::sync::mpsc::channel();
        p.start(move |_| Where(tx));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the actor started")
    }

    #[actix::test]
    async fn actors_go_round_robin_and_skip_a_stopped_arbiter() {
        let (p, handles) = Placement::own_threads(3);
        let a = placed_on(&p);
        let b = placed_on(&p);
        let c = placed_on(&p);
        assert!(a != b && b != c && a != c, "three threads");
        assert_eq!(placed_on(&p), a, "round robin");
        handles[1].stop();
        // Once its thread is gone, the stopped arbiter is passed over.
        for _ in 0..1000 {
            if !handles[1].spawn(std::future::ready(())) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(placed_on(&p));
        }
        assert!(!seen.contains(&b), "no actor on the stopped arbiter");
        assert!(seen.contains(&a) && seen.contains(&c));
        for h in handles {
            h.stop();
        }
    }

    #[actix::test]
    async fn an_actors_home_runs_work_on_its_thread_until_it_stops() {
        let (p, handles) = Placement::own_threads(2);
        let (tx, rx) = std::sync::mpsc::channel();
        let (_, home) = p.start_placed(move |_| Where(tx));
        let actor = rx.recv_timeout(Duration::from_secs(10)).expect("started");
        assert!(!home.is_here(), "placed on a thread of its own");
        let (tx, rx) = std::sync::mpsc::channel();
        let there = home.clone();
        assert!(home.run(move || {
            let _ = tx.send((std::thread::current().id(), there.is_here()));
        }));
        let (ran, here) = rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        assert_eq!(ran, actor, "the work ran where the actor runs");
        assert!(here, "and there the home is here");
        for h in &handles {
            h.stop();
        }
        for _ in 0..1000 {
            if !home.run(|| {}) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("a stopped arbiter still took work");
    }

    #[actix::test]
    async fn with_nothing_registered_an_actor_starts_here() {
        let p = Placement::default();
        assert_eq!(placed_on_async(&p).await, std::thread::current().id());
    }

    async fn placed_on_async(p: &Placement) -> ThreadId {
        let (tx, rx) = std::sync::mpsc::channel();
        p.start(move |_| Where(tx));
        // Started on this thread: it runs once this task yields.
        for _ in 0..1000 {
            if let Ok(id) = rx.try_recv() {
                return id;
            }
            tokio::task::yield_now().await;
        }
        panic!("the actor did not start on this thread")
    }

    #[actix::test]
    async fn a_worker_registering_twice_is_one_entry() {
        let p = Placement::default();
        p.register_current();
        p.register_current();
        assert_eq!(p.lock().all.len(), 1);
    }
}
