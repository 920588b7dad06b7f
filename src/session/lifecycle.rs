//! Where a session stands in its life: open, draining for a node's
//! restart, being closed by an operator, closed, or stopping. One value
//! with its transitions in one pure function ([`Lifecycle::next`]), so
//! every combination of a drain, a close and a stop is written down and
//! tested here; the session asks it whether to take work and how to close
//! its connections once the work taken is done.

use super::messages::ChatRefused;
use super::types::{CLOSE_SESSION_CLOSED, CLOSE_SESSION_MOVED, CLOSED_BY_OPERATOR};

/// Why a drained session closes its connections: it restarts elsewhere.
pub const RESTARTING: &str = "this node is restarting; reconnect";

/// A session's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Lifecycle {
    /// Takes work.
    #[default]
    Open,
    /// The node is shutting down: no new work; unload once the work taken
    /// is done.
    Draining,
    /// An operator closed the session at `at` (ms since the epoch) and the
    /// close is being stored: no new work or connections from then on.
    /// `draining` keeps a drain asked meanwhile, for when the close fails.
    Closing { at: i64, draining: bool },
    /// The close at `at` is durable: once the work taken is done, every
    /// connection is closed for good and the session unloads.
    Closed { at: i64 },
    /// Unloading, or storage failed: no more frames, nothing new. Keeps
    /// when an operator closed it, if one did, so a late chat still hears
    /// that the session is closed.
    Stopping { closed_at: Option<i64> },
}

/// What happens to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    /// The node drains.
    Drain,
    /// An operator closes the session now (ms since the epoch).
    Close { now: i64 },
    /// The close at `at` is durable.
    CloseStored { at: i64 },
    /// Storing the close failed.
    CloseFailed,
    /// The session unloads or its storage failed.
    Stop,
}

impl Lifecycle {
    /// The session after `event`.
    pub(super) fn next(self, event: Event) -> Self {
        use Lifecycle::*;
        match (self, event) {
            (Stopping { .. }, _) => self,
            (_, Event::Stop) => Stopping {
                closed_at: self.closed_at(),
            },
            (Open, Event::Drain) => Draining,
            (Closing { at, .. }, Event::Drain) => Closing { at, draining: true },
            (Open, Event::Close { now }) => Closing {
                at: now,
                draining: false,
            },
            (Draining, Event::Close { now }) => Closing {
                at: now,
                draining: true,
            },
            (Open | Draining | Closing { .. }, Event::CloseStored { at }) => Closed { at },
            (Closing { draining, .. }, Event::CloseFailed) if draining => Draining,
            (Closing { .. }, Event::CloseFailed) => Open,
            (
                same @ (Open | Draining | Closed { .. } | Closing { .. }),
                Event::Drain | Event::Close { .. } | Event::CloseStored { .. } | Event::CloseFailed,
            ) => same,
        }
    }

    /// When an operator closed the session, if one did (the close may not
    /// be durable yet).
    pub(super) fn closed_at(self) -> Option<i64> {
        match self {
            Self::Closing { at, .. } | Self::Closed { at } => Some(at),
            Self::Stopping { closed_at } => closed_at,
            _ => None,
        }
    }

    /// Whether the session stops: it sends no more frames.
    pub(super) fn stopping(self) -> bool {
        matches!(self, Self::Stopping { .. })
    }

    /// Whether a new chat or call is refused as the session going away
    /// (the caller retries, and reaches the next owner).
    pub(super) fn refuses_work(self) -> bool {
        matches!(self, Self::Draining | Self::Stopping { .. })
    }

    /// Refuses new work while [`Lifecycle::refuses_work`], saying why: the
    /// node restarting, or the session reloading.
    pub(super) fn refuse_if_going(self) -> Result<(), ChatRefused> {
        match self {
            Self::Draining => Err(ChatRefused::restarting()),
            Self::Stopping { .. } => Err(ChatRefused::reloading()),
            _ => Ok(()),
        }
    }

    /// The refusal of new work once an operator closed the session.
    pub(super) fn refuse_if_closed(self) -> Result<(), ChatRefused> {
        match self.closed_at() {
            Some(_) => Err(ChatRefused::closed()),
            None => Ok(()),
        }
    }

