// The maps: the area map (places, routes, the people in them and the hero's
// token; the places generated on one theme grouped under one label and named
// by their short names; every name inside the visible frame, none over
// another name or place; zoom steps, and a key of the places that only have
// room for a number) and the world map of zones.

import { $, el, svg } from './dom.js';
import { t } from './language.js';
import { activeCharacter, area, descriptionOf, game, nameOf } from './state.js';

// How long a newly created area is marked as new on the map.
const NEW_AREA_MS = 2500;

const LABEL_PX = 12.5;
// A group's label (the theme its places were generated on), in pixels, and
// the extra space between its letters (of the font size).
const GROUP_PX = 13;
const GROUP_SPACING = 0.06;
// How far apart generated places are laid out (mapgen's STEP), in map units.
const STEP = 110;
// Most spots tried for one group's label near its places, and how many
// groups (the nearest the hero) may look across the whole frame: a map of
// thousands of places stays quick to lay out.
const GROUP_SPOTS = 600;
const FAR_GROUPS = 24;

// Zoom steps of the area map in screen pixels per map unit (besides the
// whole map in its card), and the first scale at which the places of
// generated maps (110 units apart) have room for a line of names between them.
const MAP_SCALES = [0.3, 0.5, 0.75, 1.1, 1.6];
const READABLE_SCALE = 0.5;
// How far labels keep from the edge of the map's frame, in pixels.
const FRAME_MARGIN_PX = 2;
// How many rings of spots around its place a near name may try.
const NEAR_RINGS = 6;
const WORLD_MIN_CELLS = [11, 6];
let measureCtx = null;
// What the last renderMap drew, for laying the labels out again when the
// map scrolls (labels follow the visible frame) without redrawing it.
let drawn = null;
let watching = false;
let relayout = false;
// The map the key was last shown for (see renderMapKey).
let keyKeptFor = null;

// What choosing a near place on the map does (set by the entry).
let goTo = () => {};

export function onGo(fn) {
  goTo = fn;
}

// Screen pixels per map unit are not known in advance: sizes are given in
// pixels and divided by the current scale so labels stay readable.
function mapScale(svgNode, width, height) {
  const w = svgNode.clientWidth || svgNode.parentNode.clientWidth || 600;
  const h = svgNode.clientHeight || svgNode.parentNode.clientHeight || 300;
  return Math.min(w / width, h / height);
}

// The smallest distance between two places, in map units (Infinity for one
// place): a sweep over the places sorted by x, so a big map stays quick.
function closestPair(areas) {
  const pts = areas.map((a) => [a.x || 0, a.y || 0]).sort((p, q) => p[0] - q[0]);
  let best = Infinity;
  for (let i = 0; i < pts.length; i++) {
    for (let j = i + 1; j < pts.length && pts[j][0] - pts[i][0] < best; j++) {
      best = Math.min(best, Math.hypot(pts[j][0] - pts[i][0], pts[j][1] - pts[i][1]));
    }
  }
  return best;
}

