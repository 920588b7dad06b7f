// The hero sheet: the active character's name, level, hit points,
// abilities, inventory and company, and the place and zone they are in.

import { $, el } from './dom.js';
import { eventName, t } from './language.js';
import { activeCharacter, area, descriptionOf, game, itemDescription, itemName, nameOf, zoneName } from './state.js';

export function renderSheet() {
  const s = game.snapshot;
  const pc = activeCharacter();
  if (!pc) return;
  const here = area(pc.area_id);
  const name = nameOf(pc);
  $('char-name').textContent = name;
  $('portrait').textContent = Array.from(name || '?')[0];
  const meta = [t('sheet.level', { n: pc.level ?? 1 }), t(pc.state === 'downed' ? 'sheet.downed' : 'sheet.active')];
  if (typeof s.turn === 'number') meta.push(t('sheet.turn', { n: s.turn }));
  $('char-meta').textContent = meta.join(' · ');
  $('char-area').textContent = here ? nameOf(here) : pc.area_id;
  $('char-area').title = here ? descriptionOf(here) : '';
  $('map-place').textContent = here ? nameOf(here) : '';
  renderTimers(s.timers);

  const max = pc.max_hp || 1;
  const hp = Math.max(0, pc.hp ?? 0);
  const pct = Math.max(0, Math.min(100, (hp / max) * 100));
  const fill = $('hp-fill');
  const before = Number(fill.dataset.hp);
  fill.style.width = pct + '%';
  fill.dataset.hp = hp;
  fill.className = 'hp-fill' + (pct <= 25 ? ' low' : pct <= 50 ? ' mid' : '');
  $('hp-text').textContent = `${hp} / ${max}`;
  const hpBox = $('hp');
  hpBox.dataset.hp = hp;
  hpBox.dataset.maxHp = max;
  if (!Number.isNaN(before) && before !== hp) flash(hpBox, hp < before ? 'hit' : 'heal');

  const stats = $('stats');
  stats.replaceChildren();
  for (const [k, v] of Object.entries(pc.stats || {})) {
    const tile = el('div', 'stat');
    const mod = Math.floor((v - 10) / 2);
    tile.append(el('span', 'stat-k', k.toUpperCase()), el('b', 'stat-v', v), el('span', 'stat-m', (mod >= 0 ? '+' : '') + mod));
    stats.appendChild(tile);
  }

  const inv = $('inventory');
  const had = new Map(Array.from(inv.children, (li) => [li.dataset.slug, Number(li.dataset.quantity)]));
  inv.replaceChildren();
  for (const item of pc.inventory || []) {
    const li = el('li');
    li.dataset.slug = item.slug;
    li.dataset.quantity = item.quantity;
    li.append(el('span', 'item-name', itemName(item)), el('span', 'qty', '×' + item.quantity));
    if (itemDescription(item)) li.title = itemDescription(item);
    if (had.size && had.get(item.slug) !== item.quantity) flash(li, 'new');
    inv.appendChild(li);
  }
  if (!(pc.inventory || []).length) inv.appendChild(el('li', 'muted', t('sheet.empty')));

  const company = $('company');
  company.replaceChildren();
  for (const c of s.characters) {
    if (c.character_id === pc.character_id || c.area_id !== pc.area_id) continue;
    const li = el('li');
    li.append(el('span', 'npc-dot'), el('span', null, nameOf(c)), el('span', 'muted', ` · HP ${c.hp}/${c.max_hp}`));
    company.appendChild(li);
  }
  if (!company.children.length) company.appendChild(el('li', 'muted', t('sheet.nobody')));

  const zoneLine = $('zone-line');
  const zoneId = s.player && s.player.current_zone_id;
  zoneLine.hidden = !zoneId;
  if (zoneId) zoneLine.textContent = t('sheet.zone', { name: zoneName(zoneId) });
}

function flash(node, cls) {
  node.classList.remove(cls);
  void node.offsetWidth; // restart the animation
  node.classList.add(cls);
  setTimeout(() => node.classList.remove(cls), 900);
}

// The session's pending timed events, discreetly: how many, and when the
// next is due (the full list in its tooltip). The snapshot never holds a
// timer's note, so nothing a game master keeps for later is given away.
function renderTimers(timers) {
  const line = $('timers-line');
  const list = Array.isArray(timers) ? timers : [];
  line.hidden = list.length === 0;
  if (!list.length) return;
  const at = (iso) => {
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? iso : d.toLocaleTimeString();
  };
  line.textContent = t(list.length === 1 ? 'sheet.timers_one' : 'sheet.timers', { n: list.length, at: at(list[0].due_at) });
  line.title = list.map((x) => `${eventName(x.event)} · ${at(x.due_at)}`).join('\n');
  line.dataset.count = String(list.length);
}
