//! The party's changes, as the session core makes them (docs/protocol.md
//! §8): invites, joins, kicks, host handovers and the turn mode. Each is a
//! story frame with its effect; its caller is answered once the frame is
//! durable (and applied), never before.
//!
//! Changes still on their way to the journal are not in the state yet, so
//! what they take (an invite's use, a seat, a character id) is counted in
//! [`InFlight`] until they are released: two joins at once never share a
//! seat, a character or an invite's last use.

use tokio::sync::oneshot;

use super::Core;
use crate::error::ErrorCode;
use crate::game::Effect;
use crate::game::party::{
    Invite, MAX_LIVE_INVITES, Seat, SeatRole, SeatState, check_name, secret_hash,
};
use crate::game::state::{Character, CharacterId};
use crate::ids::SeatId;
use crate::protocol::StoryEvent;
use crate::session::messages::{
    ChatRefused, CreateInvite, HostPower, InviteMade, JoinParty, PartyCaller, SeatGiven,
    UseHostPower,
};
use crate::session::sequencer::Entry;
use crate::session::types::random_token;
use crate::storage::{now_ms, rfc3339};

/// Characters of an invite code and of a seat's token: 62^32 codes leave
/// nothing to guess.
const SECRET_CHARS: usize = 32;

/// Party changes journalled and not yet released.
#[derive(Debug, Default)]
pub(in crate::session) struct InFlight {
    /// Joins: their frame's seq, the invite used, the seat number and the
    /// character taken.
    joins: Vec<(u64, String, u32, CharacterId)>,
    /// Invites made: their frame's seq.
    invites: Vec<u64>,
}

impl InFlight {
    /// Forgets what is released by now (`released`): the state has it.
    fn settle(&mut self, released: u64) {
        self.joins.retain(|(seq, ..)| *seq > released);
        self.invites.retain(|seq| *seq > released);
    }
}

fn refuse(code: ErrorCode, message: impl Into<String>) -> ChatRefused {
    ChatRefused::new(code, message)
}

/// The one answer for every invite that opens nothing.
fn no_invite() -> ChatRefused {
    refuse(ErrorCode::InviteNotFound, crate::game::party::NO_INVITE)
}

impl Core {
    /// Whether party changes are taken now: not once closed, while the
    /// session stops, or while storage refuses work.
    pub(super) fn party_open(
        &mut self,
        storage_refusing: Option<&'static str>,
    ) -> Result<(), ChatRefused> {
        self.lifecycle.refuse_if_closed()?;
        self.lifecycle.refuse_if_going()?;
        if let Some(reason) = storage_refusing {
            return Err(refuse(ErrorCode::Overloaded, reason).with_retry_after(1000));
        }
        self.party_in_flight.settle(self.sequencer.released());
        self.touch();
        Ok(())
    }

    /// Refuses a seat that does not hold the host role now.
    fn check_host(&self, by: &PartyCaller) -> Result<(), ChatRefused> {
        match by {
            PartyCaller::Key => Ok(()),
            PartyCaller::Seat(seat)
                if self.state.party.host().is_some_and(|h| h.seat_id == *seat) =>
            {
                Ok(())
            }
            PartyCaller::Seat(_) => Err(refuse(
                ErrorCode::Forbidden,
                "only the host (or a key of the session's tenant) may do this",
            )),
        }
    }

    /// Whether `seat_id` may still speak: a kicked seat's connection that
    /// has not closed yet is refused.
    pub(in crate::session) fn seat_may_speak(&self, seat_id: &SeatId) -> Result<(), ChatRefused> {
        match self.state.party.seat(seat_id.as_str()) {
            Some(seat) if seat.state != SeatState::Active => Err(refuse(
                ErrorCode::Forbidden,
                "this seat was removed from the session",
            )),
            _ => Ok(()),
        }
    }

