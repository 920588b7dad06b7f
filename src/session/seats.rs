//! The party's credentials as the HTTP layer reads them: which seat a
//! token opens, without a round trip to the session's actor.
//!
//! The session keeps it up to date each time a party change is released
//! (durable and applied), so a kicked seat's token is refused from the
//! moment its `seat_changed` frame goes out. Only digests are held (the
//! seats' `token_hash`), never a token.

use std::sync::RwLock;

use crate::game::party::{Party, SeatRole, TokenSeat};
use crate::ids::SeatId;

/// Which seat a token opens, as [`SeatBook::access`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeatAccess {
    /// An active seat, with its role now.
    Seat(SeatId, SeatRole),
    /// A seat's token, but the seat was kicked or left: refused for good.
    Gone,
    /// No seat's token.
    Unknown,
}

/// The seats of one session (their ids, roles, states and token digests),
/// shared between its actor, which writes, and the HTTP layer, which reads.
#[derive(Debug, Default)]
pub struct SeatBook {
    /// A party holding only the seats: invites and the round stay in the
    /// session.
    seats: RwLock<Party>,
}

impl SeatBook {
    /// Takes the seats of `party` when they changed.
    pub(super) fn update(&self, party: &Party) {
        // Asked on every change of the state (each turn's release): most
        // leave the seats as they were, and readers are not held up.
        let same = self
            .seats
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .seats
            == party.seats;
        if !same {
            self.seats
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .seats = party.seats.clone();
        }
    }

    /// Which seat `token` opens. `is_session_token` says whether it is the
    /// session's own `player_token` (compared by the caller in constant
    /// time): that one is the host seat's, `seat_1`.
    pub fn access(&self, token: &str, is_session_token: bool) -> SeatAccess {
        let held = self
            .seats
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match held.seat_for_token(token, is_session_token) {
            TokenSeat::Seat(seat) => SeatAccess::Seat(seat.seat_id.clone(), seat.role),
            TokenSeat::Gone => SeatAccess::Gone,
            TokenSeat::Unknown => SeatAccess::Unknown,
        }
    }

    /// The seat that holds the host role now: the one a key acts as.
    pub fn host(&self) -> Option<SeatId> {
        let held = self
            .seats
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.host().map(|s| s.seat_id.clone())
    }
}

/// A set of seats (those online), as a sorted list: a party has a few
/// seats, and an idle session with its one player online keeps one id
/// rather than a tree's node of eleven.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeatSet(Vec<SeatId>);

impl SeatSet {
    pub fn contains(&self, seat_id: &SeatId) -> bool {
        self.0.binary_search(seat_id).is_ok()
    }

    /// The seats in order.
    pub fn iter(&self) -> std::slice::Iter<'_, SeatId> {
        self.0.iter()
    }
}

impl FromIterator<SeatId> for SeatSet {
    fn from_iter<I: IntoIterator<Item = SeatId>>(seats: I) -> Self {
        let mut seats: Vec<SeatId> = seats.into_iter().collect();
        seats.sort_unstable();
        seats.dedup();
        seats.shrink_to_fit();
        Self(seats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::party::{Seat, SeatState, secret_hash};
    use crate::game::state::CharacterId;

    #[test]
    fn a_seat_token_is_found_until_the_seat_is_kicked() {
        let mut party = Party::default();
        party.ensure_host(&CharacterId::from("pc_001"), "Ayla");
        let book = SeatBook::default();
        book.update(&party);
        assert_eq!(book.host().as_ref().map(SeatId::as_str), Some("seat_1"));
        assert_eq!(
            book.access("x", true),
            SeatAccess::Seat(SeatId::from("seat_1"), SeatRole::Host)
        );
        assert_eq!(book.access("tok", false), SeatAccess::Unknown);
        let mut seat = Seat {
            seat_id: SeatId::from("seat_2"),
            character_id: CharacterId::from("pc_002"),
            name: "Brin".into(),
            role: SeatRole::Player,
            state: SeatState::Active,
            token_hash: Some(secret_hash("tok")),
            joined_at: 1,
        };
        party.seats.push(seat.clone());
        book.update(&party);
        assert_eq!(
            book.access("tok", false),
            SeatAccess::Seat(SeatId::from("seat_2"), SeatRole::Player)
        );
        seat.state = SeatState::Kicked;
        party.seats[1] = seat;
        book.update(&party);
        assert_eq!(book.access("tok", false), SeatAccess::Gone);
    }

    #[test]
    fn a_seat_set_holds_each_seat_once_in_order() {
        let set: SeatSet = ["c", "a", "b", "a"].into_iter().map(SeatId::from).collect();
        let ids: Vec<&str> = set.iter().map(|s| s.as_ref()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert!(set.contains(&SeatId::from("b")));
        assert!(!set.contains(&SeatId::from("d")));
        assert_eq!(SeatSet::default(), SeatSet::from_iter(Vec::new()));
    }
}
