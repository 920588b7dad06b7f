// What a turn's tools did, told quietly under its narrative: one summary
// line per turn (a die with the roll's total, an arrow from one place to
// another, a heart with the HP change, a bag for what was taken, a failure
// in words), a button that opens the turn's tool cards (the tool, its
// arguments, how it went, a readable view of its result: dice drawn as
// dice, an HP change as a bar that moves, places a player can click to go
// to). "Show every detail" keeps every turn's cards open.

import { $, el, icon, readJson, short, writeJson } from './dom.js';
import { hasText, t } from './language.js';
import {
  activeCharacter, applyResult, area, areaName, character, game, itemName, itemNameBySlug, localName, nameOf, zoneName,
} from './state.js';
import { scrollStory, turnBox } from './story.js';
import { goCommand, sendChat } from './composer.js';

const TOOL_ICONS = {
  move: 'compass', move_options: 'compass', move_to_zone: 'compass',
  roll_dice: 'dice', hp_delta: 'heart', update_character: 'heart',
  map_generate: 'spark', generate_zone: 'globe', get_site_map: 'globe',
  get_character_stats: 'scroll', get_player_state: 'scroll', describe_entity: 'scroll',
  add_inventory: 'bag', update_inventory: 'bag',
  search_content: 'search', get_npc_profile: 'user', get_prompt_active: 'user',
  create_npc: 'user', activate_npc: 'user',
};
// Arguments that say nothing to a reader: who and where the call ran, and
// the language the game master answers in.
const QUIET_ARGS = new Set(['session_id', 'actor_id', 'language']);
const DETAILS_KEY = 'questd.details';

// "Show every detail": every turn's cards open (remembered per browser).
export function detailsOn() {
  return readJson('local', DETAILS_KEY, false) === true;
}

export function setDetails(on) {
  writeJson('local', DETAILS_KEY, Boolean(on));
  $('details').checked = Boolean(on);
  for (const turn of game.turns.values()) if (turn.tools) openCards(turn.tools, on);
}

function openCards(tools, open) {
  tools.button.setAttribute('aria-expanded', String(open));
  tools.list.hidden = !open;
}

let toolsSeq = 0;

// The turn's summary line and its cards (closed), made at its first tool.
function toolsOf(turn) {
  if (turn.tools) return turn.tools;
  const section = el('div', 'tools');
  const button = el('button', 'tool-summary');
  button.type = 'button';
  const list = el('div', 'tool-cards');
  list.id = 'tool-cards-' + ++toolsSeq;
  button.setAttribute('aria-controls', list.id);
  section.append(button, list);
  const tools = { section, button, list, calls: [] };
  button.addEventListener('click', () => openCards(tools, button.getAttribute('aria-expanded') !== 'true'));
  openCards(tools, detailsOn());
  turn.tools = tools;
  // Below the narrative (which story.js puts before this section), above
  // how the turn ended.
  turn.box.insertBefore(section, turn.box.querySelector(':scope > .turn-failed'));
  return tools;
}

// What went wrong with a call, in words, in the page's language: the most
// specific sentence known for its tool and code, its tool and reason, its
// reason, else a general one.
function failText(c) {
  const code = String(c.error_code || '').toLowerCase();
  const keys = [`fail.${c.tool}.${code}`, `fail.${c.tool}.${c.reason}`, `fail.${c.reason}`];
  const key = keys.find((k) => hasText(k));
  return t(key || 'fail.other');
}

export const signed = (n) => (n > 0 ? '+' : n < 0 ? '−' : '±') + Math.abs(n);

