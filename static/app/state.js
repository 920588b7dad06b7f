// The game as the page knows it: `game` (the session shown and what the
// views keep between frames) and its snapshot, kept current from tool
// results, the `state_patch` of each turn and re-reads; and the snapshot's
// lookups (characters, areas, zones, names in the page's language). The
// views redraw through the one callback given to onChange: the state knows
// no view.

import { Questd } from '/client/index.js';
import { $ } from './dom.js';
import { lang, t } from './language.js';

// This server (the page's origin).
export const questd = new Questd();

export const game = {
  id: null,
  token: null,
  role: null,
  characterId: null,    // this player's character (the welcome's), else the session's hero
  snapshot: null,
  conn: null,           // the Connection (@questd/client)
  connState: null,      // what the page shows: connecting, live, reconnecting, closed
  retrying: false,      // an attempt failed since the last welcome (or before the first)
  welcomed: false,      // a welcome arrived on some connection
  lastSeq: null,        // the last story frame shown
  fullStory: false,     // the first connection replayed the story from its start
  opening: null,        // what the opening card shows, fixed when first known
  historyLoading: false,
  deferred: [],         // live frames held while the recent story loads
  container: null,      // where new turn boxes go (#live, or #history while loading it)
  turns: new Map(),     // turn_id -> { box, bubble, gotNarrative, tools: its summary line and cards (cards.js) }
  calls: new Map(),     // turn_id/call_id -> { card, tools, args, tool, status, result, reason, error_code }
  pending: [],          // the connection's chats not yet settled, as its 'outbox' event lists them
  outbox: new Map(),    // request_id -> { requestId, text, state, queued, retryAt, node }: the ones shown
  knownAreas: new Map(),  // area_id -> when it was first drawn (new ones fade in)
  mapView: 'areas',
  mapScale: null,       // the area map's chosen zoom: pixels per unit, 'fit', or null (readable)
  mapZoom: 0,           // the area map's zoom as last drawn, in pixels per unit
  mapScales: [],        // the zoom steps of the map as last drawn, the first fits it to its card
  mapZoomed: false,     // the map is larger than its card and scrolls
  refreshTimer: null,
  follow: true,         // the timeline sticks to its end
  scrollPending: false, // a scroll to the end is booked for the next frame
  autoScrollTop: -1,    // where the page itself last scrolled the story to
  newAreaTimer: null,   // redraws the map when new areas stop being new
  centredOn: null,      // the area the zoomed map was last centred on
};

// What redraws the views after the snapshot changed (set by the entry).
let changed = () => {};

export function onChange(fn) {
  changed = fn;
}

export function character(id) {
  return game.snapshot && game.snapshot.characters.find((c) => c.character_id === id);
}

export function area(id) {
  return game.snapshot && game.snapshot.areas.find((a) => a.area_id === id);
}

// The campaign's Chinese name of an area, character, item (`item_<slug>`)
// or of the campaign itself (its id), from the snapshot's `names_zh`,
// shown while the page is in Chinese; null otherwise.
function chinese(id) {
  const names = lang === 'zh' && game.snapshot && game.snapshot.names_zh;
  const zh = names && Object.prototype.hasOwnProperty.call(names, id) ? names[id] : null;
  return zh && zh.name ? zh : null;
}

// An area's or character's name in the page's language.
export function nameOf(thing) {
  if (!thing) return '';
  // A character has an area_id too: its own id goes first.
  const zh = chinese(thing.character_id || thing.area_id);
  return zh ? zh.name : thing.name;
}

// An area's description in the page's language.
export function descriptionOf(a) {
  const zh = chinese(a.area_id);
  return zh && zh.description ? zh.description : a.description || '';
}

// The Chinese name of anything `names_zh` names, by its id, while the page
// is in Chinese; else the name given.
export function localName(id, name) {
  const zh = chinese(id);
  return zh ? zh.name : name;
}

// An inventory item's name in the page's language (by its slug).
export function itemName(item) {
  if (!item) return '';
  const zh = item.slug && chinese('item_' + item.slug);
  return zh ? zh.name : item.name || item.slug || '';
}

// An inventory item's description in the page's language.
export function itemDescription(item) {
  const zh = item && item.slug && chinese('item_' + item.slug);
  return zh && zh.description ? zh.description : (item && item.description) || '';
}

// The name of the item with this slug, as the hero or anyone here carries it.
export function itemNameBySlug(slug) {
  const s = game.snapshot;
  const held = s && s.characters.flatMap((c) => c.inventory || []).find((i) => i.slug === slug);
  return itemName(held || { slug, name: slug });
}

// The campaign's title in the page's language.
export function campaignTitle() {
  const s = game.snapshot;
  if (!s) return '';
  const zh = s.campaign_id && chinese(s.campaign_id);
  return zh ? zh.name : s.title || '';
}

// The header and the tab's title: the campaign's, in the page's language.
export function showTitle() {
  const title = campaignTitle();
  if (!title) return;
  $('session-title').textContent = title;
  document.title = `${title} · questd`;
}

export function areaName(id) {
  const a = area(id);
  return a ? nameOf(a) : id;
}

