//! WebSocket framing (RFC 6455 §5), pure: the header of a frame the
//! server sends, and the reading of the frames a client sends into whole
//! messages. No I/O here; `websocket` owns the socket.
//!
//! What a client may send is bounded before its bytes are kept: a message
//! (whole or in fragments) longer than the bound is known from its
//! header; its bytes are then read and dropped as they come, never kept,
//! and the reader says so once the message ends. So a reader never
//! buffers more than one bound's worth, and the connection reads on.

use bytes::{Buf, Bytes, BytesMut};

/// The longest frame header: 2 bytes, then a 64-bit length (servers send
/// no mask).
pub const MAX_HEAD: usize = 10;

/// Opcodes (RFC 6455 §5.2).
pub mod op {
    pub const CONTINUATION: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}

/// Close codes this layer sends itself (RFC 6455 §7.4.1).
pub mod close {
    pub const NORMAL: u16 = 1000;
    pub const AWAY: u16 = 1001;
    pub const PROTOCOL: u16 = 1002;
    pub const INVALID_DATA: u16 = 1007;
    pub const ERROR: u16 = 1011;
    pub const RESTART: u16 = 1012;
    pub const AGAIN: u16 = 1013;
}

/// The header of an unmasked, final frame of `opcode` carrying `len`
/// bytes: the bytes in `[..n]` of the answer.
pub fn head(opcode: u8, len: usize) -> ([u8; MAX_HEAD], u8) {
    let mut h = [0u8; MAX_HEAD];
    h[0] = 0x80 | (opcode & 0x0F);
    let n = if len < 126 {
        h[1] = len as u8;
        2
    } else if let Ok(short) = u16::try_from(len) {
        h[1] = 126;
        h[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        h[1] = 127;
        h[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    (h, n)
}

/// Text frames as they go on the wire from this side (unmasked), one
/// after another: each frame's header and its text. Every connection
/// that gets the same frames gets these same bytes.
pub fn texts_on_wire<'a>(texts: impl Iterator<Item = &'a [u8]> + Clone) -> Bytes {
    let len: usize = texts.clone().map(|t| MAX_HEAD + t.len()).sum();
    let mut out = BytesMut::with_capacity(len);
    for t in texts {
        let (h, n) = head(op::TEXT, t.len());
        out.extend_from_slice(&h[..usize::from(n)]);
        out.extend_from_slice(t);
    }
    out.freeze()
}

/// Reads frames written by this side (unmasked) back, as a client
/// reads them off the wire: (opcode, payload) of each, in order.
#[cfg(test)]
pub fn unmasked_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let opcode = bytes[0] & 0x0F;
        assert_eq!(bytes[0] & 0x80, 0x80, "final");
        let (len, at) = match bytes[1] {
            126 => (usize::from(u16::from_be_bytes([bytes[2], bytes[3]])), 4),
            127 => {
                let mut n = [0u8; 8];
                n.copy_from_slice(&bytes[2..10]);
                (u64::from_be_bytes(n) as usize, 10)
            }
            n => (usize::from(n), 2),
        };
        out.push((opcode, bytes[at..at + len].to_vec()));
        bytes = &bytes[at + len..];
    }
    out
}

/// The payload of a close frame: the code, then the reason cut to what a
/// control frame holds (125 bytes in all), at a character boundary.
pub fn close_payload(code: u16, reason: &str) -> Bytes {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = Vec::with_capacity(2 + end);
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&reason.as_bytes()[..end]);
    Bytes::from(out)
}

/// What a frame's header says (RFC 6455 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub fin: bool,
    pub opcode: u8,
    /// A client's frames are masked, a server's are not.
    pub masked: bool,
    /// The payload's length (`usize::MAX` for one this machine cannot hold).
    pub len: usize,
    /// Where the mask key (if any) or else the payload begins.
    pub at: usize,
}

