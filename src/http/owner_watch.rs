//! Waiting on a session's owner without hanging on it (docs/protocol.md §15):
//! a node that relays a player's WebSocket to the owner, or hands it an
//! HTTP request, watches the owner's claim while the owner is quiet. A
//! paused, frozen or cut-off owner answers nothing, yet its socket stays
//! open and nothing errs; its claim, though, stops being renewed. Once
//! the claim has lapsed (or moved to another node), the waiting side gives
//! up at once: the client is closed with `1012`, or told to try again, and
//! its next attempt claims the session on a node that answers.
//!
//! The claim is read only while the owner is quiet, so a busy relay costs
//! the database nothing. An owner that has been quiet for a lease and
//! [`GRACE`] is given up on whatever its claim says when it was pinged all
//! along (it is cut off from this node, or overloaded), or when the claim
//! cannot be read (the database unreachable from here too).

use crate::ids::SessionId;
use std::time::{Duration, Instant};

use crate::storage::Store;

/// How long an owner may say nothing before its claim is looked at. A
/// relay pings an owner silent for [`PING_AFTER`], so an owner that
/// answers is never quiet this long.
pub const QUIET: Duration = Duration::from_secs(3);
/// How long an owner may be silent before a relay pings it: an idle
/// relayed connection costs the owner a ping about every two seconds.
pub const PING_AFTER: Duration = Duration::from_millis(1500);
/// How often a relay looks at its owner's silence, and a quiet owner's
/// claim is read again.
pub const PING_EVERY: Duration = Duration::from_secs(1);
/// Past a lease of quiet, how much longer an owner whose claim cannot be
/// read (the database unreachable from here) is waited for.
pub const GRACE: Duration = Duration::from_secs(4);

/// What the database says of the owner's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The node waited on still holds a live claim: it may be slow, not gone.
    Held,
    /// No live claim, or another node's: the node waited on lost the session.
    Lost,
    /// The claim could not be read.
    Unreadable,
}

/// Reads whether the node at `owner_url` still holds `session_id`.
pub async fn look(store: &Store, session_id: &str, owner_url: &str) -> Claim {
    match store.owner_address(&SessionId::from(session_id)).await {
        Ok(Some((_, url))) if url == owner_url => Claim::Held,
        Ok(_) => Claim::Lost,
        Err(_) => Claim::Unreadable,
    }
}

/// Whether an owner quiet for `quiet`, whose claim reads `claim`, is to be
/// given up on. `pinged` says the quiet is the owner's own: it was pinged
/// all along (a relay), so an owner that holds its claim yet answers no
/// ping for a lease and [`GRACE`] is unreachable from here (a partition
/// between the nodes) or overloaded, and is given up on too. Without pings
/// (an HTTP request handed over, which may run a long turn) a held claim
/// is waited on.
pub fn gone(claim: Claim, quiet: Duration, lease: Duration, pinged: bool) -> bool {
    let long = quiet >= lease + GRACE;
    match claim {
        Claim::Lost => true,
        Claim::Held => pinged && long,
        Claim::Unreadable => long,
    }
}

/// Resolves once the owner at `owner_url`, waited on since `since`, is to
/// be given up on; never while its claim is held (a long turn is waited
/// for whole).
pub async fn until_gone(store: &Store, session_id: &str, owner_url: &str, since: Instant) {
    let lease = store.node().lease;
    actix_web::rt::time::sleep(QUIET).await;
    loop {
        let claim = look(store, session_id, owner_url).await;
        if gone(claim, since.elapsed(), lease, false) {
            return;
        }
        actix_web::rt::time::sleep(PING_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_given_up_on_when_its_claim_lapsed_or_moved_or_after_a_lease_unread() {
        let lease = Duration::from_secs(3);
        let s = Duration::from_secs;
        for pinged in [true, false] {
            // Lapsed or taken: at once.
            assert!(gone(Claim::Lost, QUIET, lease, pinged));
            // Unreadable: only past the lease and the grace.
            assert!(!gone(Claim::Unreadable, s(6), lease, pinged));
            assert!(gone(Claim::Unreadable, s(7), lease, pinged));
        }
        // A held claim: an owner that answers no ping is unreachable from
        // here past the lease and the grace; one never pinged may be
        // running a long turn, and is waited for.
        assert!(!gone(Claim::Held, s(6), lease, true));
        assert!(gone(Claim::Held, s(7), lease, true));
        assert!(!gone(Claim::Held, s(600), lease, false));
    }
}