export function renderMap() {
  const s = game.snapshot;
  const map = $('map');
  const pc = activeCharacter();
  const hereId = pc ? pc.area_id : null;
  const here = hereId && area(hereId);
  const near = new Set(here ? here.reachable_area_ids || [] : []);
  const areas = s.areas;
  if (!areas.length) return;

  const xs = areas.map((a) => a.x || 0);
  const ys = areas.map((a) => a.y || 0);
  const pad = 90;
  const minX = Math.min(...xs) - pad;
  const minY = Math.min(...ys) - pad;
  const width = Math.max(Math.max(...xs) - Math.min(...xs) + pad * 2, 300);
  const height = Math.max(Math.max(...ys) - Math.min(...ys) + pad * 2, 220);
  map.setAttribute('viewBox', `${minX} ${minY} ${width} ${height}`);
  map.setAttribute('preserveAspectRatio', 'xMidYMid meet');
  // The map is drawn at a readable scale, or fitted to its card when it is
  // small enough; larger than the card, it scrolls inside it (on a phone
  // too), and the zoom buttons go from the whole map to close up.
  const wrap = map.parentNode;
  const fit = wrap.clientWidth ? Math.min(wrap.clientWidth / width, wrap.clientHeight / height) : 0;
  game.mapScales = [fit, ...MAP_SCALES.filter((z) => z > fit * 1.1)];
  const zoom = game.mapScale === 'fit' ? fit : Math.max(fit, game.mapScale ?? READABLE_SCALE);
  const zoomed = fit > 0 && zoom > fit * 1.001;
  game.mapZoom = zoom;
  game.mapZoomed = zoomed;
  if (zoomed) {
    map.style.width = Math.max(wrap.clientWidth, Math.floor(width * zoom)) + 'px';
    map.style.height = Math.max(wrap.clientHeight, Math.floor(height * zoom)) + 'px';
  } else {
    map.style.width = '';
    map.style.height = '';
  }
  updateZoomButtons();
  const k = 1 / Math.min(mapScale(map, width, height), 1.6);

  // The token and the layer group stay in the DOM between renders, so CSS
  // moves the token smoothly from one place to the next.
  let layers = map.querySelector('.layers');
  let token = map.querySelector('.token');
  if (!layers || !token) {
    layers = svg('g', { class: 'layers' });
    token = svg('g', { class: 'token' });
    const body = svg('g', { class: 'token-body' });
    body.appendChild(svg('path', { d: 'M0 -22 L9 -9 L0 -4 L-9 -9 Z' }));
    token.appendChild(body);
    map.replaceChildren(layers, token);
  }
  const edges = svg('g', { class: 'edges' });
  const nodes = svg('g', { class: 'nodes' });
  const byId = new Map(areas.map((a) => [a.area_id, a]));
  const seen = new Set();
  for (const a of areas) {
    for (const b of a.reachable_area_ids || []) {
      const other = byId.get(b);
      const key = [a.area_id, b].sort().join('|');
      if (!other || seen.has(key)) continue;
      seen.add(key);
      const active = (a.area_id === hereId && near.has(b)) || (b === hereId && near.has(a.area_id));
      edges.appendChild(svg('line', {
        x1: a.x || 0, y1: a.y || 0, x2: other.x || 0, y2: other.y || 0,
        class: 'edge' + (active ? ' active' : ''),
        'stroke-width': (active ? 3 : 2) * k,
      }));
    }
  }

  const now = Date.now();
  const drawnBefore = game.knownAreas.size > 0;
  for (const a of areas) {
    if (!game.knownAreas.has(a.area_id)) game.knownAreas.set(a.area_id, drawnBefore ? now : 0);
  }
  const npcsByArea = new Map();
  for (const c of s.characters) {
    if (c.kind !== 'npc') continue;
    if (!npcsByArea.has(c.area_id)) npcsByArea.set(c.area_id, []);
    npcsByArea.get(c.area_id).push(c);
  }
  // Circles shrink on a crowded fitted map so no two of them touch (the
  // closest two are left a fifth of their distance apart; a number drawn
  // inside its circle then covers no other place). Only places at the very
  // same spot share a circle's size.
  const r = Math.min(13 * k, closestPair(areas) * 0.4) || 4 * k;
  let youngest = Infinity;
  const rank = (a) => (a.area_id === hereId ? 2 : near.has(a.area_id) ? 1 : 0);
  // Far places first, the hero's place last: nearer labels are drawn on top.
  for (const a of areas.slice().sort((p, q) => rank(p) - rank(q))) {
    const cls = a.area_id === hereId ? 'current' : near.has(a.area_id) ? 'reachable' : 'far';
    const g = svg('g', {
      class: 'area ' + cls,
      'data-area-id': a.area_id,
      transform: `translate(${a.x || 0} ${a.y || 0})`,
    });
    const age = now - game.knownAreas.get(a.area_id);
    if (age < NEW_AREA_MS) {
      // Redrawn while still fading in: carry on where the animation was.
      g.classList.add('new');
      g.style.animationDelay = `-${age}ms`;
      youngest = Math.min(youngest, age);
    }
    const short = shortOf(a);
    if (short) {
      g.dataset.group = a.group;
      g.dataset.short = short;
    }
    const description = descriptionOf(a);
    g.appendChild(svg('title', {}, `${nameOf(a)} (${a.area_id})${description ? '\n' + description : ''}`));
    if (cls === 'current') g.appendChild(svg('circle', { r: r * 1.9, class: 'halo' }));
    g.appendChild(svg('circle', { r, class: 'node', 'stroke-width': Math.min(2 * k, r * 0.25) }));
    if ((a.tags || []).includes('lit')) g.appendChild(svg('circle', { r: r * 0.3, class: 'lamp' }));
    const npcs = npcsByArea.get(a.area_id) || [];
    npcs.forEach((c, i) => {
      const dot = svg('g', { class: 'npc', transform: `translate(${r + (6 + i * 11) * k} ${-r * 0.9})` });
      dot.appendChild(svg('circle', { r: 5 * k, 'stroke-width': 1.5 * k }));
      dot.appendChild(svg('title', {}, nameOf(c)));
      g.appendChild(dot);
    });
    if (cls === 'reachable' && game.role === 'player') {
      g.setAttribute('tabindex', '0');
      g.setAttribute('role', 'button');
      g.setAttribute('aria-label', t('map.go', { name: nameOf(a) }));
      const go = () => goTo(a.area_id);
      g.addEventListener('click', go);
      g.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); go(); } });
    }
    nodes.appendChild(g);
  }
  layers.replaceChildren(edges, nodes, svg('g', { class: 'labels' }));
  // Below the readable scale (the whole of a large map) a group's label
  // stands for the places of it that have no room for their names.
  const overview = fit > 0 && zoom < READABLE_SCALE * 0.999 && game.mapScales.length > 1;
  const before = drawn && drawn.bounds;
  drawn = {
    areas, hereId, near, r, k, npcsByArea, overview,
    clusters: clustersOf(areas, byId),
    bounds: { x0: minX, y0: minY, x1: minX + width, y1: minY + height },
    size: [wrap.clientWidth, wrap.clientHeight],
  };
  watch(wrap);

  // Draw once more when the newest areas stop being new.
  clearTimeout(game.newAreaTimer);
  if (youngest < NEW_AREA_MS) game.newAreaTimer = setTimeout(renderMap, NEW_AREA_MS - youngest + 50);

  const tokenBody = token.querySelector('.token-body');
  tokenBody.setAttribute('transform', `scale(${k})`);
  if (here) {
    token.style.transform = `translate(${here.x || 0}px, ${(here.y || 0) - r * 0.6}px)`;
    token.dataset.areaId = here.area_id;
  }
  // A scrolling map shows the hero: centre on their place when it changes,
  // or when the map grew around it and it is no longer in the frame (a
  // reader who scrolled away is otherwise left where they look).
  const b = drawn.bounds;
  const grew = before && ['x0', 'y0', 'x1', 'y1'].some((e) => before[e] !== b[e]);
  const view = grew && here && visibleView(map, wrap, b, k);
  const lost = view && ((here.x || 0) - r < view.x0 || (here.x || 0) + r > view.x1
    || (here.y || 0) - r < view.y0 || (here.y || 0) + r > view.y1);
  if (zoomed && here && (game.centredOn !== here.area_id || lost)) {
    const scale = Math.min(map.clientWidth / width, map.clientHeight / height);
    const px = (map.clientWidth - width * scale) / 2 + ((here.x || 0) - minX) * scale;
    const py = (map.clientHeight - height * scale) / 2 + ((here.y || 0) - minY) * scale;
    wrap.scrollLeft = px - wrap.clientWidth / 2;
    wrap.scrollTop = py - wrap.clientHeight / 2;
    game.centredOn = here.area_id;
  }
  layoutLabels();
}