/// The header at the front of `buf`, if all of it is there; an error for
/// what no frame may say: reserved bits, an unknown opcode, a control
/// frame in fragments or longer than 125 bytes. Either side's frames.
pub fn read_head(buf: &[u8]) -> Result<Option<Head>, ProtocolError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x70 != 0 {
        return Err(ProtocolError::Invalid("reserved bits are set"));
    }
    let fin = b0 & 0x80 != 0;
    let opcode = b0 & 0x0F;
    if !matches!(
        opcode,
        op::CONTINUATION | op::TEXT | op::BINARY | op::CLOSE | op::PING | op::PONG
    ) {
        return Err(ProtocolError::Invalid("unknown opcode"));
    }
    let (len, at) = match b1 & 0x7F {
        126 => {
            if buf.len() < 4 {
                return Ok(None);
            }
            (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4)
        }
        127 => {
            if buf.len() < 10 {
                return Ok(None);
            }
            let mut n = [0u8; 8];
            n.copy_from_slice(&buf[2..10]);
            (u64::from_be_bytes(n), 10)
        }
        n => (u64::from(n), 2),
    };
    if opcode & 0x08 != 0 && (!fin || len > 125) {
        return Err(ProtocolError::Invalid(
            "control frames must be whole and at most 125 bytes",
        ));
    }
    Ok(Some(Head {
        fin,
        opcode,
        masked: b1 & 0x80 != 0,
        len: usize::try_from(len).unwrap_or(usize::MAX),
        at,
    }))
}

/// A final frame of `opcode` as a client sends it: masked with `mask`.
pub fn masked(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    masked_part(true, opcode, payload, mask)
}

/// [`masked`], final or not (a fragment of a message).
pub fn masked_part(fin: bool, opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let (mut h, n) = head(opcode, payload.len());
    if !fin {
        h[0] &= 0x7F;
    }
    h[1] |= 0x80;
    let mut out = Vec::with_capacity(usize::from(n) + 4 + payload.len());
    out.extend_from_slice(&h[..usize::from(n)]);
    out.extend_from_slice(&mask);
    out.extend_from_slice(payload);
    unmask(&mut out[usize::from(n) + 4..], mask);
    out
}

/// A whole message from the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    Text(String),
    Binary(Bytes),
    Ping(Bytes),
    Pong,
    /// A text (`text`) or binary message longer than the bound: read to
    /// its end and dropped, none of it kept.
    Dropped {
        text: bool,
    },
    /// The client closes, with its code and reason if it gave them.
    Close(Option<(u16, String)>),
}

/// Why the client's bytes cannot be read on: the connection closes with
/// [`ProtocolError::close_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// Text that is not UTF-8.
    NotUtf8,
    /// Anything else RFC 6455 forbids: an unmasked frame, reserved bits,
    /// an unknown opcode, a long or fragmented control frame, a
    /// continuation with nothing to continue.
    Invalid(&'static str),
}

impl ProtocolError {
    pub fn close_code(self) -> u16 {
        match self {
            Self::NotUtf8 => close::INVALID_DATA,
            Self::Invalid(_) => close::PROTOCOL,
        }
    }

    pub fn reason(self) -> String {
        match self {
            Self::NotUtf8 => "text frames must be UTF-8".into(),
            Self::Invalid(why) => why.into(),
        }
    }
}

/// Reads a client's frames into messages: fragments are joined, control
/// frames come out between them, and nothing longer than `max` is kept.
#[derive(Debug)]
pub struct Reader {
    max: usize,
    /// A message in fragments: its opcode and the bytes so far.
    partial: Option<(u8, BytesMut)>,
    /// A message over the bound, being dropped as it comes.
    dropping: Option<Dropping>,
}

/// A message over the bound that is being read and dropped.
#[derive(Debug)]
struct Dropping {
    /// The message's opcode (text or binary).
    opcode: u8,
    /// Bytes of the current frame's payload still to drop.
    left: u64,
    /// Whether the current frame ends the message.
    last: bool,
}

/// What the front of the buffer held.
enum Read {
    Frame(Frame),
    /// The header of a frame of a message being dropped: its payload is
    /// dropped next.
    Dropping,
}

