// Approvals: the tool calls of a session that wait for a person's decision,
// as one connection knows them (docs/protocol.md §19). The welcome's
// snapshot lists them (`pending_approvals`, the truth as of its seq); an
// `approval_requested` frame adds one and its `approval_resolved` removes
// it. Each frame sets what it says, so the frames of a resume backlog,
// applied in order over the snapshot that already holds them, end where
// the snapshot is.

export class Approvals {
  /** approval_id -> the pending approval, as the wire gives it */
  #pending = new Map();

  /** The pending approvals, oldest first. */
  get list() {
    return [...this.#pending.values()].map((a) => ({ ...a }));
  }

  /** Whether `approvalId` waits for a decision. */
  has(approvalId) {
    return this.#pending.has(approvalId);
  }

  /** A welcome: its snapshot is the truth as of its seq. */
  welcomed(f) {
    const listed = f.state && Array.isArray(f.state.pending_approvals) ? f.state.pending_approvals : [];
    this.#pending.clear();
    for (const a of listed) {
      if (a && typeof a.approval_id === 'string') this.#pending.set(a.approval_id, pendingOf(a));
    }
  }

  /** A story frame; returns whether the pending list changed. */
  onStory(f) {
    if (f.type === 'approval_requested' && typeof f.approval_id === 'string') {
      this.#pending.set(f.approval_id, pendingOf(f));
      return true;
    }
    if (f.type === 'approval_resolved') return this.#pending.delete(f.approval_id);
    return false;
  }
}

// The fields of a pending approval (the frame's, without its type and seq).
function pendingOf(f) {
  return {
    approval_id: f.approval_id,
    turn_id: f.turn_id,
    call_id: f.call_id,
    tool: f.tool,
    args: f.args ?? {},
    seat_id: f.seat_id ?? null,
    expires_at: f.expires_at,
  };
}