// One part of the summary line for a call: [icon, text, words for screen
// readers before the text, class], or null for a call that only read.
function summaryPart(c) {
  const r = c.result || {};
  if (!c.status) return [TOOL_ICONS[c.tool] || 'gear', '…', '', 'running'];
  if (c.status !== 'ok') return ['alert', failText(c), '', 'fail'];
  switch (c.tool) {
    case 'roll_dice': return ['dice', r.total, t('sum.roll'), 'roll'];
    case 'move':
      return ['arrow', `${areaName(r.from_area_id)} → ${r.area ? nameOf(r.area) : areaName(r.to_area_id)}`, t('sum.move'), 'move'];
    case 'move_to_zone': return ['arrow', `${zoneName(r.from_zone_id)} → ${zoneName(r.to_zone_id)}`, t('sum.move'), 'move'];
    case 'hp_delta': {
      const pc = activeCharacter();
      const who = character(r.character_id);
      const name = who && (!pc || who.character_id !== pc.character_id) ? nameOf(who) + ' ' : '';
      return ['heart', name + signed(r.hp - r.hp_before), t('sum.hp'), r.hp < r.hp_before ? 'loss' : 'gain'];
    }
    case 'add_inventory':
      return ['bag', (r.added || []).map((a) => '+ ' + itemName(a) + (a.quantity > 1 ? ' ×' + a.quantity : '')).join(', '), t('sum.took'), 'gain'];
    case 'update_inventory':
      return ['bag', (r.changes || []).map((x) => `${itemNameBySlug(x.slug)} ${signed(x.after - x.before)}`).join(', '), t('sum.items'), 'items'];
    case 'map_generate': return ['spark', t('sum.new_places', { n: (r.areas || []).length }), '', 'found'];
    case 'generate_zone': return ['globe', t('sum.new_zones', { n: (r.zones || []).length }), '', 'found'];
    case 'move_options': return ['compass', t('sum.ways', { n: (r.options || []).length }), '', 'ways'];
    case 'update_character': return ['user', t('sum.changed'), '', 'changed'];
    case 'get_npc_profile': {
      // Whom the hero spoke with (the profile names their character).
      const who = character(r.character_id);
      return who ? ['user', nameOf(who), t('sum.met'), 'met'] : null;
    }
    default: return null;
  }
}

// The summary line, from the calls as they stand (redrawn as results come,
// and in the page's language when it changes).
function renderSummary(tools) {
  const parts = [];
  let reads = 0;
  for (const c of tools.calls) {
    const part = summaryPart(c);
    if (part) parts.push(part);
    else reads += 1;
  }
  if (reads) parts.push(['scroll', t('sum.reads', { n: reads }), '', 'reads']);
  const nodes = parts.map(([name, text, label, cls]) => {
    const part = el('span', 'sum-part ' + cls);
    part.append(icon(name));
    if (label) part.append(el('span', 'sr-only', label + ' '));
    part.append(el('span', null, text));
    return part;
  });
  nodes.push(el('span', 'sum-more', t('sum.details')));
  tools.button.replaceChildren(...nodes);
  const failed = tools.calls.some((c) => c.status && c.status !== 'ok');
  tools.button.classList.toggle('has-failed', failed);
}

// Every summary line again, and each card's status and failure, in the
// page's language.
export function renderSummaries() {
  for (const turn of game.turns.values()) if (turn.tools) renderSummary(turn.tools);
  for (const call of game.calls.values()) {
    call.card.querySelector('.tool-status').textContent = t('tool.' + (call.status || 'running'));
    const fail = call.card.querySelector('.tool-fail');
    if (fail) fail.textContent = failText(call);
    // The result's view again, its names and words in the new language
    // (drawn at rest: nothing moves for a language switch).
    const view = call.card.querySelector(':scope > [data-view]');
    const fresh = view && resultView(call.tool, call.args, call.result || {}, false);
    if (fresh) {
      fresh.dataset.view = '';
      view.replaceWith(fresh);
    }
  }
}

// A readable argument: a place, person or item by its name in the page's
// language, not its id.
function argValue(k, v) {
  if (typeof v === 'string' && /area_id$/.test(k) && area(v)) return areaName(v);
  if (typeof v === 'string' && /character_id$|^npc_id$/.test(k) && character(v)) return nameOf(character(v));
  if (typeof v === 'string' && /zone_id$/.test(k)) return zoneName(v);
  return short(v, 48);
}

// The arguments of a call in words, "key: value" each, for a tool the
// page has no sentence for (an approval's card, cards.js's chips share it).
export function argWords(args) {
  if (!args || typeof args !== 'object') return args === null || args === undefined ? [] : [short(args)];
  return Object.entries(args)
    .filter(([k, v]) => !QUIET_ARGS.has(k) && v !== '' && v !== null)
    .map(([k, v]) => [argLabel(k), argValue(k, v)]);
}

// An argument's name for people: `to_area_id` reads "to area".
function argLabel(k) {
  return k.replace(/_id$/, '').replace(/_/g, ' ');
}

