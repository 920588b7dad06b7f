// Party: the seats of a session and the state of its round, as one
// connection knows them (docs/protocol.md §8). The welcome's snapshot gives
// the seats and the turn mode; the story frames keep them current
// (`seat_joined`, `seat_changed`, `presence.seats`, `mode_changed`), and
// `action_submitted` / a round's `turn_started` say who has acted in the
// round that is open. Each frame sets what it says, so the frames of a
// resume backlog, applied in order over the snapshot that already holds
// them, end where the snapshot is; only an old `presence` is skipped.

export class Party {
  /** seat_id -> {seat_id, character_id, name, role, state, online} */
  #seats = new Map();
  #acted = new Set(); // seats that acted in the open round

  constructor() {
    /** This connection's seat and character (a player's welcome says them); null for a spectator. */
    this.seatId = null;
    this.characterId = null;
    /** `free` or `rounds`. */
    this.turnMode = 'free';
    /** Rounds mode: seconds from a round's first action to its deadline, once known. */
    this.roundTimeoutS = null;
    /** The round actions now go to: the last one acted in or resolved, plus one; null before any is seen. */
    this.round = null;
  }

  /** The seats, in the order they were taken. */
  get seats() {
    return [...this.#seats.values()].map((s) => ({ ...s }));
  }

  /** `{round, acted}`: the open round and the seats that have acted in it. */
  get roundState() {
    return { round: this.round, acted: [...this.#acted] };
  }

  /** A welcome: its snapshot is the truth as of its seq. Returns whether anything changed. */
  welcomed(f, reset) {
    this.seatId = typeof f.seat_id === 'string' ? f.seat_id : null;
    this.characterId = typeof f.character_id === 'string' ? f.character_id : null;
    const state = f.state || {};
    if (Array.isArray(state.seats)) {
      const online = new Map([...this.#seats].map(([id, s]) => [id, s.online]));
      this.#seats.clear();
      for (const s of state.seats) {
        if (s && typeof s.seat_id === 'string') {
          this.#seats.set(s.seat_id, { online: online.get(s.seat_id) ?? false, ...s });
        }
      }
    }
    if (state.turn_mode === 'free' || state.turn_mode === 'rounds') this.turnMode = state.turn_mode;
    if (typeof state.round_timeout_s === 'number') this.roundTimeoutS = state.round_timeout_s;
    if (state.round && typeof state.round.number === 'number') {
      this.round = state.round.number;
      this.#acted = new Set(Array.isArray(state.round.acted) ? state.round.acted : []);
    } else if (reset || this.turnMode === 'free') {
      // Frames a reset lost may have resolved the round.
      this.#acted.clear();
    }
    return true;
  }

  /**
   * A story frame; `live` is false for one of a resume backlog, whose
   * effect the welcome's snapshot holds. Returns what changed: a set of
   * 'seats' and 'round'.
   */
  onStory(f, live) {
    const changed = new Set();
    switch (f.type) {
      case 'seat_joined': {
        const was = this.#seats.get(f.seat_id);
        this.#seats.set(f.seat_id, {
          seat_id: f.seat_id,
          character_id: f.character_id,
          name: f.name,
          role: was ? was.role : 'player',
          state: was ? was.state : 'active',
          online: was ? was.online : false,
        });
        changed.add('seats');
        break;
      }
      case 'seat_changed': {
        const seat = this.#seats.get(f.seat_id) || { seat_id: f.seat_id, character_id: null, name: f.seat_id, online: false };
        if (f.state) seat.state = f.state;
        if (f.role) seat.role = f.role;
        if (seat.state !== 'active') seat.online = false;
        this.#seats.set(f.seat_id, seat);
        changed.add('seats');
        break;
      }
      case 'presence':
        // An old presence is older news than the snapshot's.
        if (!live) break;
        for (const s of Array.isArray(f.seats) ? f.seats : []) {
          const seat = this.#seats.get(s.seat_id);
          if (seat && seat.online !== Boolean(s.online)) {
            seat.online = Boolean(s.online);
            changed.add('seats');
          }
        }
        break;
      case 'mode_changed':
        this.turnMode = f.turn_mode;
        this.roundTimeoutS = f.round_timeout_s ?? null;
        this.#acted.clear();
        changed.add('round');
        break;
      case 'action_submitted':
        if (this.round !== f.round) this.#acted.clear();
        this.round = f.round;
        this.#acted.add(f.seat_id);
        changed.add('round');
        break;
      case 'turn_started':
        if (typeof f.round === 'number') {
          this.round = f.round + 1;
          this.#acted.clear();
          changed.add('round');
        }
        break;
      default:
    }
    return changed;
  }
}