export function zoneName(id) {
  if (!id) return t('tool.nowhere');
  const z = game.snapshot && (game.snapshot.zones || []).find((x) => x.zone_id === id);
  return z ? z.name : id;
}

// Tools whose results carry their whole effect; others trigger a snapshot re-read.
export const APPLIED_TOOLS = new Set([
  'move', 'move_options', 'hp_delta', 'roll_dice', 'map_generate', 'get_character_stats',
  'generate_zone', 'move_to_zone', 'get_player_state', 'add_inventory', 'update_inventory',
  'update_character', 'search_content', 'get_site_map', 'get_npc_profile', 'describe_entity',
  'get_prompt_active', 'log_user_event', 'create_draft_content',
]);

// The hero this page plays (a player's own character, from the welcome),
// or the session's hero for a spectator.
export function activeCharacter() {
  const s = game.snapshot;
  if (!s) return null;
  const find = (id) => id && s.characters.find((c) => c.character_id === id);
  return find(game.characterId) || find(s.active_actor_id) || s.characters[0] || null;
}

// The seats of the session as the connection knows them (docs/protocol.md §8).
export function seats() {
  return game.conn ? game.conn.seats : [];
}

// The name a seat goes by: its character's, in the page's language, else
// the name it joined with; null for a seat not known.
export function seatName(seatId) {
  const seat = seats().find((x) => x.seat_id === seatId);
  if (!seat) return null;
  const c = character(seat.character_id);
  return c ? nameOf(c) : seat.name;
}

function upsert(list, item, key) {
  const i = list.findIndex((x) => x[key] === item[key]);
  if (i >= 0) list[i] = Object.assign({}, list[i], item);
  else list.push(item);
}

// Applies a successful tool result to the local snapshot (idempotent).
export function applyResult(tool, args, r) {
  const s = game.snapshot;
  if (!s) return;
  const who = (id) => s.characters.find((c) => c.character_id === id);
  switch (tool) {
    case 'move': {
      const c = who(r.actor_id || args.actor_id);
      if (c && r.to_area_id) c.area_id = r.to_area_id;
      break;
    }
    case 'hp_delta': {
      const c = who(r.character_id);
      if (c) Object.assign(c, { hp: r.hp, max_hp: r.max_hp, state: r.state });
      break;
    }
    case 'map_generate':
      for (const a of r.areas || []) upsert(s.areas, a, 'area_id');
      // `connections` (pairs); results stored before it had them as
      // `created_connections`, which is now their count.
      for (const [a, b] of r.connections || (Array.isArray(r.created_connections) ? r.created_connections : [])) link(a, b);
      break;
    case 'get_character_stats': {
      const copy = Object.assign({}, r);
      delete copy.area_name;
      if (copy.character_id) upsert(s.characters, copy, 'character_id');
      break;
    }
    case 'update_character':
      if (r.character) upsert(s.characters, r.character, 'character_id');
      break;
    case 'add_inventory':
    case 'update_inventory': {
      const c = who(r.character_id);
      if (c && Array.isArray(r.inventory)) c.inventory = r.inventory;
      break;
    }
    case 'generate_zone':
      s.zones = s.zones || [];
      for (const z of r.zones || []) upsert(s.zones, z, 'zone_id');
      break;
    case 'move_to_zone':
      s.player = s.player || {};
      s.player.current_zone_id = r.to_zone_id;
      if (r.position) s.player.position = r.position;
      break;
    default:
      return; // reads and rolls change nothing on screen
  }
  changed();
}

function link(a, b) {
  for (const [x, y] of [[a, b], [b, a]]) {
    const ax = area(x);
    if (ax) {
      ax.reachable_area_ids = ax.reachable_area_ids || [];
      if (!ax.reachable_area_ids.includes(y)) ax.reachable_area_ids.push(y);
    }
  }
}

export function applyPatch(p) {
  const s = game.snapshot;
  if (!s || !p) return;
  for (const a of p.areas || []) upsert(s.areas, a, 'area_id');
  for (const c of p.characters || []) upsert(s.characters, c, 'character_id');
  if (p.position) {
    const c = s.characters.find((x) => x.character_id === p.position.actor_id);
    if (c && p.position.area_id) c.area_id = p.position.area_id;
  }
  if ((p.zones || []).length) {
    s.zones = s.zones || [];
    for (const z of p.zones) upsert(s.zones, z, 'zone_id');
  }
  if (p.zone_position) {
    const { x, y, z, zone_id: zoneId } = p.zone_position;
    s.player = s.player || {};
    s.player.position = { x, y, z };
    s.player.current_zone_id = zoneId ?? null;
  }
  changed();
}

export function applySnapshot(s) {
  if (!s || !Array.isArray(s.areas) || !Array.isArray(s.characters)) return;
  game.snapshot = s;
  showTitle();
  changed();
}

// Re-reads the snapshot soon (several requests close together become one).
export function refreshSnapshotSoon() {
  clearTimeout(game.refreshTimer);
  game.refreshTimer = setTimeout(() => questd.getSession(game.id, game.token).then(applySnapshot).catch(() => {}), 250);
}
