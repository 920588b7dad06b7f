// Colyseus peer for the questd side-by-side benchmark.
//
// One room type, "game", that does what one questd turn does on the wire when
// there is no model and no persistence: a player's "chat" message is checked,
// acknowledged, a roll_dice tool "runs" (a random 1d6) and four story frames
// go to every client of the room, each with the next seq:
//   turn_started, tool_call, tool_result, turn_completed.
// A client that joined with {role:"spectator"} may not chat (error FORBIDDEN).
// Frame payloads carry the same fields as questd's frames (docs/protocol.md §2);
// Colyseus sends them as msgpack inside its own room protocol.
//
// Start: PORT=2567 node server.mjs   (HOST defaults to 127.0.0.1)

import { Server, Room } from "@colyseus/core";
import { WebSocketTransport } from "@colyseus/ws-transport";

const PORT = Number(process.env.PORT || process.env.COLYSEUS_PORT || 2567);
const HOST = process.env.HOST || "127.0.0.1";
const MAX_TEXT_CHARS = 4000;
const MAX_REQUEST_ID_CHARS = 128;
const LISTEN_BACKLOG = 4096; // the kernel's somaxconn here; Node's default is 511

function errorFrame(requestId, code, message) {
  return { type: "error", request_id: requestId ?? null, error_code: code, message };
}

class GameRoom extends Room {
  onCreate() {
    this.seq = 0; // last story seq sent in this room
    this.turns = 0; // turns started in this room
    this.requests = new Map(); // request_id -> turn_id, for duplicate chats
    this.onMessage("chat", (client, msg) => this.chat(client, msg));
    this.onMessage("ping", (client, msg) => client.send("pong", { type: "pong", nonce: msg?.nonce ?? null }));
    this.onMessage("*", (client, type) =>
      client.send("error", errorFrame(null, "INVALID_FRAME", `unknown message type ${String(type).slice(0, 40)}`)));
  }

  onJoin(client, options) {
    const role = options && options.role === "spectator" ? "spectator" : "player";
    client.userData = { role };
    client.send("welcome", { type: "welcome", session_id: this.roomId, role, seq: this.seq, resumed: false });
  }

  chat(client, msg) {
    const requestId = msg && typeof msg.request_id === "string" ? msg.request_id : undefined;
    if (client.userData?.role !== "player") {
      client.send("error", errorFrame(requestId, "FORBIDDEN", "spectators may not chat"));
      return;
    }
    if (msg === null || typeof msg !== "object" || typeof msg.text !== "string"
      || (msg.request_id !== undefined && typeof msg.request_id !== "string")) {
      client.send("error", errorFrame(requestId, "INVALID_FRAME", "chat needs a string text"));
      return;
    }
    const text = msg.text.trim();
    if (text.length === 0) {
      client.send("error", errorFrame(requestId, "INVALID_FRAME", "chat text is empty"));
      return;
    }
    if (text.length > MAX_TEXT_CHARS || (requestId && requestId.length > MAX_REQUEST_ID_CHARS)) {
      client.send("error", errorFrame(requestId, "TEXT_TOO_LONG", "chat text or request_id too long"));
      return;
    }
    if (requestId !== undefined) {
      const first = this.requests.get(requestId);
      if (first !== undefined) {
        client.send("ack", { type: "ack", request_id: requestId, turn_id: first, duplicate: true, queued: 0 });
        return;
      }
    }

    const turnId = `turn_${++this.turns}`;
    if (requestId !== undefined) this.requests.set(requestId, turnId);
    client.send("ack", { type: "ack", request_id: requestId ?? null, turn_id: turnId, duplicate: false, queued: 0 });

    this.broadcast("turn_started", {
      type: "turn_started", seq: ++this.seq, turn_id: turnId, request_id: requestId ?? null,
      actor_id: "pc_001", text,
    });
    const started = performance.now();
    const args = { dice: "1d6" };
    this.broadcast("tool_call", {
      type: "tool_call", seq: ++this.seq, turn_id: turnId, iteration: 1, call_id: "call_1",
      tool: "roll_dice", args,
    });
    const roll = 1 + Math.floor(Math.random() * 6);
    const result = { dice: "1d6", rolls: [roll], total: roll };
    this.broadcast("tool_result", {
      type: "tool_result", seq: ++this.seq, turn_id: turnId, call_id: "call_1", tool: "roll_dice",
      status: "ok", result, duration_ms: Math.round((performance.now() - started) * 1000) / 1000,
    });
    this.broadcast("turn_completed", {
      type: "turn_completed", seq: ++this.seq, turn_id: turnId, reply: `You roll 1d6: ${roll}.`,
      dialog_type: "narration", iterations: 1,
      tool_events: [{ call_id: "call_1", tool: "roll_dice", status: "ok", result }],
      state_patch: {}, usage: { prompt_tokens: 0, completion_tokens: 0 },
    });
  }
}

const server = new Server({ transport: new WebSocketTransport(), greet: false });
server.define("game", GameRoom);
await server.listen(PORT, HOST, LISTEN_BACKLOG);
console.log(`colyseus peer listening on ws://${HOST}:${PORT} (pid ${process.pid}, node ${process.version})`);
