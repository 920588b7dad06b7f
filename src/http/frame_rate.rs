//! How many frames one WebSocket connection may send: a token bucket
//! (`QUESTD_WS_FRAMES_PER_SECOND`, bursts of `QUESTD_WS_FRAME_BURST`) and
//! what happens past it. Every frame counts (chats, pings, pongs, frames
//! refused as invalid), since each costs the node a parse and most an
//! answer.
//!
//! A frame past the rate is dropped unanswered, and the client hears
//! `RATE_LIMITED` at most once per [`TELL_EVERY`]; a client that goes on
//! past the rate for [`MAX_REFUSED_FRAMES`] frames with no quiet
//! [`QUIET`] between them is closed with 1008 (policy violation). The
//! rule is pure (it is told whether the bucket had room), so it is
//! tested from tables; each connection actor owns one, and so does each
//! relay of a player's connection to another node (it answers pings
//! itself and queues the rest for the owner).

use std::time::{Duration, Instant};

use actix::Context;
use governor::{DefaultDirectRateLimiter, Quota};

use super::websocket::{Socket, WsActor};
use super::wsframe::{Incoming, ProtocolError};
use crate::error::ErrorCode;
use crate::protocol::ControlFrame;
use crate::rate;

/// Frames refused in a row (no [`QUIET`] between them) before the
/// connection is closed.
pub const MAX_REFUSED_FRAMES: u32 = 200;
/// A refusal this long after the last one starts the count again.
pub const QUIET: Duration = Duration::from_secs(1);
/// Shortest time between two `RATE_LIMITED` errors to one connection.
pub const TELL_EVERY: Duration = Duration::from_secs(1);
/// WebSocket close code for a client that would not slow down.
pub const CLOSE_POLICY: u16 = 1008;

/// What to do with one frame a client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the rate: handle it.
    Handle,
    /// Past the rate: drop it and send `RATE_LIMITED`.
    Tell,
    /// Past the rate: drop it silently (the client was told lately).
    Drop,
    /// Past the rate for too long: close the connection (1008).
    Close,
}

/// The refusals of one connection: how many in a row, and when the last
/// one was and the client was last told.
#[derive(Debug, Default)]
pub struct Refusals {
    in_a_row: u32,
    last: Option<Instant>,
    told: Option<Instant>,
}

impl Refusals {
    /// The verdict on a frame at `now`, which the bucket had room for or
    /// not (`allowed`).
    pub fn judge(&mut self, allowed: bool, now: Instant) -> Verdict {
        let since = |at: Option<Instant>| at.map(|t| now.saturating_duration_since(t));
        if since(self.last).is_none_or(|d| d >= QUIET) {
            self.in_a_row = 0;
        }
        if allowed {
            return Verdict::Handle;
        }
        self.in_a_row += 1;
        self.last = Some(now);
        if self.in_a_row > MAX_REFUSED_FRAMES {
            return Verdict::Close;
        }
        if since(self.told).is_none_or(|d| d >= TELL_EVERY) {
            self.told = Some(now);
            return Verdict::Tell;
        }
        Verdict::Drop
    }
}

/// One connection's frame rate: the bucket and its refusals.
pub struct FrameRate {
    bucket: DefaultDirectRateLimiter,
    refusals: Refusals,
}

impl FrameRate {
    /// `per_second` frames a second with bursts of `burst` (each at least 1).
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            bucket: rate::direct(
                Quota::per_second(rate::at_least_one(per_second))
                    .allow_burst(rate::at_least_one(burst)),
            ),
            refusals: Refusals::default(),
        }
    }

    /// The verdict on the frame that just arrived.
    pub fn frame(&mut self) -> Verdict {
        let allowed = self.bucket.check().is_ok();
        self.refusals.judge(allowed, Instant::now())
    }

    /// Judges `msg`, which arrived on `socket` (of the actor of `ctx`),
    /// and carries out the verdict there: answers whether to handle it. A
    /// close is not judged (it ends the connection), nor an error (it
    /// closes it).
    pub fn admit<A: WsActor>(
        &mut self,
        msg: &Result<Incoming, ProtocolError>,
        socket: &mut Socket,
        ctx: &mut Context<A>,
    ) -> bool {
        if matches!(msg, Ok(Incoming::Close(_)) | Err(_)) {
            return true;
        }
        match self.frame() {
            Verdict::Handle => true,
            Verdict::Drop => false,
            Verdict::Tell => {
                let error = ControlFrame::Error {
                    request_id: None,
                    error_code: ErrorCode::RateLimited,
                    message: "too many frames on this connection; slow down".into(),
                    retry_after_ms: Some(TELL_EVERY.as_millis() as u64),
                };
                socket.text(ctx, error.to_json());
                false
            }
            Verdict::Close => {
                socket.close_now(
                    ctx,
                    CLOSE_POLICY,
                    "too many frames; slow down and reconnect",
                );
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_tell_once_a_second_and_close_a_client_that_goes_on() {
        use Verdict::{Close, Drop, Handle, Tell};
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // Steps of (ms, allowed, verdict).
        type Steps = &'static [(u64, bool, Verdict)];
        let cases: &[(&str, Steps)] = &[
            ("within the rate", &[(0, true, Handle), (1, true, Handle)]),
            (
                "the first refusal is told, the next within a second not",
                &[(0, false, Tell), (10, false, Drop), (999, false, Drop)],
            ),
            (
                "told again a second later",
                &[(0, false, Tell), (500, false, Drop), (1000, false, Tell)],
            ),
            (
                "a frame allowed between refusals is handled",
                &[(0, false, Tell), (5, true, Handle), (6, false, Drop)],
            ),
        ];
        for (name, steps) in cases {
            let mut r = Refusals::default();
            for (i, (ms, allowed, want)) in steps.iter().enumerate() {
                assert_eq!(r.judge(*allowed, at(*ms)), *want, "{name}: step {i}");
            }
        }

        // A flood: refused frames one ms apart, some allowed among them
        // (the bucket refills), closes past the threshold.
        let mut r = Refusals::default();
        let mut verdicts = Vec::new();
        for i in 0..=u64::from(MAX_REFUSED_FRAMES) + 5 {
            verdicts.push(r.judge(i % 50 == 49, at(i)));
        }
        let refused = verdicts.iter().filter(|v| **v != Handle).count();
        assert!(refused > MAX_REFUSED_FRAMES as usize);
        assert_eq!(verdicts.last(), Some(&Close));
        assert_eq!(verdicts.iter().filter(|v| **v == Tell).count(), 1);

        // A client that slows down for a quiet second starts afresh.
        let mut r = Refusals::default();
        for i in 0..u64::from(MAX_REFUSED_FRAMES) {
            assert_ne!(r.judge(false, at(i)), Close);
        }
        let later = u64::from(MAX_REFUSED_FRAMES) + 1000;
        assert_eq!(r.judge(false, at(later)), Tell, "counted afresh");
        assert_ne!(r.judge(false, at(later + 1)), Close);
    }

    #[test]
    fn the_bucket_allows_its_burst_then_refuses() {
        let mut rate = FrameRate::new(1, 3);
        let verdicts: Vec<Verdict> = (0..5).map(|_| rate.frame()).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Handle,
                Verdict::Handle,
                Verdict::Handle,
                Verdict::Tell,
                Verdict::Drop
            ]
        );
    }
}
