//! A WebSocket this node serves, on the TCP socket itself: the writer and
//! the reader under the connection actors (`ws`, `relay`), below actix-web
//! (`upgrade` hands the socket over once the handshake is answered).
//!
//! - **Writes.** What waits to be written is the [`Writer`]'s, which the
//!   connection's actor shares with its lane on the same thread (`ws`):
//!   the session's frames are queued and written through the lane, the
//!   connection's own answers through the actor.
//!   A story frame's text is encoded once by the session and
//!   shared by every connection (`Bytes`); a connection queues only the
//!   few bytes of its frame header beside it and writes header and text
//!   with one `sendmsg` (one `send` when it is one slice, as a crowd's
//!   frames framed once are), every frame released together in the same call:
//!   at most one system call per connection per commit, and no buffer allocated
//!   or copied per write. What the socket does not take waits in the
//!   queue ([`Outgoing`]) until the socket has room; its bytes count in
//!   the connection's `Outbox` until written, which is how the session
//!   sees a slow reader.
//! - **Reads.** The client's frames are read into a buffer that exists
//!   only while a frame is incomplete, so an idle connection holds no
//!   buffer at all, and parsed by `wsframe`.
//! - **Close.** A close frame goes after everything queued before it;
//!   once it is written the socket is shut for writing, and what the
//!   client still sends is read and dropped until it closes (at most
//!   [`CLOSE_GRACE`]), so it gets the close frame rather than a reset. A
//!   connection dropped for falling behind keeps only a frame already
//!   half written, so the client never sees a torn frame.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::Shutdown;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};

use std::time::Duration;

use actix::prelude::*;
use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use futures_util::Stream;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::wsframe::{self, Incoming, MAX_HEAD, ProtocolError, op};
use crate::session::{Outbox, Wire};

/// Frames given to one `sendmsg` at most (two slices each).
const WRITE_BATCH: usize = 32;
/// How long a closing connection may take to write what it has queued
/// before it is dropped anyway.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// What one read asks of the socket.
const READ_CHUNK: usize = 4096;

/// A socket just upgraded: what the connection's actor is started with.
pub struct Upgraded {
    pub io: TcpStream,
    /// Bytes the client sent after its handshake, read with it.
    pub read: BytesMut,
    /// Dropped with the socket: the HTTP connection it came from ends then.
    pub done: oneshot::Sender<()>,
}

/// Starts `start` with `up` on `home`'s thread: the socket leaves this
/// thread's reactor and joins that one's. A socket that cannot move (the
/// arbiter stopped, the reactor refused it) is dropped, which closes the
/// connection: the client reconnects.
pub fn move_to(
    home: &crate::session::Home,
    up: Upgraded,
    start: impl FnOnce(Upgraded) + Send + 'static,
) {
    let Upgraded { io, read, done } = up;
    let io = match io.into_std() {
        Ok(io) => io,
        Err(e) => {
            tracing::warn!(error = %e, "a WebSocket could not leave its thread");
            return;
        }
    };
    let moved = home.run(move || match TcpStream::from_std(io) {
        Ok(io) => start(Upgraded { io, read, done }),
        Err(e) => tracing::warn!(error = %e, "a WebSocket could not join its session's thread"),
    });
    if !moved {
        tracing::warn!("a WebSocket's session thread has stopped");
    }
}

/// One queued frame, its header and its payload (shared), or frames
/// already framed for the wire ([`Outgoing::push_wire`], no header of
/// its own).
struct Item {
    head: [u8; MAX_HEAD],
    head_len: u8,
    body: Bytes,
    /// The bytes of it the connection's `Outbox` counts.
    counted: usize,
    /// How many frames it holds.
    frames: usize,
}

impl Item {
    fn len(&self) -> usize {
        usize::from(self.head_len) + self.body.len()
    }
}

/// What a write did: the counted bytes it finished, and whether the socket
/// had no more room.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub released: usize,
    pub blocked: bool,
}

/// The frames queued for one connection and not yet written, in order.
#[derive(Default)]
pub struct Outgoing {
    items: VecDeque<Item>,
    /// Frames in `items`.
    frames: usize,
    /// Bytes of the front item already written.
    offset: usize,
    /// A close frame is queued: nothing goes after it.
    closed: bool,
}