impl Reader {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            partial: None,
            dropping: None,
        }
    }

    /// The next whole message in `buf`, whose bytes it consumes; `None`
    /// when `buf` holds no whole frame yet (or only fragments so far).
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, ProtocolError> {
        loop {
            if let Some(d) = self.dropping.as_mut() {
                let n = usize::try_from(d.left).map_or(buf.len(), |left| left.min(buf.len()));
                buf.advance(n);
                d.left -= n as u64;
                if d.left > 0 {
                    return Ok(None);
                }
                if d.last {
                    let text = d.opcode == op::TEXT;
                    self.dropping = None;
                    return Ok(Some(Incoming::Dropped { text }));
                }
            }
            match self.frame(buf)? {
                None => return Ok(None),
                Some(Read::Dropping) => {}
                Some(Read::Frame(frame)) => {
                    if let Some(message) = self.message(frame)? {
                        return Ok(Some(message));
                    }
                }
            }
        }
    }

    /// One whole frame from the front of `buf`, unmasked; or the header of
    /// a frame whose payload is to be dropped.
    fn frame(&mut self, buf: &mut BytesMut) -> Result<Option<Read>, ProtocolError> {
        let Some(Head {
            fin,
            opcode,
            masked,
            len,
            at,
        }) = read_head(buf)?
        else {
            return Ok(None);
        };
        if !masked {
            return Err(ProtocolError::Invalid("client frames must be masked"));
        }
        let control = opcode & 0x08 != 0;
        // The bound holds for a message in fragments too.
        let so_far = self.partial.as_ref().map_or(0, |(_, b)| b.len() as u64);
        let over = len > self.max || so_far.saturating_add(len as u64) > self.max as u64;
        if !control && (self.dropping.is_some() || over) {
            return self.drop_frame(buf, fin, opcode, len, at);
        }
        if buf.len() < at + 4 + len {
            // Room for the rest of this frame, once; never past the bound.
            buf.reserve(at + 4 + len - buf.len());
            return Ok(None);
        }
        let mut mask = [0u8; 4];
        mask.copy_from_slice(&buf[at..at + 4]);
        buf.advance(at + 4);
        let mut payload = buf.split_to(len);
        unmask(&mut payload, mask);
        Ok(Some(Read::Frame(Frame {
            fin,
            opcode,
            payload,
        })))
    }

    /// Takes the header of a data frame of a message over the bound (its
    /// first such frame, or one after it): what the message held so far
    /// is let go, and the frame's `len` bytes are dropped next. `None`
    /// while the header's mask key has not all come.
    fn drop_frame(
        &mut self,
        buf: &mut BytesMut,
        fin: bool,
        opcode: u8,
        len: usize,
        at: usize,
    ) -> Result<Option<Read>, ProtocolError> {
        let open = self.dropping.as_ref().map(|d| d.opcode);
        let open = open.or(self.partial.as_ref().map(|(o, _)| *o));
        let opcode = message_opcode(opcode, open)?;
        if buf.len() < at + 4 {
            return Ok(None);
        }
        buf.advance(at + 4);
        self.partial = None;
        self.dropping = Some(Dropping {
            opcode,
            left: len as u64,
            last: fin,
        });
        Ok(Some(Read::Dropping))
    }

    /// What `frame` completes, if anything.
    fn message(&mut self, frame: Frame) -> Result<Option<Incoming>, ProtocolError> {
        let Frame {
            fin,
            opcode,
            payload,
        } = frame;
        match opcode {
            op::PING => return Ok(Some(Incoming::Ping(payload.freeze()))),
            op::PONG => return Ok(Some(Incoming::Pong)),
            op::CLOSE => return close(payload).map(Some),
            _ => {}
        }
        let opcode = message_opcode(opcode, self.partial.as_ref().map(|(o, _)| *o))?;
        let bytes = match self.partial.take() {
            Some((_, mut so_far)) => {
                so_far.extend_from_slice(&payload);
                so_far
            }
            None => payload,
        };
        if !fin {
            self.partial = Some((opcode, bytes));
            return Ok(None);
        }
        if opcode == op::TEXT {
            String::from_utf8(bytes.to_vec())
                .map(|text| Some(Incoming::Text(text)))
                .map_err(|_| ProtocolError::NotUtf8)
        } else {
            Ok(Some(Incoming::Binary(bytes.freeze())))
        }
    }
}

/// The opcode of the message a data frame of `opcode` belongs to, when a
/// message of `open` is unfinished (or none): a continuation needs one to
/// continue, and a new message may not begin inside another.
fn message_opcode(opcode: u8, open: Option<u8>) -> Result<u8, ProtocolError> {
    match (opcode, open) {
        (op::CONTINUATION, Some(open)) => Ok(open),
        (op::CONTINUATION, None) => Err(ProtocolError::Invalid(
            "a continuation with nothing to continue",
        )),
        (_, Some(_)) => Err(ProtocolError::Invalid(
            "a new message began before the last one ended",
        )),
        (opcode, None) => Ok(opcode),
    }
}

struct Frame {
    fin: bool,
    opcode: u8,
    payload: BytesMut,
}