// The short name of a generated place shown under its group's label, or
// null (a campaign's place, or one shown by its Chinese name).
function shortOf(a) {
  return a.group && a.short_name && nameOf(a) === a.name ? a.short_name : null;
}

// The places of one group joined by routes form a cluster, labelled once
// (a theme explored twice in two places gets a label at each): a map from
// each grouped place's id to its cluster { name, areas }.
function clustersOf(areas, byId) {
  const root = new Map();
  const find = (id) => {
    while (root.get(id) !== id) {
      root.set(id, root.get(root.get(id)));
      id = root.get(id);
    }
    return id;
  };
  const grouped = areas.filter(shortOf);
  for (const a of grouped) root.set(a.area_id, a.area_id);
  for (const a of grouped) {
    for (const b of a.reachable_area_ids || []) {
      if (root.has(b) && byId.get(b).group === a.group) root.set(find(a.area_id), find(b));
    }
  }
  const clusters = new Map();
  const of = new Map();
  for (const a of grouped) {
    const id = find(a.area_id);
    if (!clusters.has(id)) clusters.set(id, { name: a.group, areas: [] });
    clusters.get(id).areas.push(a);
    of.set(a.area_id, clusters.get(id));
  }
  return of;
}

// Lays the labels out again when the map scrolls (they stay inside the
// visible frame) and redraws it when its frame changes size (a key that
// appears takes room from it).
function watch(wrap) {
  if (watching) return;
  watching = true;
  let frame = 0;
  wrap.addEventListener('scroll', () => {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; layoutLabels(); });
  }, { passive: true });
  new ResizeObserver(() => {
    const size = drawn && drawn.size;
    if (!game.snapshot || !wrap.clientWidth || game.mapView !== 'areas') return;
    if (size && Math.abs(size[0] - wrap.clientWidth) < 1 && Math.abs(size[1] - wrap.clientHeight) < 1) return;
    renderMap();
  }).observe(wrap);
  $('map-key').addEventListener('scroll', updateKeyCount, { passive: true });
}