impl Outgoing {
    /// Queues a frame; `counted` of its bytes are the `Outbox`'s. Answers
    /// false once a close frame is queued (nothing may follow it).
    pub fn push(&mut self, opcode: u8, body: Bytes, counted: usize) -> bool {
        let (head, head_len) = wsframe::head(opcode, body.len());
        self.push_item(Item {
            head,
            head_len,
            body,
            counted,
            frames: 1,
        })
    }

    /// Queues frames already framed for the wire (`wire`, shared);
    /// answers false once a close frame is queued.
    pub fn push_wire(&mut self, wire: &Wire) -> bool {
        self.push_item(Item {
            head: [0; MAX_HEAD],
            head_len: 0,
            body: wire.bytes.clone(),
            counted: wire.text,
            frames: wire.frames,
        })
    }

    fn push_item(&mut self, item: Item) -> bool {
        if self.closed {
            return false;
        }
        self.frames += item.frames;
        crate::room::push_back(&mut self.items, item);
        true
    }

    /// Queues the close frame, last.
    pub fn close(&mut self, code: u16, reason: &str) {
        if !self.closed {
            self.push(op::CLOSE, wsframe::close_payload(code, reason), 0);
            self.closed = true;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.frames
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Forgets every frame not yet begun (a frame half written stays, so
    /// the stream of frames is never torn); answers the counted bytes
    /// forgotten.
    pub fn drop_unsent(&mut self) -> usize {
        let keep = usize::from(self.offset > 0);
        let mut counted = 0;
        for item in self.items.drain(keep..) {
            self.frames -= item.frames;
            counted += item.counted;
        }
        counted
    }

    /// Writes with `write` (a vectored send) until the queue is empty or the
    /// socket has no room; an error other than "no room" is answered as
    /// it is.
    pub fn write_to(
        &mut self,
        mut write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    ) -> io::Result<Written> {
        let mut done = Written::default();
        while !self.items.is_empty() {
            let n = {
                let mut slices = [IoSlice::new(&[]); 2 * WRITE_BATCH];
                let mut used = 0;
                let mut skip = self.offset;
                for item in self.items.iter().take(WRITE_BATCH) {
                    let head = &item.head[..usize::from(item.head_len)];
                    for part in [head, &item.body[..]] {
                        if skip >= part.len() {
                            skip -= part.len();
                            continue;
                        }
                        slices[used] = IoSlice::new(&part[skip..]);
                        skip = 0;
                        used += 1;
                    }
                }
                match write(&slices[..used]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        done.blocked = true;
                        return Ok(done);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            self.advance(n, &mut done);
        }
        Ok(done)
    }

    fn advance(&mut self, mut n: usize, done: &mut Written) {
        while n > 0 {
            let Some(front) = self.items.front() else {
                return;
            };
            let left = front.len() - self.offset;
            if n < left {
                self.offset += n;
                return;
            }
            n -= left;
            self.offset = 0;
            done.released += front.counted;
            self.frames -= front.frames;
            self.items.pop_front();
        }
    }
}

/// Writes `slices` to `io` without waiting: one slice with `send`, several
/// with `sendmsg`. Both skip the file layer a `writev` goes through
/// (measured with 10,000 spectators: that layer was 8.6 % of the server's
/// samples, `send` and `sendmsg` take 2.6 %). Through `try_io`, so a full
/// socket clears the stream's write readiness as `try_write` does.
fn send(io: &TcpStream, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    match slices {
        [one] => io.try_write(one),
        _ => io.try_io(tokio::io::Interest::WRITABLE, || {
            socket2::SockRef::from(io).send_vectored(slices)
        }),
    }
}

/// The connection actors' side of the socket.
pub trait WsActor: Actor<Context = Context<Self>> {
    fn socket(&mut self) -> &mut Socket;
}

/// What [`Writer::write_now`] did.
#[derive(Debug)]
pub enum WriteStep {
    /// Everything queued is written (or a wait for room is already on its
    /// way).
    Done,
    /// The socket has no room for the rest: the actor must wait for room
    /// ([`Socket::after`]); until then no write is tried.
    Blocked,
    /// The socket failed: the connection stops.
    Failed(io::Error),
}

/// The write side of a served WebSocket: what waits to be written and the
/// socket it goes to. Shared by the connection's actor ([`Socket`]) and,
/// on the same thread, whatever hands it frames directly (the
/// connection's lane, `ws`): neither needs the other to write.
pub struct Writer {
    /// Shared with [`Messages`]; each borrows it only within one call.
    io: Rc<RefCell<TcpStream>>,
    out: Outgoing,
    outbox: Arc<Outbox>,
    /// A wait for room in the socket is on its way.
    waiting: bool,
    /// The close frame is written and the socket shut for writing.
    shut: bool,
}

impl Writer {
    /// Queues a text frame (not written until [`Writer::write_now`]); its
    /// bytes are counted in the `Outbox` when `counted`.
    pub fn queue_text(&mut self, text: ByteString, counted: bool) {
        self.queue(op::TEXT, text.into_bytes(), counted);
    }

    /// Queues frames framed for the wire; their text is counted in the
    /// `Outbox`.
    pub fn queue_wire(&mut self, wire: &Wire) {
        if !self.out.push_wire(wire) {
            self.release(wire.text);
        }
    }

    /// Queues a frame of `opcode`; its bytes are counted in the `Outbox`
    /// when `counted`.
    pub fn queue(&mut self, opcode: u8, body: Bytes, counted: bool) {
        let n = if counted { body.len() } else { 0 };
        if !self.out.push(opcode, body, n) {
            self.release(n);
        }
    }

    /// Queues the close frame after what is queued; answers false if one
    /// was queued already.
    pub fn queue_close(&mut self, code: u16, reason: &str) -> bool {
        if self.out.is_closed() {
            return false;
        }
        self.out.close(code, reason);
        true
    }

    /// Forgets what was not begun (a client that fell behind resumes from
    /// its `last_seq` instead).
    pub fn drop_unsent(&mut self) {
        let dropped = self.out.drop_unsent();
        self.release(dropped);
    }

    /// A close frame is queued.
    pub fn is_closing(&self) -> bool {
        self.out.is_closed()
    }

    /// Frames queued and not yet written.
    pub fn queued(&self) -> usize {
        self.out.len()
    }

    /// Writes what the socket takes now; once the close frame is out,
    /// shuts the socket for writing.
    pub fn write_now(&mut self) -> WriteStep {
        if self.waiting {
            return WriteStep::Done;
        }
        let io = self.io.borrow();
        let written = self.out.write_to(|slices| send(&io, slices));
        drop(io);
        match written {
            Ok(w) => {
                self.release(w.released);
                if w.blocked {
                    self.waiting = true;
                    return WriteStep::Blocked;
                }
                if self.out.is_closed() && self.out.is_empty() && !self.shut {
                    // The close frame is out: no more bytes from here. The
                    // socket stays open for reading until the client
                    // closes its side (or the grace ends), so what it sends
                    // meanwhile is read and dropped rather than answered
                    // with a reset that could cost it the close frame.
                    self.shut = true;
                    let _ = socket2::SockRef::from(&*self.io.borrow()).shutdown(Shutdown::Write);
                }
                WriteStep::Done
            }
            Err(e) => WriteStep::Failed(e),
        }
    }

    fn release(&self, n: usize) {
        if n > 0 {
            self.outbox.taken(n);
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // What was never written no longer waits for this connection.
        let unsent: usize = self.out.items.iter().map(|i| i.counted).sum();
        self.release(unsent);
    }
}

/// One served WebSocket, as its actor holds it: the [`Writer`] (shared)
/// and when to write.
pub struct Socket {
    writer: Rc<RefCell<Writer>>,
    /// A flush is spawned for the end of the actor's turn ([`Socket::flush_soon`]).
    flush_due: bool,
    _done: oneshot::Sender<()>,
}

impl Socket {
    /// The socket, the stream of the client's messages to add to the
    /// actor's context, and the [`Outbox`] (bounded at `queue_bytes`)
    /// that counts its text frames' bytes until it has written them.
    pub fn new(
        up: Upgraded,
        max_frame: usize,
        queue_bytes: usize,
    ) -> (Self, Messages, Arc<Outbox>) {
        let io = Rc::new(RefCell::new(up.io));
        let outbox = Arc::new(Outbox::new(queue_bytes));
        let messages = Messages {
            io: io.clone(),
            buf: up.read,
            reader: wsframe::Reader::new(max_frame),
            discard: false,
            done: false,
        };
        let writer = Writer {
            io,
            out: Outgoing::default(),
            outbox: outbox.clone(),
            waiting: false,
            shut: false,
        };
        let socket = Self {
            writer: Rc::new(RefCell::new(writer)),
            flush_due: false,
            _done: up.done,
        };
        (socket, messages, outbox)
    }

    /// The write side, to share with the connection's lane.
    pub fn writer(&self) -> Rc<RefCell<Writer>> {
        self.writer.clone()
    }

    /// Queues a text frame (not written until [`Socket::flush`]); its
    /// bytes are counted in the `Outbox` when `counted`.
    pub fn queue_text(&mut self, text: ByteString, counted: bool) {
        self.writer.borrow_mut().queue_text(text, counted);
    }

    /// Queues a frame of `opcode` (not written until [`Socket::flush`]);
    /// its bytes are counted in the `Outbox` when `counted`.
    pub fn queue(&mut self, opcode: u8, body: Bytes, counted: bool) {
        self.writer.borrow_mut().queue(opcode, body, counted);
    }

    /// A close frame is queued: what the client sends now is not handled.
    pub fn is_closing(&self) -> bool {
        self.writer.borrow().is_closing()
    }

    /// Frames queued and not yet written.
    pub fn queued(&self) -> usize {
        self.writer.borrow().queued()
    }

    /// Writes a text frame that is not counted in the `Outbox` (an answer
    /// of this connection's own).
    pub fn text<A: WsActor>(&mut self, ctx: &mut Context<A>, text: impl Into<ByteString>) {
        self.queue_text(text.into(), false);
        self.flush(ctx);
    }

    pub fn ping<A: WsActor>(&mut self, ctx: &mut Context<A>) {
        self.queue(op::PING, Bytes::new(), false);
        self.flush(ctx);
    }

    pub fn pong<A: WsActor>(&mut self, ctx: &mut Context<A>, payload: Bytes) {
        self.queue(op::PONG, payload, false);
        self.flush(ctx);
    }

    /// Closes with `code`: the close frame after what is queued; once it
    /// is written the socket is shut for writing, and the actor stops when
    /// the client closes its side, the socket fails, or [`CLOSE_GRACE`]
    /// has passed, whichever comes first.
    pub fn close<A: WsActor>(&mut self, ctx: &mut Context<A>, code: u16, reason: &str) {
        if !self.writer.borrow_mut().queue_close(code, reason) {
            return;
        }
        Self::closing(ctx);
        self.flush(ctx);
    }

    /// A close frame was queued: the actor stops after [`CLOSE_GRACE`] at
    /// the latest.
    pub fn closing<A: WsActor>(ctx: &mut Context<A>) {
        ctx.run_later(CLOSE_GRACE, |_, ctx| ctx.stop());
    }

    /// Closes at once with `code`, dropping what was not begun: a client
    /// that fell behind resumes from its `last_seq` instead.
    pub fn close_now<A: WsActor>(&mut self, ctx: &mut Context<A>, code: u16, reason: &str) {
        self.writer.borrow_mut().drop_unsent();
        self.close(ctx, code, reason);
    }

    /// Writes what is queued once the actor has handled every message
    /// waiting in its mailbox: frames of several commits that reached a
    /// busy connection go out in one write.
    pub fn flush_soon<A: WsActor>(&mut self, ctx: &mut Context<A>) {
        if self.flush_due || self.writer.borrow().waiting {
            return;
        }
        self.flush_due = true;
        ctx.spawn(actix::fut::ready(()).map(|(), act: &mut A, ctx| {
            let socket = act.socket();
            socket.flush_due = false;
            socket.flush(ctx);
        }));
    }

    /// Writes what the socket takes now, and waits for room for the rest.
    pub fn flush<A: WsActor>(&mut self, ctx: &mut Context<A>) {
        let step = self.writer.borrow_mut().write_now();
        self.after(step, ctx);
    }

    /// Carries out what a write asks of the actor: a wait for room, or a
    /// stop.
    pub fn after<A: WsActor>(&mut self, step: WriteStep, ctx: &mut Context<A>) {
        match step {
            WriteStep::Done => {}
            WriteStep::Blocked => self.wait_for_room(ctx),
            WriteStep::Failed(e) => {
                tracing::debug!(error = %e, "websocket write failed");
                ctx.stop();
            }
        }
    }

    /// Waits for room in the socket, then writes on (the writer is marked
    /// waiting by the write that blocked).
    fn wait_for_room<A: WsActor>(&self, ctx: &mut Context<A>) {
        let io = self.writer.borrow().io.clone();
        let room = std::future::poll_fn(move |cx| io.borrow().poll_write_ready(cx));
        ctx.spawn(
            actix::fut::wrap_future::<_, A>(room).map(|ready, act: &mut A, ctx| {
                let socket = act.socket();
                socket.writer.borrow_mut().waiting = false;
                match ready {
                    Ok(()) => socket.flush(ctx),
                    Err(_) => ctx.stop(),
                }
            }),
        );
    }
}
/// The client's messages, read from the socket; ends when the client
/// closes the TCP connection or it fails. A protocol error is its last
/// item (what follows it is read and dropped).
pub struct Messages {
    io: Rc<RefCell<TcpStream>>,
    /// Bytes read and not yet a whole frame; without capacity while none
    /// are.
    buf: BytesMut,
    reader: wsframe::Reader,
    /// After a protocol error: the rest is read and dropped until the
    /// client closes.
    discard: bool,
    done: bool,
}

impl Stream for Messages {
    type Item = Result<Incoming, ProtocolError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if this.discard {
                this.buf.clear();
            } else {
                match this.reader.next(&mut this.buf) {
                    Ok(Some(message)) => return Poll::Ready(Some(Ok(message))),
                    Ok(None) => {}
                    Err(e) => {
                        this.discard = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            if this.buf.is_empty() && this.buf.capacity() > 0 {
                // Idle: hold no buffer until the client sends again.
                this.buf = BytesMut::new();
            }
            // Room only once there is something to read: an idle
            // connection holds no buffer.
            if ready!(this.io.borrow().poll_read_ready(cx)).is_err() {
                this.done = true;
                continue;
            }
            this.buf.reserve(READ_CHUNK);
            // `poll_read` (not `try_read`): a read shorter than the room
            // given clears the socket's readiness, so a message costs one
            // `recvfrom`, not a second that finds nothing.
            let mut io = this.io.borrow_mut();
            match ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut *io),
                cx,
                &mut this.buf
            )) {
                Ok(0) | Err(_) => this.done = true,
                Ok(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    use super::wsframe::unmasked_frames as frames;

    /// A socket that takes at most `room` bytes per call, and none once
    /// `budget` bytes are taken (then "would block").
    struct Slow {
        taken: Vec<u8>,
        room: usize,
        budget: usize,
        calls: usize,
    }

    impl Slow {
        fn new(room: usize, budget: usize) -> Self {
            Self {
                taken: Vec::new(),
                room,
                budget,
                calls: 0,
            }
        }

        fn write(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            let mut can = self.room.min(self.budget);
            if can == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let before = self.taken.len();
            for s in slices {
                let n = s.len().min(can);
                self.taken.extend_from_slice(&s[..n]);
                can -= n;
                if can == 0 {
                    break;
                }
            }
            let n = self.taken.len() - before;
            self.budget -= n;
            Ok(n)
        }
    }

    #[test]
    fn frames_released_together_go_out_in_one_write() {
        let mut out = Outgoing::default();
        let shared = text("{\"seq\":1}");
        out.push(op::TEXT, shared.clone(), 9);
        out.push(op::TEXT, text("{\"seq\":2}"), 9);
        let mut sock = Slow::new(usize::MAX, usize::MAX);
        let w = out.write_to(|s| sock.write(s)).expect("written");
        assert_eq!(
            w,
            Written {
                released: 18,
                blocked: false
            }
        );
        assert_eq!(sock.calls, 1);
        assert_eq!(
            frames(&sock.taken),
            vec![
                (op::TEXT, b"{\"seq\":1}".to_vec()),
                (op::TEXT, b"{\"seq\":2}".to_vec())
            ]
        );
        assert!(out.is_empty());
    }

    #[test]
    fn a_frame_split_across_writes_arrives_whole_and_is_counted_once_done() {
        let big = Bytes::from(vec![b'x'; 300]);
        let mut out = Outgoing::default();
        out.push(op::TEXT, big.clone(), 300);
        out.push(op::TEXT, text("tail"), 4);
        // Three bytes a call: every header and payload split.
        let mut sock = Slow::new(3, usize::MAX);
        let w = out.write_to(|s| sock.write(s)).expect("written");
        assert_eq!(w.released, 304);
        assert!(sock.calls > 100);
        assert_eq!(
            frames(&sock.taken),
            vec![(op::TEXT, big.to_vec()), (op::TEXT, b"tail".to_vec())]
        );
    }

    #[test]
    fn a_slow_reader_gets_the_rest_in_order_when_its_socket_has_room() {
        let mut out = Outgoing::default();
        for i in 0..100u8 {
            out.push(op::TEXT, Bytes::from(vec![b'a' + i % 26; 50]), 50);
        }
        let mut taken = Vec::new();
        let mut released = 0;
        // The socket takes 777 bytes, then blocks, again and again.
        loop {
            let mut sock = Slow::new(usize::MAX, 777);
            let w = out.write_to(|s| sock.write(s)).expect("written");
            released += w.released;
            taken.extend_from_slice(&sock.taken);
            if !w.blocked {
                break;
            }
            assert!(!out.is_empty(), "blocked with frames left");
        }
        assert_eq!(released, 5000);
        let got = frames(&taken);
        assert_eq!(got.len(), 100);
        for (i, (opcode, payload)) in got.iter().enumerate() {
            assert_eq!(*opcode, op::TEXT);
            assert_eq!(payload, &vec![b'a' + (i as u8) % 26; 50], "frame {i}");
        }
    }

    #[test]
    fn a_close_mid_write_goes_after_the_frame_begun_and_nothing_follows_it() {
        let mut out = Outgoing::default();
        out.push(op::TEXT, Bytes::from(vec![b'x'; 100]), 100);
        out.push(op::TEXT, text("never"), 5);
        let mut sock = Slow::new(usize::MAX, 40);
        let w = out.write_to(|s| sock.write(s)).expect("written");
        assert!(w.blocked);
        assert_eq!(w.released, 0, "nothing whole yet");
        // The connection fell behind: what was not begun is forgotten,
        // the frame begun stays, the close goes after it.
        assert_eq!(out.drop_unsent(), 5);
        out.close(1013, "too slow");
        assert!(
            !out.push(op::TEXT, text("after"), 5),
            "nothing after a close"
        );
        let mut rest = Slow::new(usize::MAX, usize::MAX);
        let w = out.write_to(|s| rest.write(s)).expect("written");
        assert_eq!(w.released, 100);
        let all = [sock.taken, rest.taken].concat();
        let got = frames(&all);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (op::TEXT, vec![b'x'; 100]));
        assert_eq!(got[1].0, op::CLOSE);
        assert_eq!(&got[1].1[..2], &1013u16.to_be_bytes());
        assert_eq!(&got[1].1[2..], b"too slow");
    }

    /// A turn's frames as the session releases them: short and long
    /// (a 16-bit length), shared by every connection.
    fn turn_frames() -> Vec<ByteString> {
        vec![
            ByteString::from_static("{\"seq\":1}"),
            ByteString::from("x".repeat(300)),
            ByteString::from_static("{\"seq\":3}"),
        ]
    }

    #[test]
    fn frames_framed_once_are_the_bytes_of_each_frame_framed_alone() {
        let texts = turn_frames();
        let mut one_by_one = Outgoing::default();
        for t in &texts {
            one_by_one.push(op::TEXT, t.clone().into_bytes(), t.len());
        }
        let mut framed = Outgoing::default();
        framed.push_wire(&Wire::of(&texts));
        assert_eq!(
            (framed.len(), one_by_one.len()),
            (3, 3),
            "counted as frames"
        );
        let (mut a, mut b) = (
            Slow::new(usize::MAX, usize::MAX),
            Slow::new(usize::MAX, usize::MAX),
        );
        let wa = one_by_one.write_to(|s| a.write(s)).expect("written");
        let wb = framed.write_to(|s| b.write(s)).expect("written");
        assert_eq!(wa, wb);
        assert_eq!(wb.released, 2 * 9 + 300);
        assert_eq!(a.taken, b.taken);
        assert_eq!(frames(&b.taken).len(), 3);
        assert_eq!((b.calls, framed.len()), (1, 0));
    }

    #[test]
    fn framed_frames_split_across_writes_arrive_whole_and_are_counted_once_done() {
        let texts = turn_frames();
        let mut out = Outgoing::default();
        out.push_wire(&Wire::of(&texts));
        out.push(op::TEXT, text("tail"), 4);
        assert_eq!(out.len(), 4);
        // Five bytes a call, and room for 100 bytes before it blocks.
        let mut first = Slow::new(5, 100);
        let w = out.write_to(|s| first.write(s)).expect("written");
        assert!(w.blocked);
        assert_eq!(w.released, 0, "nothing released before the batch is whole");
        assert_eq!(out.len(), 4);
        let mut rest = Slow::new(5, usize::MAX);
        let w = out.write_to(|s| rest.write(s)).expect("written");
        assert_eq!(w.released, 318 + 4);
        assert_eq!(out.len(), 0);
        let got = frames(&[first.taken, rest.taken].concat());
        let want: Vec<(u8, Vec<u8>)> = texts
            .iter()
            .map(|t| (op::TEXT, t.as_bytes().to_vec()))
            .chain([(op::TEXT, b"tail".to_vec())])
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_close_mid_batch_goes_after_the_whole_batch_and_nothing_follows_it() {
        let texts = turn_frames();
        let mut out = Outgoing::default();
        out.push_wire(&Wire::of(&texts));
        out.push_wire(&Wire::of(&texts[..1]));
        let mut sock = Slow::new(usize::MAX, 50);
        let w = out.write_to(|s| sock.write(s)).expect("written");
        assert!(w.blocked);
        // The batch begun stays whole; the one not begun is forgotten.
        assert_eq!(out.drop_unsent(), 9);
        assert_eq!(out.len(), 3);
        out.close(1013, "too slow");
        assert!(!out.push_wire(&Wire::of(&texts)), "nothing after a close");
        let mut rest = Slow::new(usize::MAX, usize::MAX);
        let w = out.write_to(|s| rest.write(s)).expect("written");
        assert_eq!(w.released, 318);
        let got = frames(&[sock.taken, rest.taken].concat());
        assert_eq!(got.len(), 4);
        assert_eq!(got[1], (op::TEXT, vec![b'x'; 300]));
        assert_eq!(got[3].0, op::CLOSE);
    }

    #[test]
    fn a_failed_socket_is_reported_and_keeps_the_queue() {
        let mut out = Outgoing::default();
        out.push(op::TEXT, text("x"), 1);
        let err = out
            .write_to(|_| Err(io::ErrorKind::BrokenPipe.into()))
            .expect_err("reported");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn many_frames_are_written_in_batches() {
        let mut out = Outgoing::default();
        for _ in 0..(3 * WRITE_BATCH + 1) {
            out.push(op::TEXT, text("f"), 1);
        }
        let mut sock = Slow::new(usize::MAX, usize::MAX);
        let w = out.write_to(|s| sock.write(s)).expect("written");
        assert_eq!(w.released, 3 * WRITE_BATCH + 1);
        assert_eq!(sock.calls, 4);
    }
}