fn close(payload: BytesMut) -> Result<Incoming, ProtocolError> {
    match payload.len() {
        0 => Ok(Incoming::Close(None)),
        1 => Err(ProtocolError::Invalid("a close frame's code is two bytes")),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            let reason = std::str::from_utf8(&payload[2..]).map_err(|_| ProtocolError::NotUtf8)?;
            Ok(Incoming::Close(Some((code, reason.to_owned()))))
        }
    }
}

fn unmask(bytes: &mut [u8], mask: [u8; 4]) {
    let word = u32::from_ne_bytes(mask);
    let mut chunks = bytes.chunks_exact_mut(4);
    for chunk in &mut chunks {
        let v = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) ^ word;
        chunk.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= mask[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's frame: masked with a fixed key.
    fn client(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        masked_part(fin, opcode, payload, [0x37, 0xfa, 0x21, 0x3d])
    }

    fn read_all(bytes: &[u8], max: usize) -> Vec<Result<Incoming, ProtocolError>> {
        let mut reader = Reader::new(max);
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        loop {
            match reader.next(&mut buf) {
                Ok(Some(m)) => out.push(Ok(m)),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
    }

    #[test]
    fn heads_use_the_shortest_length() {
        for (len, want) in [
            (0, vec![0x81, 0]),
            (125, vec![0x81, 125]),
            (126, vec![0x81, 126, 0, 126]),
            (65535, vec![0x81, 126, 0xFF, 0xFF]),
            (65536, vec![0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
        ] {
            let (h, n) = head(op::TEXT, len);
            assert_eq!(&h[..usize::from(n)], &want[..], "len {len}");
        }
        assert_eq!(head(op::CLOSE, 2).0[0], 0x88);
    }

    #[test]
    fn a_close_payload_keeps_its_code_and_cuts_its_reason_at_a_character() {
        let p = close_payload(1013, "too slow");
        assert_eq!(&p[..], b"\x03\xf5too slow");
        let long = "é".repeat(100);
        let p = close_payload(1000, &long);
        assert!(p.len() <= 125);
        assert!(std::str::from_utf8(&p[2..]).is_ok());
    }

    #[test]
    fn masked_frames_of_every_length_are_read_whole() {
        for len in [0usize, 5, 125, 126, 1000, 70_000] {
            let text = "x".repeat(len);
            let got = read_all(&client(true, op::TEXT, text.as_bytes()), 100_000);
            assert_eq!(got, vec![Ok(Incoming::Text(text))], "len {len}");
        }
    }

    #[test]
    fn a_frame_arriving_a_byte_at_a_time_is_read_once_whole() {
        let bytes = [
            client(true, op::TEXT, b"{\"type\":\"chat\"}"),
            client(true, op::PING, b"hi"),
        ]
        .concat();
        let mut reader = Reader::new(1024);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in bytes {
            buf.extend_from_slice(&[b]);
            while let Some(m) = reader.next(&mut buf).expect("valid") {
                got.push(m);
            }
        }
        assert_eq!(
            got,
            vec![
                Incoming::Text("{\"type\":\"chat\"}".into()),
                Incoming::Ping(Bytes::from_static(b"hi"))
            ]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn fragments_are_joined_with_control_frames_between_them() {
        let bytes = [
            client(false, op::TEXT, b"hel"),
            client(true, op::PING, b""),
            client(false, op::CONTINUATION, b"lo "),
            client(true, op::CONTINUATION, "wörld".as_bytes()),
        ]
        .concat();
        assert_eq!(
            read_all(&bytes, 1024),
            vec![
                Ok(Incoming::Ping(Bytes::new())),
                Ok(Incoming::Text("hello wörld".into()))
            ]
        );
    }

    #[test]
    fn what_breaks_the_rules_is_refused() {
        let mut unmasked = client(true, op::TEXT, b"hi");
        unmasked[1] &= 0x7F;
        let mut reserved = client(true, op::TEXT, b"hi");
        reserved[0] |= 0x40;
        let cases: Vec<(&str, Vec<u8>, ProtocolError)> = vec![
            (
                "unmasked",
                unmasked,
                ProtocolError::Invalid("client frames must be masked"),
            ),
            (
                "reserved bits",
                reserved,
                ProtocolError::Invalid("reserved bits are set"),
            ),
            (
                "unknown opcode",
                client(true, 0x3, b""),
                ProtocolError::Invalid("unknown opcode"),
            ),
            (
                "long ping",
                client(true, op::PING, &[0; 126]),
                ProtocolError::Invalid("control frames must be whole and at most 125 bytes"),
            ),
            (
                "fragmented ping",
                client(false, op::PING, b""),
                ProtocolError::Invalid("control frames must be whole and at most 125 bytes"),
            ),
            (
                "lone continuation",
                client(true, op::CONTINUATION, b"x"),
                ProtocolError::Invalid("a continuation with nothing to continue"),
            ),
            (
                "a message inside a message",
                [client(false, op::TEXT, b"a"), client(true, op::TEXT, b"b")].concat(),
                ProtocolError::Invalid("a new message began before the last one ended"),
            ),
            (
                "not UTF-8",
                client(true, op::TEXT, &[0xff, 0xfe]),
                ProtocolError::NotUtf8,
            ),
            (
                "a message inside a message dropped for its length",
                [
                    client(false, op::TEXT, &[b'a'; 65]),
                    client(true, op::TEXT, b"b"),
                ]
                .concat(),
                ProtocolError::Invalid("a new message began before the last one ended"),
            ),
        ];
        for (name, bytes, want) in cases {
            assert_eq!(read_all(&bytes, 64).pop(), Some(Err(want)), "{name}");
        }
    }

    #[test]
    fn a_message_over_the_bound_is_dropped_and_the_next_one_read() {
        let bytes = [
            client(true, op::TEXT, &[b'a'; 65]),
            client(true, op::TEXT, b"ok"),
            // In fragments, with a ping between them: the first fragment
            // is kept until the second passes the bound.
            client(false, op::TEXT, &[b'a'; 40]),
            client(true, op::PING, b"p"),
            client(false, op::CONTINUATION, &[b'a'; 40]),
            client(true, op::CONTINUATION, &[b'a'; 40]),
            client(true, op::BINARY, &[1; 65]),
            client(true, op::TEXT, b"still here"),
        ]
        .concat();
        assert_eq!(
            read_all(&bytes, 64),
            vec![
                Ok(Incoming::Dropped { text: true }),
                Ok(Incoming::Text("ok".into())),
                Ok(Incoming::Ping(Bytes::from_static(b"p"))),
                Ok(Incoming::Dropped { text: true }),
                Ok(Incoming::Dropped { text: false }),
                Ok(Incoming::Text("still here".into())),
            ]
        );
    }

    #[test]
    fn a_frame_over_the_bound_is_never_held_however_its_bytes_come() {
        // Only the 10-byte header of a 1 GiB frame has arrived.
        let mut head = vec![0x81, 0x80 | 127];
        head.extend_from_slice(&(1u64 << 30).to_be_bytes());
        let mut reader = Reader::new(64 * 1024);
        let mut buf = BytesMut::from(&head[..]);
        assert_eq!(reader.next(&mut buf), Ok(None));
        assert!(buf.capacity() < 1024, "nothing reserved for it");
        // A 1 MiB message then comes in writes of 1,000 bytes, split
        // anywhere (in its header too): each is dropped as it comes.
        let mut reader = Reader::new(64 * 1024);
        let mut bytes = client(true, op::TEXT, &vec![b'x'; 1 << 20]);
        bytes.extend(client(true, op::TEXT, b"after"));
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in bytes.chunks(1000) {
            buf.extend_from_slice(piece);
            while let Some(m) = reader.next(&mut buf).expect("readable") {
                got.push(m);
            }
            assert!(buf.len() < 1000 + MAX_HEAD + 4, "{} bytes held", buf.len());
        }
        assert_eq!(
            got,
            vec![
                Incoming::Dropped { text: true },
                Incoming::Text("after".into())
            ]
        );
    }

    #[test]
    fn close_frames_carry_their_code_and_reason() {
        assert_eq!(
            read_all(&client(true, op::CLOSE, b""), 64),
            vec![Ok(Incoming::Close(None))]
        );
        assert_eq!(
            read_all(&client(true, op::CLOSE, b"\x03\xe8bye"), 64),
            vec![Ok(Incoming::Close(Some((1000, "bye".into()))))]
        );
        assert_eq!(
            read_all(&client(true, op::CLOSE, b"\x03"), 64).pop(),
            Some(Err(ProtocolError::Invalid(
                "a close frame's code is two bytes"
            )))
        );
    }
}