// The part of the map inside its frame, in map units, a few pixels in
// from the edges; the whole map while the frame is not shown.
function visibleView(map, wrap, bounds, k) {
  const ctm = map.getScreenCTM();
  if (!ctm || !wrap.clientWidth || !wrap.clientHeight) return bounds;
  const f = wrap.getBoundingClientRect();
  const x = f.left + wrap.clientLeft;
  const y = f.top + wrap.clientTop;
  const inv = ctm.inverse();
  const a = new DOMPoint(x, y).matrixTransform(inv);
  const b = new DOMPoint(x + wrap.clientWidth, y + wrap.clientHeight).matrixTransform(inv);
  const m = FRAME_MARGIN_PX * k;
  return { x0: a.x + m, y0: a.y + m, x1: b.x - m, y1: b.y - m };
}

// The labels of what the frame shows, and the key of the places there
// that only have room for a number.
function layoutLabels() {
  const map = $('map');
  const group = map.querySelector('.labels');
  if (!drawn || !group) return;
  const wrap = map.parentNode;
  const size = [wrap.clientWidth, wrap.clientHeight];
  const stamp = frameStamp(wrap);
  const view = visibleView(map, wrap, drawn.bounds, drawn.k);
  group.replaceChildren();
  renderMapKey(placeLabels(group, drawn, view));
  // A key that came or went resized the frame: draw again for the new one
  // (once; the key it gives is the same or longer, and the frame keeps it).
  if ((wrap.clientWidth !== size[0] || wrap.clientHeight !== size[1]) && !relayout) {
    relayout = true;
    try { renderMap(); } finally { relayout = false; }
    return;
  }
  // The frame the labels were laid out for (tests wait for labels of the
  // frame they see; a frame resized since is laid out again, on resize).
  map.dataset.labelledAt = stamp;
}

// The scroll position and size of the map's frame, as a string.
function frameStamp(wrap) {
  return [wrap.scrollLeft, wrap.scrollTop, wrap.clientWidth, wrap.clientHeight].map(Math.round).join(',');
}

// Width in screen pixels of a text at `px` pixels, in the labels' font
// (`style` 'italic' with the serif font: a group's label, letters spaced).
function labelWidth(text, px = LABEL_PX, weight = 'normal', style = 'normal') {
  if (!measureCtx) measureCtx = document.createElement('canvas').getContext('2d');
  const family = style === 'italic'
    ? getComputedStyle(document.documentElement).getPropertyValue('--serif')
    : getComputedStyle(document.body).fontFamily;
  measureCtx.font = `${style} ${weight} ${px}px ${family}`;
  const spacing = style === 'italic' ? [...text].length * GROUP_SPACING * px : 0;
  return measureCtx.measureText(text).width + spacing;
}