function argChips(tool, args) {
  const row = el('div', 'chips');
  if (!args || typeof args !== 'object') {
    if (args !== null && args !== undefined) row.appendChild(el('span', 'chip', short(args)));
    return row;
  }
  for (const [k, v] of Object.entries(args)) {
    if (QUIET_ARGS.has(k) || v === '' || v === null) continue;
    const chip = el('span', 'chip');
    chip.dataset.arg = k;
    chip.append(el('span', 'k', argLabel(k)), el('span', 'v', argValue(k, v)));
    row.appendChild(chip);
  }
  return row;
}

export function onToolCall(f) {
  const turn = turnBox(f.turn_id);
  const tools = toolsOf(turn);
  const card = el('div', 'tool running');
  card.dataset.tool = f.tool;
  card.dataset.status = 'running';
  card.dataset.callId = f.call_id;
  const head = el('div', 'tool-head');
  head.append(
    icon(TOOL_ICONS[f.tool] || 'gear', 'tool-icon'),
    el('span', 'tool-name', f.tool),
    el('span', 'tool-status', t('tool.running')),
  );
  card.append(head, argChips(f.tool, f.args));
  const call = { card, tools, args: f.args || {}, tool: f.tool, status: null, result: null };
  tools.calls.push(call);
  game.calls.set(f.turn_id + '/' + f.call_id, call);
  scrollStory(() => {
    tools.list.appendChild(card);
    renderSummary(tools);
  });
}

export function onToolResult(f, live) {
  const key = f.turn_id + '/' + f.call_id;
  if (!game.calls.has(key)) onToolCall({ turn_id: f.turn_id, call_id: f.call_id, tool: f.tool, args: null });
  const call = game.calls.get(key);
  Object.assign(call, { status: f.status, result: f.result || {}, reason: f.reason, error_code: f.error_code });
  const card = call.card;
  card.classList.remove('running');
  card.classList.add(f.status === 'ok' ? 'ok' : 'failed');
  card.dataset.status = f.status;
  const status = card.querySelector('.tool-status');
  status.textContent = t('tool.' + f.status);
  if (typeof f.duration_ms === 'number') status.title = `${f.duration_ms} ms`;
  if (!live) card.classList.add('instant');
  scrollStory(() => {
    if (f.status === 'ok') {
      const body = resultView(f.tool, call.args, f.result || {}, live);
      if (body) {
        body.dataset.view = '';
        card.appendChild(body);
      }
      card.appendChild(rawDetails(call.args, f.result));
    } else {
      // In words; the code and the server's own message (ids and all) stay
      // in the raw details for whoever wants them.
      card.dataset.errorCode = f.error_code || '';
      card.appendChild(el('div', 'tool-fail', failText(call)));
      card.appendChild(rawDetails(call.args, { error_code: f.error_code, reason: f.reason, message: f.message }));
    }
    renderSummary(call.tools);
  });
  if (f.status === 'ok' && live) applyResult(f.tool, call.args, f.result || {});
}

function rawDetails(args, result) {
  const d = el('details', 'raw');
  d.append(el('summary', null, t('tool.details')), el('pre', null, JSON.stringify({ args, result }, null, 2)));
  return d;
}