    /// How the connections are closed once the work taken is done: for
    /// good after a close, for a reconnect elsewhere after a drain; `None`
    /// while the session goes on (or already stops).
    pub(super) fn close_when_done(self) -> Option<(u16, &'static str)> {
        match self {
            Self::Closed { .. } => Some((CLOSE_SESSION_CLOSED, CLOSED_BY_OPERATOR)),
            Self::Draining | Self::Closing { draining: true, .. } => {
                Some((CLOSE_SESSION_MOVED, RESTARTING))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Event::*;
    use super::Lifecycle::*;
    use super::*;

    const STOPPING: Lifecycle = Stopping { closed_at: None };

    #[test]
    fn each_event_moves_the_session_as_the_table_says() {
        let closing = |at, draining| Closing { at, draining };
        // (before, event, after)
        let cases = [
            (Open, Drain, Draining),
            (Open, Close { now: 5 }, closing(5, false)),
            (Open, CloseStored { at: 5 }, Closed { at: 5 }),
            (Open, CloseFailed, Open),
            (Open, Stop, STOPPING),
            (Draining, Drain, Draining),
            (Draining, Close { now: 5 }, closing(5, true)),
            (Draining, CloseFailed, Draining),
            (Draining, Stop, STOPPING),
            // A second close keeps the first one's time.
            (closing(5, false), Close { now: 9 }, closing(5, false)),
            (closing(5, false), Drain, closing(5, true)),
            (closing(5, false), CloseStored { at: 5 }, Closed { at: 5 }),
            (closing(5, true), CloseStored { at: 5 }, Closed { at: 5 }),
            (closing(5, false), CloseFailed, Open),
            (closing(5, true), CloseFailed, Draining),
            (closing(5, true), Stop, Stopping { closed_at: Some(5) }),
            // Closed is for good: a failed second close changes nothing.
            (Closed { at: 5 }, Close { now: 9 }, Closed { at: 5 }),
            (Closed { at: 5 }, CloseFailed, Closed { at: 5 }),
            (Closed { at: 5 }, Drain, Closed { at: 5 }),
            (Closed { at: 5 }, Stop, Stopping { closed_at: Some(5) }),
            // Nothing brings a stopping session back.
            (STOPPING, Drain, STOPPING),
            (STOPPING, Close { now: 5 }, STOPPING),
            (STOPPING, CloseStored { at: 5 }, STOPPING),
            (STOPPING, CloseFailed, STOPPING),
            (STOPPING, Stop, STOPPING),
        ];
        for (before, event, after) in cases {
            assert_eq!(before.next(event), after, "{before:?} on {event:?}");
        }
    }

    #[test]
    fn what_a_session_refuses_and_how_it_closes_when_done() {
        let closed = Some((CLOSE_SESSION_CLOSED, CLOSED_BY_OPERATOR));
        let moved = Some((CLOSE_SESSION_MOVED, RESTARTING));
        // (state, refuses work as going away, refuses as closed, closes when done)
        let cases = [
            (Open, false, false, None),
            (Draining, true, false, moved),
            (
                Closing {
                    at: 1,
                    draining: false,
                },
                false,
                true,
                None,
            ),
            (
                Closing {
                    at: 1,
                    draining: true,
                },
                false,
                true,
                moved,
            ),
            (Closed { at: 1 }, false, true, closed),
            (STOPPING, true, false, None),
            (Stopping { closed_at: Some(1) }, true, true, None),
        ];
        for (state, going, closed_refusal, when_done) in cases {
            assert_eq!(state.refuses_work(), going, "{state:?}");
            assert_eq!(state.refuse_if_going().is_err(), going, "{state:?}");
            assert_eq!(
                state.refuse_if_closed().is_err(),
                closed_refusal,
                "{state:?}"
            );
            assert_eq!(state.close_when_done(), when_done, "{state:?}");
        }
        // Why a session going away refuses: the node restarting (the
        // caller goes to the next node), or the session reloading.
        for (state, code) in [
            (Draining, crate::error::ErrorCode::Overloaded),
            (STOPPING, crate::error::ErrorCode::InternalError),
        ] {
            let refused = state.refuse_if_going().expect_err("refused");
            assert_eq!(refused.code, code, "{state:?}");
            assert!(refused.is_reloading(), "{state:?}: looked up again");
        }
    }
}
