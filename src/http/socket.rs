//! What bounds one WebSocket connection, whether this node serves it
//! (`ws`) or relays it to the session's owner (`relay`): the same frame
//! size, heartbeat and silence limit on both, so a client cannot tell
//! which node it reached.

use std::time::Duration;

/// Largest frame a client may send, in bytes.
pub const MAX_FRAME_BYTES: usize = 64 * 1024;
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