// A readable view of a successful result, by tool.
function resultView(tool, args, r, live) {
  switch (tool) {
    case 'roll_dice': return diceView(r, live);
    case 'hp_delta': return hpView(r, live);
    case 'move': {
      const v = el('div', 'tool-result move');
      v.append(el('span', null, t('tool.move', { from: areaName(r.from_area_id), to: r.area ? nameOf(r.area) : areaName(r.to_area_id) })));
      return v;
    }
    case 'move_options': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.options') + ' '));
      const options = r.options || [];
      if (!options.length) v.appendChild(el('span', null, t('tool.nowhere')));
      for (const o of options) v.appendChild(placeChip(o.area_id, nameOf(o)));
      return v;
    }
    case 'map_generate': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.new_areas', { n: (r.areas || []).length }) + ' '));
      for (const a of r.areas || []) v.appendChild(placeChip(a.area_id, nameOf(a)));
      return v;
    }
    case 'generate_zone': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.new_zones', { n: (r.zones || []).length }) + ' '));
      for (const z of r.zones || []) v.appendChild(el('span', 'chip place', z.name));
      return v;
    }
    case 'move_to_zone':
      return el('div', 'tool-result', t('tool.travel', {
        from: zoneName(r.from_zone_id), to: zoneName(r.to_zone_id), miles: r.distance_miles, min: r.duration_min,
      }));
    case 'get_character_stats':
      return el('div', 'tool-result', `${nameOf(r)} · ` + t('tool.stats', { hp: r.hp, max: r.max_hp, level: r.level }));
    case 'add_inventory': {
      const v = el('div', 'tool-result');
      for (const a of r.added || []) v.appendChild(el('span', 'chip gain', `+ ${itemName(a)} ×${a.quantity}`));
      return v;
    }
    case 'update_inventory': {
      const v = el('div', 'tool-result');
      for (const c of r.changes || []) {
        v.appendChild(el('span', 'chip ' + (c.after < c.before ? 'loss' : 'gain'), `${itemNameBySlug(c.slug)} ${c.before} → ${c.after}`));
      }
      return v;
    }
    case 'update_character':
      return el('div', 'tool-result', t('tool.changed', { fields: (r.changed || []).join(', ') || '—' }));
    case 'search_content': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.results', { n: r.total ?? (r.results || []).length }) + ' '));
      for (const x of (r.results || []).slice(0, 4)) v.appendChild(el('span', 'chip', localName(x.content_id, x.title)));
      return v;
    }
    case 'get_site_map':
      return el('div', 'tool-result', t('tool.site_map', {
        areas: (r.areas || []).length, routes: (r.routes || []).length, pois: (r.pois || []).length,
      }));
    default:
      return null;
  }
}

// A place name in a card; for players a click asks to go there, in the
// page's language and by the place's name.
function placeChip(areaId, name) {
  const chip = el(game.role === 'player' ? 'button' : 'span', 'chip place', name || areaId);
  if (game.role === 'player') {
    chip.type = 'button';
    chip.title = goCommand(areaId);
    chip.addEventListener('click', () => sendChat(goCommand(areaId)));
  }
  return chip;
}

// Dice drawn as dice: pips for d6, the number in a die shape otherwise.
function diceView(r, live) {
  const v = el('div', 'tool-result dice-result' + (live ? ' rolling' : ''));
  const sides = Number(String(r.dice || '').split('d')[1]?.split(/[+-]/)[0]) || 6;
  const row = el('div', 'dice');
  for (const n of r.rolls || []) {
    const die = el('span', 'die d' + (sides === 6 ? '6' : 'n'));
    die.dataset.value = n;
    if (sides === 6 && n >= 1 && n <= 6) {
      for (let i = 0; i < n; i++) die.appendChild(el('i', 'pip'));
      die.classList.add('p' + n);
    } else {
      die.textContent = n;
    }
    die.title = `d${sides}: ${n}`;
    row.appendChild(die);
  }
  if (r.modifier) row.appendChild(el('span', 'mod', (r.modifier > 0 ? '+ ' : '− ') + Math.abs(r.modifier)));
  const total = el('span', 'total', r.total);
  total.dataset.total = r.total;
  row.append(el('span', 'eq', '='), total);
  v.append(row, el('div', 'muted small', r.description || r.dice || ''));
  return v;
}

// An HP change as a bar that moves from the old value to the new.
function hpView(r, live) {
  const v = el('div', 'tool-result hp-change');
  const max = r.max_hp || 1;
  const pct = (x) => Math.max(0, Math.min(100, (x / max) * 100)) + '%';
  const who = character(r.character_id);
  const delta = r.hp - r.hp_before;
  const label = el('div', 'hp-change-label');
  label.append(
    el('span', null, who ? nameOf(who) : r.character_id),
    el('b', delta < 0 ? 'loss' : 'gain', (delta > 0 ? '+' : '') + delta),
    el('span', 'muted', `${r.hp_before} → ${r.hp} / ${max}`),
  );
  if (r.downed) label.appendChild(el('span', 'chip loss', t('tool.downed')));
  if (r.cause) label.appendChild(el('span', 'muted', r.cause));
  const bar = el('div', 'hpbar');
  const ghost = el('div', 'hp-ghost');
  const fill = el('div', 'hp-fill');
  ghost.style.width = pct(Math.max(r.hp_before, r.hp));
  fill.style.width = pct(live ? r.hp_before : r.hp);
  bar.append(ghost, fill);
  v.append(label, bar);
  if (live) requestAnimationFrame(() => requestAnimationFrame(() => { fill.style.width = pct(r.hp); }));
  return v;
}