    /// Journals `entry` and answers `value` on the receiver once it is
    /// released.
    pub(super) fn answer_when_durable<T: Send + 'static>(
        &mut self,
        entry: Entry,
        value: T,
    ) -> (u64, oneshot::Receiver<T>) {
        let seq = self.emit(entry);
        let (tx, rx) = oneshot::channel();
        self.sequencer.when_durable(
            seq,
            Box::new(move || {
                let _ = tx.send(value);
            }),
        );
        (seq, rx)
    }

    /// The host makes an invite.
    pub(in crate::session) fn create_invite(
        &mut self,
        msg: CreateInvite,
        storage_refusing: Option<&'static str>,
    ) -> Result<oneshot::Receiver<InviteMade>, ChatRefused> {
        self.party_open(storage_refusing)?;
        self.check_host(&msg.by)?;
        let now = now_ms();
        let live = self
            .state
            .party
            .invites
            .iter()
            .filter(|i| i.usable(now))
            .count()
            + self.party_in_flight.invites.len();
        if live >= MAX_LIVE_INVITES {
            return Err(refuse(
                ErrorCode::Conflict,
                format!("the session holds {MAX_LIVE_INVITES} live invites, the most it may"),
            ));
        }
        let code = random_token(SECRET_CHARS);
        let expires_at = now + i64::from(msg.expires_in_s) * 1000;
        let invite = Invite {
            invite_id: format!("inv_{}", random_token(12)),
            code_hash: secret_hash(&code),
            max_uses: msg.max_uses,
            uses: 0,
            expires_at,
        };
        let event = StoryEvent::InviteCreated {
            invite_id: invite.invite_id.clone(),
            max_uses: invite.max_uses,
            expires_at: rfc3339(expires_at),
        };
        let entry = Entry {
            effect: Some(Effect::InviteCreated { invite, at: now }),
            ..Entry::frame(event)
        };
        let (seq, rx) = self.answer_when_durable(entry, InviteMade { code, expires_at });
        self.party_in_flight.invites.push(seq);
        Ok(rx)
    }

    /// Someone joins by invite: a seat, a token and a character of their
    /// own.
    pub(in crate::session) fn join_party(
        &mut self,
        msg: JoinParty,
        storage_refusing: Option<&'static str>,
    ) -> Result<oneshot::Receiver<SeatGiven>, ChatRefused> {
        self.party_open(storage_refusing)?;
        let name = check_name(&msg.name).map_err(|m| refuse(ErrorCode::BadRequest, m))?;
        let now = now_ms();
        let party = &self.state.party;
        let flying = &self.party_in_flight.joins;
        let invite = party
            .invite_for_code(&msg.invite_code, now)
            .ok_or_else(no_invite)?;
        let uses = invite.uses
            + flying
                .iter()
                .filter(|(_, id, ..)| *id == invite.invite_id)
                .count() as u32;
        if uses >= invite.max_uses {
            return Err(no_invite());
        }
        let cap = party.max_players.min(msg.max_players).max(1) as usize;
        if party.seated() + flying.len() >= cap {
            return Err(refuse(
                ErrorCode::SessionFull,
                format!("the session holds {cap} players, the most it may"),
            ));
        }
        let seat_no = flying
            .iter()
            .map(|(_, _, n, _)| n + 1)
            .fold(party.next_seat, u32::max);
        let taken =
            |id: &str| party.holds_character(id) || flying.iter().any(|(.., c)| c.as_str() == id);
        // The first campaign `pc` no seat holds, else a new one.
        let free = self
            .state
            .characters
            .iter()
            .find(|c| c.kind == "pc" && !taken(c.character_id.as_str()))
            .map(|c| c.character_id.clone());
        let (character_id, character) = match free {
            Some(id) => (id, None),
            None => {
                let mut n = self.state.characters.len() + 1;
                let id = loop {
                    let id = format!("pc_{n:03}");
                    if self.state.character(&id).is_none() && !taken(&id) {
                        break CharacterId::from(id);
                    }
                    n += 1;
                };
                let area_id = party
                    .host()
                    .and_then(|h| self.state.character(h.character_id.as_str()))
                    .or_else(|| self.state.active_actor())
                    .map(|c| c.area_id.clone())
                    .or_else(|| self.state.areas.first().map(|a| a.area_id.clone()))
                    .unwrap_or_else(|| "".into());
                let template = &party.pc_template;
                let character = Character {
                    character_id: id.clone(),
                    name: name.clone(),
                    kind: "pc".into(),
                    area_id,
                    hp: template.max_hp,
                    max_hp: template.max_hp,
                    level: template.level,
                    stats: template.stats.clone(),
                    inventory: Vec::new(),
                    state: Default::default(),
                };
                (id, Some(Box::new(character)))
            }
        };
        let token = random_token(SECRET_CHARS);
        let seat = Seat {
            seat_id: SeatId::from(format!("seat_{seat_no}")),
            character_id: character_id.clone(),
            name: name.clone(),
            role: SeatRole::Player,
            state: SeatState::Active,
            token_hash: Some(secret_hash(&token)),
            joined_at: now,
        };
        let invite_id = invite.invite_id.clone();
        let given = SeatGiven {
            seat_id: seat.seat_id.clone(),
            character_id: character_id.clone(),
            player_token: token,
        };
        let event = StoryEvent::SeatJoined {
            seat_id: seat.seat_id.clone(),
            character_id: character_id.clone(),
            name,
        };
        let entry = Entry {
            effect: Some(Effect::SeatJoined {
                seat,
                character,
                invite_id: invite_id.clone(),
                invite_uses: uses + 1,
            }),
            ..Entry::frame(event)
        };
        let (seq, rx) = self.answer_when_durable(entry, given);
        self.party_in_flight
            .joins
            .push((seq, invite_id, seat_no, character_id));
        Ok(rx)
    }

    /// The host (or a key) kicks, hands the role over or switches the
    /// mode; a seat (or a key) makes it leave.
    pub(in crate::session) fn host_power(
        &mut self,
        msg: UseHostPower,
        storage_refusing: Option<&'static str>,
    ) -> Result<oneshot::Receiver<()>, ChatRefused> {
        self.party_open(storage_refusing)?;
        match &msg.power {
            HostPower::Leave(seat_id) => check_own_seat(&msg.by, seat_id)?,
            _ => self.check_host(&msg.by)?,
        }
        let party = &self.state.party;
        let active_seat = |seat_id: &SeatId| {
            party
                .seat(seat_id.as_str())
                .filter(|s| s.state == SeatState::Active)
                .ok_or_else(|| {
                    // A path's id is echoed only within an id's bound: the
                    // URL may hold tens of kilobytes of it.
                    let id = seat_id.as_str();
                    let shown = if id.chars().count() <= crate::game::campaign::MAX_ID_CHARS {
                        format!("no active seat {id}")
                    } else {
                        "no active seat with that id".to_owned()
                    };
                    refuse(ErrorCode::NotFound, shown)
                })
        };
        let changed = |seat: &Seat, role: SeatRole, state: SeatState| Entry {
            effect: Some(Effect::SeatChanged {
                seat_id: seat.seat_id.clone(),
                role,
                state,
            }),
            ..Entry::frame(StoryEvent::SeatChanged {
                seat_id: seat.seat_id.clone(),
                state,
                role,
            })
        };
        let entries = match &msg.power {
            HostPower::Kick(seat_id) | HostPower::Leave(seat_id) => {
                let seat = active_seat(seat_id)?;
                let (state, cannot) = match msg.power {
                    HostPower::Kick(_) => (SeatState::Kicked, "the host cannot be kicked"),
                    _ => (SeatState::Left, "the host cannot leave"),
                };
                if seat.role == SeatRole::Host {
                    return Err(refuse(
                        ErrorCode::Conflict,
                        format!("{cannot}; hand the host role to another seat first"),
                    ));
                }
                vec![changed(seat, SeatRole::Player, state)]
            }
            HostPower::MakeHost(seat_id) => {
                let seat = active_seat(seat_id)?;
                if seat.role == SeatRole::Host {
                    vec![]
                } else {
                    let mut entries = vec![changed(seat, SeatRole::Host, SeatState::Active)];
                    entries.extend(
                        party
                            .host()
                            .map(|old| changed(old, SeatRole::Player, SeatState::Active)),
                    );
                    entries
                }
            }
            HostPower::Mode {
                turn_mode,
                round_timeout_s,
            } => vec![Entry {
                effect: Some(Effect::ModeChanged {
                    turn_mode: *turn_mode,
                    round_timeout_s: *round_timeout_s,
                }),
                ..Entry::frame(StoryEvent::ModeChanged {
                    turn_mode: *turn_mode,
                    round_timeout_s: *round_timeout_s,
                })
            }],
        };
        let Some(last) = entries.len().checked_sub(1) else {
            // Nothing to change: answered at once.
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(());
            return Ok(rx);
        };
        let mut answer = None;
        for (i, entry) in entries.into_iter().enumerate() {
            if i == last {
                answer = Some(self.answer_when_durable(entry, ()).1);
            } else {
                self.emit(entry);
            }
        }
        answer.ok_or_else(ChatRefused::reloading)
    }
}

