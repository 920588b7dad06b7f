//! What bounds one WebSocket connection, whether this node serves it
//! (`ws`) or relays it to the session's owner (`relay`): the same frame
//! size, heartbeat and silence limit on both, so a client cannot tell
//! which node it reached.

use std::time::Duration;

use crate::error::ErrorCode;
use crate::protocol::ControlFrame;

/// Largest message a client may send, in bytes, whole or in fragments; a
/// longer one is dropped unread and answered with [`dropped_answer`].
pub const MAX_FRAME_BYTES: usize = 64 * 1024;
/// Why a binary message is refused.
pub const BINARY_REFUSED: &str = "only whole JSON text frames are accepted";
/// How often the server pings.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A client silent this long is disconnected.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// What bounds one WebSocket connection, from the settings.
#[derive(Debug, Clone, Copy)]
pub struct WsLimits {
    /// Frames that may wait for it (`QUESTD_WS_QUEUE`).
    pub queue: usize,
    /// Bytes that may wait for it (`QUESTD_WS_QUEUE_BYTES`).
    pub queue_bytes: usize,
    /// Frames it may send a second (`QUESTD_WS_FRAMES_PER_SECOND`) ...
    pub frames_per_second: u32,
    /// ... with bursts of this many (`QUESTD_WS_FRAME_BURST`).
    pub frame_burst: u32,
}

impl WsLimits {
    pub fn from_settings(s: &crate::config::Settings) -> Self {
        Self {
            queue: s.ws_queue.max(1),
            queue_bytes: s.ws_queue_bytes.max(1),
            frames_per_second: s.ws_frames_per_second.max(1),
            frame_burst: s.ws_frame_burst.max(1),
        }
    }
}

/// The `error` frame that answers a message over [`MAX_FRAME_BYTES`],
/// dropped unread (so no `request_id` can be echoed): `TEXT_TOO_LONG` for
/// text, since no frame that long holds a chat the server would take;
/// `INVALID_FRAME` for binary, as for any binary message.
pub fn dropped_answer(text: bool) -> String {
    let (error_code, message) = if text {
        (
            ErrorCode::TextTooLong,
            format!("messages are limited to {MAX_FRAME_BYTES} bytes; this one was not read"),
        )
    } else {
        (ErrorCode::InvalidFrame, BINARY_REFUSED.into())
    };
    ControlFrame::Error {
        request_id: None,
        error_code,
        message,
        retry_after_ms: None,
    }
    .to_json()
}