function overlaps(a, b) {
  return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

// Boxes in map units, bucketed on a grid of `cell` units so a test looks
// only at the boxes nearby (a map may hold thousands of places).
function boxIndex(cell) {
  const cells = new Map();
  const each = (b, fn) => {
    for (let i = Math.floor(b.x0 / cell); i <= Math.floor(b.x1 / cell); i++) {
      for (let j = Math.floor(b.y0 / cell); j <= Math.floor(b.y1 / cell); j++) {
        if (fn(i + ',' + j)) return true;
      }
    }
    return false;
  };
  return {
    add(b) {
      each(b, (key) => {
        if (!cells.has(key)) cells.set(key, []);
        cells.get(key).push(b);
      });
    },
    hits(b, skip) {
      return each(b, (key) => (cells.get(key) || []).some((o) => o.id !== skip && overlaps(b, o)));
    },
  };
}

// Names what the frame shows, and no name covers another name or another
// place. Places are taken in order of importance: the hero's place (by its
// full name), the hero's neighbours, then the rest, nearest the hero first;
// a group's label before the first of its places. A place of a labelled
// group is named by
// its short name, any other by its full name. Each name tries eight spots
// around its place (below, above, right, left, the four diagonals), then the
// same eight again further out, and takes the first that is inside the
// frame and clear of every place and every name placed so far. The hero's
// place and its neighbours look further (NEAR_RINGS rings; from the third a
// thin line points from the name to its place), so at a readable scale they
// keep their names. A name that fits nowhere becomes the place's number
// (beside it, or inside its circle when even that has no room), listed with
// the full name in the key under the map; on the whole map of a large one a
// place of a labelled group is left to its group's label instead. Zooming in
// gives names room, so fewer places are numbered. Returns the numbered
// places, as [number, area].
function placeLabels(group, d, view) {
  const { areas, hereId, near, r, k, npcsByArea, clusters, overview } = d;
  const rank = (a) => (a.area_id === hereId ? 2 : near.has(a.area_id) ? 1 : 0);
  const h = LABEL_PX * k;
  const gap = 3 * k; // clear of the text's outline
  const taken = boxIndex(Math.max(h * 6, r * 4));
  for (const a of areas) {
    const x = a.x || 0;
    const y = a.y || 0;
    taken.add({ id: a.area_id, x0: x - r, y0: y - r, x1: x + r, y1: y + r });
    // The people here (dots right of the circle, as drawn in renderMap) and
    // the hero's token above their place are not covered either.
    (npcsByArea.get(a.area_id) || []).forEach((_, i) => {
      const cx = x + r + (6 + i * 11) * k;
      taken.add({ id: 'npc', x0: cx - 6 * k, y0: y - r * 0.9 - 6 * k, x1: cx + 6 * k, y1: y - r * 0.9 + 6 * k });
    });
    if (a.area_id === hereId) taken.add({ id: 'token', x0: x - 10 * k, y0: y - r * 0.6 - 23 * k, x1: x + 10 * k, y1: y });
  }
  const number = new Map(areas.map((a, i) => [a.area_id, i + 1]));
  const here = areas.find((a) => a.area_id === hereId) || { x: 0, y: 0 };
  const away = (a) => Math.hypot((a.x || 0) - (here.x || 0), (a.y || 0) - (here.y || 0));
  const inside = (b) => b.x0 >= view.x0 && b.x1 <= view.x1 && b.y0 >= view.y0 && b.y1 <= view.y1;
  // A place is labelled when its whole circle is in the frame (the view
  // is a margin inside it).
  const m = r - FRAME_MARGIN_PX * k;
  const shown = (a) => inside({ x0: (a.x || 0) - m, y0: (a.y || 0) - m, x1: (a.x || 0) + m, y1: (a.y || 0) + m });
  // The first free spot for a text w x th (map units) around (x, y), ring
  // by ring up to `rings` out, or null.
  const spotFor = (id, x, y, w, th, rings) => {
    for (let ring = 0; ring < rings; ring++) {
      const d = r + gap + ring * th * 1.3;
      const c = d * 0.72;
      const spots = [
        { x, y: y + d + th * 0.95, anchor: 'middle' },
        { x, y: y - d - th * 0.3, anchor: 'middle' },
        { x: x + d, y: y + th * 0.35, anchor: 'start' },
        { x: x - d, y: y + th * 0.35, anchor: 'end' },
        { x: x + c, y: y + c + th * 0.95, anchor: 'start' },
        { x: x - c, y: y + c + th * 0.95, anchor: 'end' },
        { x: x + c, y: y - c - th * 0.3, anchor: 'start' },
        { x: x - c, y: y - c - th * 0.3, anchor: 'end' },
      ];
      for (const s of spots) {
        const x0 = s.anchor === 'middle' ? s.x - w / 2 : s.anchor === 'start' ? s.x : s.x - w;
        const box = { id, x0: x0 - gap, y0: s.y - th - gap, x1: x0 + w + gap, y1: s.y + th * 0.3 + gap };
        if (inside(box) && !taken.hits(box, id)) return { ...s, box, ring };
      }
    }
    return null;
  };
  const labelled = new Set(); // the clusters whose label is on the map
  let farTries = FAR_GROUPS;
  const placeGroup = (cluster) => {
    const members = cluster.areas.filter(shown);
    if (!members.length) return;
    const px = overview ? LABEL_PX : GROUP_PX;
    const th = px * k;
    const w = labelWidth(cluster.name, px, 'normal', 'italic') * k;
    const xs = members.map((a) => a.x || 0);
    const ys = members.map((a) => a.y || 0);
    const cx = xs.reduce((p, q) => p + q, 0) / xs.length;
    const cy = ys.reduce((p, q) => p + q, 0) / ys.length;
    // Spots over the group and just around it, nearest its middle first:
    // between its places at a readable scale, beside them on a whole map.
    // On the whole map the places are close together: look further out.
    const reach = overview ? 2 : 1;
    const [x0, x1] = [Math.min(...xs) - (STEP / 2) * reach - w / 4, Math.max(...xs) + (STEP / 2) * reach + w / 4];
    const [y0, y1] = [Math.min(...ys) - r - th * 1.5 * reach, Math.max(...ys) + r + th * 1.5 * reach];
    let sx = Math.max(w / 4, STEP / 8);
    let sy = Math.max(th / 2, STEP / 16);
    while (((x1 - x0) / sx + 1) * ((y1 - y0) / sy + 1) > GROUP_SPOTS) { sx *= 1.5; sy *= 1.5; }
    const spots = [];
    for (let y = y0; y <= y1; y += sy) for (let x = x0; x <= x1; x += sx) spots.push([x, y]);
    const near = (p, q) => Math.hypot(p[0] - cx, (p[1] - cy) * 1.5) - Math.hypot(q[0] - cx, (q[1] - cy) * 1.5);
    spots.sort(near);
    const local = spots.length;
    if (overview && farTries-- > 0) {
      // Then anywhere in the frame (the room a wide map leaves above and
      // below it), with a line to the group.
      const far = [];
      const fx = Math.max(w / 3, (view.x1 - view.x0) / 24);
      const fy = Math.max(th, (view.y1 - view.y0) / 48);
      for (let y = view.y0 + th; y <= view.y1 - th / 2; y += fy) {
        for (let x = view.x0 + w / 2; x <= view.x1 - w / 2; x += fx) far.push([x, y]);
      }
      spots.push(...far.sort(near));
    }
    for (const [i, [x, y]] of spots.entries()) {
      const box = { id: cluster, x0: x - w / 2 - gap, y0: y - th / 2 - gap, x1: x + w / 2 + gap, y1: y + th / 2 + gap };
      if (!inside(box) || taken.hits(box, cluster)) continue;
      taken.add(box);
      labelled.add(cluster);
      if (i >= local) {
        const m = members.reduce((p, q) => (Math.hypot(p.x - x, p.y - y) < Math.hypot(q.x - x, q.y - y) ? p : q));
        const tx = Math.max(box.x0 + gap, Math.min(m.x, box.x1 - gap));
        const ty = m.y > y ? box.y1 - gap : box.y0 + gap;
        const len = Math.hypot(tx - m.x, ty - m.y) || 1;
        group.appendChild(svg('line', {
          x1: m.x + ((tx - m.x) / len) * r, y1: m.y + ((ty - m.y) / len) * r, x2: tx, y2: ty,
          class: 'leader group-leader', 'stroke-width': 1.2 * k, 'stroke-dasharray': `${3 * k} ${3 * k}`,
        }));
      }
      group.appendChild(svg('text', {
        x, y: y + th * 0.35, 'text-anchor': 'middle', class: 'group', 'data-group': cluster.name,
        'font-size': th, 'stroke-width': 4 * k, 'letter-spacing': GROUP_SPACING * th,
      }, cluster.name));
      return;
    }
  };
  const numbered = [];
  const order = areas.filter(shown).sort((p, q) => rank(q) - rank(p) || away(p) - away(q));
  const hero = order.length && order[0].area_id === hereId ? [order.shift()] : [];
  const placeName = (a) => {
    const x = a.x || 0;
    const y = a.y || 0;
    const cls = a.area_id === hereId ? ' current' : near.has(a.area_id) ? ' reachable' : '';
    const cluster = clusters.get(a.area_id);
    const short = !cls.includes('current') && labelled.has(cluster) ? shortOf(a) : null;
    const name = short || nameOf(a);
    const w = labelWidth(name, LABEL_PX, cls === ' current' ? 'bold' : 'normal') * k;
    let spot = spotFor(a.area_id, x, y, w, h, cls === ' current' ? NEAR_RINGS * 2 : cls ? NEAR_RINGS : 2);
    let text = name;
    let kind = 'label';
    let size = h;
    if (!spot) {
      // On the whole map the group's label names it.
      if (overview && short) return;
      text = String(number.get(a.area_id));
      kind = 'num';
      size = h * 0.9;
      spot = spotFor(a.area_id, x, y, labelWidth(text, LABEL_PX * 0.9, 'bold') * k, size, 2);
      if (!spot) {
        // Inside its own circle, which nothing else covers.
        size = Math.min(size, (1.8 * r) / (labelWidth(text, 1, 'bold') || 1), 1.6 * r);
        spot = { x, y: y + size * 0.35, anchor: 'middle' };
        kind = 'num inside';
      }
      numbered.push([number.get(a.area_id), a]);
    }
    if (spot.box) taken.add(spot.box);
    if (spot.ring > 1) {
      // A name set further out points at its place.
      const b = spot.box;
      const tx = Math.max(b.x0 + gap, Math.min(x, b.x1 - gap));
      const ty = Math.max(b.y0 + gap, Math.min(y, b.y1 - gap));
      const len = Math.hypot(tx - x, ty - y) || 1;
      group.appendChild(svg('line', {
        x1: x + ((tx - x) / len) * r, y1: y + ((ty - y) / len) * r, x2: tx, y2: ty,
        // The hero's own name, when it had to move away, is tied to the
        // place as plainly as the place itself is marked.
        class: 'leader' + cls, 'stroke-width': (cls === ' current' ? 2 : 1) * k,
      }));
    }
    group.appendChild(svg('text', {
      x: spot.x, y: spot.y, 'text-anchor': spot.anchor, class: kind + cls, 'data-for': a.area_id,
      'font-size': size, 'stroke-width': (kind === 'num inside' ? 0 : 4 * k),
    }, text));
  };
  hero.forEach(placeName);
  // A group's label goes first of its places', in their order: the groups
  // of the hero's neighbours before the others.
  const tried = new Set();
  for (const a of order) {
    const cluster = clusters.get(a.area_id);
    if (cluster && !tried.has(cluster)) {
      tried.add(cluster);
      placeGroup(cluster);
    }
    placeName(a);
  }
  return numbered.sort((p, q) => p[0] - q[0]);
}

// The key under the map: the full name of every numbered place, and how
// many of them it shows when it scrolls.
function renderMapKey(numbered) {
  const key = $('map-key');
  // Once shown, the key stays (empty if need be) while the map, its zoom
  // and the window stay the same: it takes room from the map, and a map
  // with more room may name every place, hide the key, and lose the room
  // again, over and over.
  const keep = [game.snapshot.areas.length, game.mapScale, window.innerWidth, window.innerHeight].join('|');
  if (numbered.length) keyKeptFor = keep;
  key.hidden = game.mapView !== 'areas' || (!numbered.length && keyKeptFor !== keep);
  key.setAttribute('aria-label', t('map.key'));
  key.replaceChildren(...numbered.map(([n, a]) => {
    const li = el('li');
    li.dataset.for = a.area_id;
    li.title = descriptionOf(a) || nameOf(a);
    li.append(el('b', '', n), ' ' + nameOf(a));
    return li;
  }));
  updateKeyCount();
}

// The line over the key: how many places it lists, and, when they do not
// all fit, how many show and that it scrolls (with a fade at its foot while
// more is below).
function updateKeyCount() {
  const key = $('map-key');
  const count = $('map-key-count');
  count.hidden = key.hidden;
  if (key.hidden) return;
  const total = key.children.length;
  const scrolls = key.scrollHeight > key.clientHeight + 1;
  key.classList.toggle('more', scrolls && key.scrollTop + key.clientHeight < key.scrollHeight - 1);
  if (!total) {
    count.textContent = t('map.key.none');
    return;
  }
  if (!scrolls) {
    count.textContent = t('map.key.all', { total });
    return;
  }
  const frame = key.getBoundingClientRect();
  const seen = [...key.children].filter((li) => {
    const b = li.getBoundingClientRect();
    return b.top >= frame.top - 0.5 && b.bottom <= frame.bottom + 0.5;
  }).length;
  count.textContent = t('map.key.some', { shown: seen, total });
}

function updateZoomButtons() {
  $('map-zoom-out').disabled = !game.mapZoomed;
  $('map-fit').disabled = !game.mapZoomed;
  $('map-zoom-in').disabled = !game.mapScales.some((z) => z > game.mapZoom * 1.001);
}

// Zooms the area map one step in (+1) or out (-1), or shows the whole map
// (0), keeping the middle of what is shown in the middle.
export function zoomMap(step) {
  const wrap = $('map').parentNode;
  const cx = (wrap.scrollLeft + wrap.clientWidth / 2) / (wrap.scrollWidth || 1);
  const cy = (wrap.scrollTop + wrap.clientHeight / 2) / (wrap.scrollHeight || 1);
  const steps = game.mapScales;
  const current = game.mapZoom;
  let next = 'fit';
  if (step > 0) next = steps.find((z) => z > current * 1.001) ?? current;
  if (step < 0) next = steps.slice(1).reverse().find((z) => z < current * 0.999) ?? 'fit';
  game.mapScale = next;
  // Not a move of the hero: the view stays where the reader was looking.
  const pc = activeCharacter();
  game.centredOn = pc ? pc.area_id : null;
  renderMap();
  wrap.scrollLeft = cx * wrap.scrollWidth - wrap.clientWidth / 2;
  wrap.scrollTop = cy * wrap.scrollHeight - wrap.clientHeight / 2;
  layoutLabels();
}

export function renderWorld() {
  const s = game.snapshot;
  const zones = s.zones || [];
  $('map-switch').hidden = !zones.length;
  if (!zones.length && game.mapView === 'world') setMapView('areas');
  const world = $('world');
  world.replaceChildren();
  if (!zones.length) return;
  const pos = (s.player && s.player.position) || { x: 0, y: 0 };
  const xs = zones.map((z) => z.x).concat([pos.x]);
  const ys = zones.map((z) => z.y).concat([pos.y]);
  // At least WORLD_MIN_CELLS across, centred, so a young world is not one huge square.
  const w = Math.max(Math.max(...xs) - Math.min(...xs) + 3, WORLD_MIN_CELLS[0]);
  const h = Math.max(Math.max(...ys) - Math.min(...ys) + 3, WORLD_MIN_CELLS[1]);
  const minX = (Math.max(...xs) + Math.min(...xs) - w) / 2;
  const minY = (Math.max(...ys) + Math.min(...ys) - h) / 2;
  world.setAttribute('viewBox', `${minX} ${minY} ${w} ${h}`);
  const k = 1 / Math.min(mapScale(world, w, h), 200);
  const current = s.player && s.player.current_zone_id;
  for (const z of zones) {
    const g = svg('g', { class: 'zone' + (z.zone_id === current ? ' current' : ''), 'data-zone-id': z.zone_id });
    g.appendChild(svg('rect', { x: z.x - 0.42, y: z.y - 0.42, width: 0.84, height: 0.84, rx: 0.12 }));
    g.appendChild(svg('text', { x: z.x, y: z.y + 0.62, class: 'label', 'font-size': 11 * k, 'stroke-width': 3 * k }, z.name));
    g.appendChild(svg('title', {}, `${z.name}\n${z.description || ''}`));
    world.appendChild(g);
  }
  world.appendChild(svg('circle', { cx: pos.x, cy: pos.y, r: 7 * k, class: 'you' }));
}

export function setMapView(view) {
  game.mapView = view;
  // SVG elements have no `hidden` property: set the attribute itself.
  $('map').toggleAttribute('hidden', view !== 'areas');
  $('world').toggleAttribute('hidden', view !== 'world');
  $('map-zoom').hidden = view !== 'areas';
  $('map-key').hidden = view !== 'areas' || (!$('map-key').children.length && !keyKeptFor);
  updateKeyCount();
  for (const b of $('map-switch').querySelectorAll('button')) b.classList.toggle('on', b.dataset.view === view);
  if (view === 'world') renderWorld();
}