/// A seat leaves by its own token; a key acts for any seat. The host
/// removes another seat with a kick instead.
fn check_own_seat(by: &PartyCaller, seat_id: &SeatId) -> Result<(), ChatRefused> {
    match by {
        PartyCaller::Key => Ok(()),
        PartyCaller::Seat(own) if own == seat_id => Ok(()),
        PartyCaller::Seat(_) => Err(refuse(
            ErrorCode::Forbidden,
            "a seat leaves with its own token; the host may kick another seat",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::core::Command;
    use crate::session::core::tests::core;

    /// Makes everything journalled durable and tells its waiters, as the
    /// actor does.
    fn durable(core: &mut Core) {
        let up_to = core.sequencer.last_staged();
        core.durable(up_to);
        while let Some(command) = core.next_command() {
            if let Command::Tell(waiters) = command {
                waiters.into_iter().for_each(|w| w());
            }
        }
    }

    fn invite(core: &mut Core, max_uses: u32) -> String {
        let msg = CreateInvite {
            by: PartyCaller::Key,
            max_uses,
            expires_in_s: 60,
        };
        let mut rx = core.create_invite(msg, None).expect("invite taken");
        assert!(rx.try_recv().is_err(), "not answered before it is durable");
        durable(core);
        rx.try_recv().expect("answered once durable").code
    }

    fn join(
        core: &mut Core,
        code: &str,
        name: &str,
        cap: u32,
    ) -> Result<oneshot::Receiver<SeatGiven>, ChatRefused> {
        let msg = JoinParty {
            invite_code: code.into(),
            name: name.into(),
            max_players: cap,
        };
        core.join_party(msg, None)
    }

    #[test]
    fn joins_on_their_way_to_the_journal_never_share_a_seat_a_character_or_a_last_use() {
        let mut core = core();
        let once = invite(&mut core, 1);
        let mut first = join(&mut core, &once, "Brin", 8).expect("first join");
        let second = join(&mut core, &once, "Cara", 8).expect_err("the last use is taken");
        assert_eq!(second.code, ErrorCode::InviteNotFound);
        let twice = invite(&mut core, 2);
        let mut third = join(&mut core, &twice, "Cara", 8).expect("another invite");
        durable(&mut core);
        let (brin, cara) = (first.try_recv().unwrap(), third.try_recv().unwrap());
        assert_eq!(
            (brin.seat_id.as_str(), cara.seat_id.as_str()),
            ("seat_2", "seat_3")
        );
        assert_ne!(brin.character_id, cara.character_id);
        assert!(core.state.character(brin.character_id.as_str()).is_some());
        // Three seats of a cap of three: the next is refused while nothing
        // is in flight, and so is one past a join in flight.
        let full = join(&mut core, &twice, "Dara", 3).expect_err("full");
        assert_eq!(full.code, ErrorCode::SessionFull);
        let more = invite(&mut core, 5);
        let _in_flight = join(&mut core, &more, "Dara", 4).expect("the fourth seat");
        let full = join(&mut core, &more, "Eli", 4).expect_err("full with one in flight");
        assert_eq!(full.code, ErrorCode::SessionFull);
    }

    #[test]
    fn host_powers_are_the_hosts_and_the_host_cannot_be_kicked() {
        let mut core = core();
        let code = invite(&mut core, 1);
        join(&mut core, &code, "Brin", 8).unwrap();
        durable(&mut core);
        let power = |by: PartyCaller, power: HostPower| UseHostPower { by, power };
        let seat = |n: &str| SeatId::from(n);
        let refused = core
            .host_power(
                power(
                    PartyCaller::Seat(seat("seat_2")),
                    HostPower::Kick(seat("seat_1")),
                ),
                None,
            )
            .expect_err("a player is no host");
        assert_eq!(refused.code, ErrorCode::Forbidden);
        let refused = core
            .host_power(
                power(PartyCaller::Key, HostPower::Kick(seat("seat_1"))),
                None,
            )
            .expect_err("the host stays");
        assert_eq!(refused.code, ErrorCode::Conflict);
        let mut handed = core
            .host_power(
                power(
                    PartyCaller::Seat(seat("seat_1")),
                    HostPower::MakeHost(seat("seat_2")),
                ),
                None,
            )
            .unwrap();
        durable(&mut core);
        handed.try_recv().expect("answered once durable");
        assert_eq!(
            core.state.party.host().map(|h| h.seat_id.as_str()),
            Some("seat_2")
        );
        core.host_power(
            power(
                PartyCaller::Seat(seat("seat_2")),
                HostPower::Kick(seat("seat_1")),
            ),
            None,
        )
        .expect("the old host is a player now");
        durable(&mut core);
        assert!(core.seat_may_speak(&seat("seat_1")).is_err());
    }

    #[test]
    fn a_seat_leaves_by_its_own_token_and_the_host_cannot_leave() {
        let mut core = core();
        let code = invite(&mut core, 2);
        join(&mut core, &code, "Brin", 8).unwrap();
        join(&mut core, &code, "Cara", 8).unwrap();
        durable(&mut core);
        let seat = |n: &str| SeatId::from(n);
        fn leave(
            core: &mut Core,
            by: PartyCaller,
            seat_id: &str,
        ) -> Result<oneshot::Receiver<()>, ChatRefused> {
            let power = HostPower::Leave(SeatId::from(seat_id));
            core.host_power(UseHostPower { by, power }, None)
        }
        for by in [
            PartyCaller::Seat(seat("seat_1")),
            PartyCaller::Seat(seat("seat_3")),
        ] {
            let refused = leave(&mut core, by, "seat_2").expect_err("not its own seat");
            assert_eq!(refused.code, ErrorCode::Forbidden);
        }
        let host = PartyCaller::Seat(seat("seat_1"));
        let refused = leave(&mut core, host, "seat_1").expect_err("the host");
        assert_eq!(refused.code, ErrorCode::Conflict);
        let own = PartyCaller::Seat(seat("seat_2"));
        let mut left = leave(&mut core, own, "seat_2").expect("its own seat");
        assert!(
            left.try_recv().is_err(),
            "not answered before it is durable"
        );
        durable(&mut core);
        left.try_recv().expect("answered once durable");
        let brin = core.state.party.seat("seat_2").unwrap();
        assert_eq!(brin.state, SeatState::Left);
        assert!(core.seat_may_speak(&seat("seat_2")).is_err());
        assert_eq!(
            core.state.party.seated(),
            2,
            "a seat that left takes no place"
        );
        let refused = leave(&mut core, PartyCaller::Key, "seat_2").expect_err("gone already");
        assert_eq!(refused.code, ErrorCode::NotFound);
        leave(&mut core, PartyCaller::Key, "seat_3").expect("a key makes any seat leave");
    }
}
