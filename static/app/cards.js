// The tool cards of the story: one per tool call (the tool, its arguments,
// how it went), and a readable view of each tool's result: dice drawn as
// dice, an HP change as a bar that moves, places a player can click to go to.

import { el, icon, short } from './dom.js';
import { hasText, t } from './language.js';
import { applyResult, area, areaName, character, game, nameOf, zoneName } from './state.js';
import { endBubble, scrollStory, turnBox } from './story.js';
import { sendChat } from './composer.js';

const TOOL_ICONS = {
  move: 'compass', move_options: 'compass', move_to_zone: 'compass',
  roll_dice: 'dice', hp_delta: 'heart', update_character: 'heart',
  map_generate: 'spark', generate_zone: 'globe', get_site_map: 'globe',
  get_character_stats: 'scroll', get_player_state: 'scroll', describe_entity: 'scroll',
  add_inventory: 'bag', update_inventory: 'bag',
  search_content: 'search', get_npc_profile: 'user', get_prompt_active: 'user',
  create_npc: 'user', activate_npc: 'user',
};

function argChips(tool, args) {
  const row = el('div', 'chips');
  if (!args || typeof args !== 'object') {
    if (args !== null && args !== undefined) row.appendChild(el('span', 'chip', short(args)));
    return row;
  }
  for (const [k, v] of Object.entries(args)) {
    if (k === 'session_id' || k === 'actor_id') continue;
    const chip = el('span', 'chip');
    const isArea = typeof v === 'string' && /area_id$/.test(k) && area(v);
    chip.append(el('span', 'k', k), el('span', 'v', isArea ? `${areaName(v)} (${v})` : short(v, 48)));
    row.appendChild(chip);
  }
  return row;
}

export function onToolCall(f) {
  const turn = turnBox(f.turn_id);
  endBubble(turn); // narration after a tool starts a new bubble
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
  game.calls.set(f.turn_id + '/' + f.call_id, { card, args: f.args || {}, tool: f.tool });
  scrollStory(() => turn.box.appendChild(card));
}

export function onToolResult(f, live) {
  const key = f.turn_id + '/' + f.call_id;
  if (!game.calls.has(key)) onToolCall({ turn_id: f.turn_id, call_id: f.call_id, tool: f.tool, args: null });
  const call = game.calls.get(key);
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
      if (body) card.appendChild(body);
      card.appendChild(rawDetails(call.args, f.result));
    } else {
      const reason = hasText('reason.' + f.reason) ? t('reason.' + f.reason) : f.reason || f.status;
      const line = el('div', 'tool-fail');
      line.append(el('b', null, reason), el('span', 'code', f.error_code || ''));
      card.appendChild(line);
      if (f.message) card.appendChild(el('div', 'tool-msg', short(f.message, 220)));
      card.title = f.message || '';
    }
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
      const names = (r.areas || []).map((a) => a.name);
      v.appendChild(el('span', 'muted', t('tool.new_areas', { n: names.length }) + ' '));
      for (const a of r.areas || []) v.appendChild(placeChip(a.area_id, a.name));
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
      return el('div', 'tool-result', `${r.name || ''} · ` + t('tool.stats', { hp: r.hp, max: r.max_hp, level: r.level }));
    case 'add_inventory': {
      const v = el('div', 'tool-result');
      for (const a of r.added || []) v.appendChild(el('span', 'chip gain', `+ ${a.name} ×${a.quantity}`));
      return v;
    }
    case 'update_inventory': {
      const v = el('div', 'tool-result');
      for (const c of r.changes || []) {
        v.appendChild(el('span', 'chip ' + (c.after < c.before ? 'loss' : 'gain'), `${c.slug} ${c.before} → ${c.after}`));
      }
      return v;
    }
    case 'update_character':
      return el('div', 'tool-result', t('tool.changed', { fields: (r.changed || []).join(', ') || '—' }));
    case 'search_content': {
      const v = el('div', 'tool-result');
      v.appendChild(el('span', 'muted', t('tool.results', { n: r.total ?? (r.results || []).length }) + ' '));
      for (const x of (r.results || []).slice(0, 4)) v.appendChild(el('span', 'chip', x.title));
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

// A place name in a card; for players a click asks to go there.
function placeChip(areaId, name) {
  const chip = el(game.role === 'player' ? 'button' : 'span', 'chip place', name || areaId);
  if (game.role === 'player') {
    chip.type = 'button';
    chip.title = 'go to ' + areaId;
    chip.addEventListener('click', () => sendChat('go to ' + areaId));
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
