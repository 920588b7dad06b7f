// @questd/client: a client for questd game sessions (docs/protocol.md), for
// browsers and Node (a global WebSocket and fetch). No dependencies.

export { Questd } from './client.js';
export { Connection, DEFAULTS } from './connection.js';
export { ClientCode, QuestdError } from './errors.js';

