// questd browser client: the lobby, and the play / spectate view of one
// session (story timeline, live SVG map, character sheet). No dependencies
// and no build step; served by the binary (src/http/static_files.rs).
//
// This module starts the page and wires its views together. The views are
// the modules of app/, each importing only those below it in this list:
//   connection.js  the session's Connection and what each of its events does
//   approvals.js   a call that waits for a person's decision, as a card
//   cards.js       what a turn's tools did: its summary line and cards
//   story.js       the story timeline, with the messages waiting to run
//   party.js       the seats, table talk, the host's controls, the round's note
//   lobby.js (and joining by invite), hero.js (the sheet), map.js,
//   composer.js (the chat input)
//   state.js       `game` and its snapshot
//   language.js    the page's language and its text (the tables: /i18n.js)
//   dom.js         making elements, storage, notices
// A module reaches one above it only through a callback this one gives it
// (state's onChange, map's onGo).
//
// Everything the server sends is inserted with textContent or SVG
// attributes, never as HTML.
//
// The link to the server is @questd/client (clients/js, served under
// /client/): its HTTP calls for the lobby, and its Connection for a session
// (docs/protocol.md §2, §3), which
// - reconnects with backoff and `last_seq`, and hands on every story frame
//   once, in seq order; `live` is false for a frame of a resume backlog
//   whose effect the welcome's snapshot (the state as of `welcome.seq`)
//   already holds; effects of live frames are applied from their tool
//   results and from the `state_patch` of `turn_completed`;
// - keeps typed messages in its outbox until their turns start, sends each
//   again with the same `request_id` after a reconnect (the server runs a
//   request_id once) and after a rate limit; the page keeps the outbox in
//   sessionStorage so a reload sends them again;
// - stops for good on a link the server refuses or a session an operator
//   closed.

import { $, el, notice, readJson, sessionLink } from './app/dom.js';
import { switchLanguage, t, translatePage } from './app/language.js';
import { game, onChange, questd, showTitle } from './app/state.js';
import { joinedToken, loadCampaigns, loadSessions, startJoin, startLobby } from './app/lobby.js';
import { openInvite, renderParty, sendSay, setMode } from './app/party.js';
import { renderOpening, scrollStory, updateOutboxEntry } from './app/story.js';
import { chat, goCommand, renderHints, sendChat, showHintsCue, watchHints } from './app/composer.js';
import { detailsOn, renderSummaries, setDetails } from './app/cards.js';
import { renderApprovals } from './app/approvals.js';
import { renderSheet } from './app/hero.js';
import { onGo, renderMap, renderWorld, setMapView, zoomMap } from './app/map.js';
import { connect, outboxKey, paintConnection, reconnectNow, setConn } from './app/connection.js';

// How long a downloaded save's Blob URL is kept.
const SAVE_URL_MS = 60000;

async function copyFrom(inputId, button) {
  const input = $(inputId);
  input.select();
  try { await navigator.clipboard.writeText(input.value); } catch { document.execCommand('copy'); }
  button.textContent = t('copied');
  setTimeout(() => { button.textContent = t('copy'); }, 1500);
}

// Every view drawn from the snapshot, after it changed.
function render() {
  if (!game.snapshot) return;
  renderMap();
  renderWorld();
  renderSheet();
  renderHints();
  renderParty();
}

// The page in the language just chosen (and first, in the saved one).
function applyLanguage() {
  translatePage();
  if (game.id) {
    renderHints();
    setConn(game.connState || 'connecting');
    paintConnection();
    if (game.snapshot) render();
    showTitle();
    renderSummaries();
    renderApprovals();
    renderOpening();
    for (const entry of game.outbox.values()) updateOutboxEntry(entry);
    renderParty();
  }
}

function showTab(tab) {
  $('game').dataset.tab = tab;
  for (const b of document.querySelectorAll('.tabs button')) {
    b.classList.toggle('on', b.dataset.tab === tab);
    b.setAttribute('aria-selected', String(b.dataset.tab === tab));
  }
  if (tab === 'map' && game.snapshot) {
    game.centredOn = null;
    renderMap();
  }
  if (tab === 'story') { scrollStory(() => {}); showHintsCue(); }
}

async function openShare() {
  let token = game.role === 'spectator' ? game.token : null;
  if (!token) {
    const mine = readJson('local', 'questd.sessions', {});
    token = mine[game.id] && mine[game.id].spectator;
  }
  if (!token) {
    try {
      const list = await questd.listSessions();
      const s = list.find((x) => x.session_id === game.id);
      token = s && s.spectator_token;
    } catch { /* shown as unknown below */ }
  }
  $('share-link').value = token ? sessionLink(game.id, token) : '';
  $('share-note').textContent = token ? t('share.note') : t('share.unknown');
  $('share-box').hidden = false;
}

// The player's save (docs/protocol.md §13): the session exported with the
// player's token, and the name its file goes by. The browser test reaches
// it as a global, since a download leaves the page.
async function saveFile() {
  const save = await questd.exportSession(game.id, game.token);
  const blob = new Blob([JSON.stringify(save)], { type: 'application/json' });
  return { name: `questd-save-${game.id}.json`, blob };
}
globalThis.saveFile = saveFile;

async function downloadSave() {
  const button = $('save');
  button.disabled = true;
  try {
    const { name, blob } = await saveFile();
    const url = URL.createObjectURL(blob);
    const link = el('a');
    link.href = url;
    link.download = name;
    document.body.appendChild(link);
    link.click();
    link.remove();
    // The download reads the Blob after the click returns: it is freed later.
    setTimeout(() => URL.revokeObjectURL(url), SAVE_URL_MS);
  } catch (e) {
    notice(t('save.failed', { message: e.message || e.error_code }), 'error', 6000, e.error_code);
  } finally {
    button.disabled = false;
  }
}

function startGame(id, token) {
  game.id = id;
  game.token = token;
  document.body.dataset.view = 'game';
  $('game').hidden = false;
  renderHints();
  watchHints();
  showTab('story');
  const details = $('details');
  details.checked = detailsOn();
  details.addEventListener('change', () => setDetails(details.checked));

  const input = $('chat-input');
  let lastSent = '';
  $('chat').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = input.value;
    if (sendChat(text)) { lastSent = text.trim(); input.value = ''; }
  });
  input.addEventListener('keydown', (e) => {
    // Enter sends, but not while an input method (Chinese, Japanese…) is composing.
    if (e.key === 'Enter' && (e.isComposing || e.keyCode === 229)) e.preventDefault();
    if (e.key === 'ArrowUp' && !input.value && lastSent) { input.value = lastSent; e.preventDefault(); }
  });
  for (const b of document.querySelectorAll('.tabs button')) b.addEventListener('click', () => showTab(b.dataset.tab));
  for (const b of $('map-switch').querySelectorAll('button')) b.addEventListener('click', () => setMapView(b.dataset.view));
  $('map-zoom-in').addEventListener('click', () => zoomMap(1));
  $('map-zoom-out').addEventListener('click', () => zoomMap(-1));
  $('map-fit').addEventListener('click', () => zoomMap(0));
  $('retry-now').addEventListener('click', reconnectNow);
  $('share').addEventListener('click', openShare);
  $('save').addEventListener('click', downloadSave);
  $('share-close').addEventListener('click', () => { $('share-box').hidden = true; });
  $('invite').addEventListener('click', openInvite);
  $('invite-close').addEventListener('click', () => { $('invite-box').hidden = true; $('invite').focus(); });
  for (const box of [$('invite-box'), $('share-box')]) {
    box.addEventListener('keydown', (e) => { if (e.key === 'Escape') box.hidden = true; });
  }
  for (const b of $('mode-switch').querySelectorAll('button')) b.addEventListener('click', () => setMode(b.dataset.mode));
  const sayInput = $('say-input');
  $('say').addEventListener('submit', (e) => {
    e.preventDefault();
    if (sendSay(sayInput.value)) sayInput.value = '';
  });
  window.addEventListener('online', reconnectNow);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) reconnectNow(); });
  let resizeTimer = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (game.snapshot) { renderMap(); renderWorld(); }
      showHintsCue();
    }, 150);
  });
  setInterval(paintConnection, 500);
  const timeline = $('timeline');
  timeline.addEventListener('scroll', () => {
    // Scroll events come a frame late: by then more story may have been
    // added below our own scroll, which must not count as the reader leaving.
    if (timeline.scrollTop === game.autoScrollTop) return;
    game.follow = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 120;
  }, { passive: true });
  // A reader who follows the story stays at its end through every change
  // of size, not only when frames come: the story's own box (the hints or
  // a notice below it taking room, a narrower window) and its parts (text
  // rewrapped, a font or a detail laid out late).
  const stick = new ResizeObserver(() => scrollStory(() => {}));
  for (const box of [timeline, ...timeline.children]) stick.observe(box);

  connect();
  // Messages typed before a reload are still owed to the server; one that
  // ran already is not run again (its request_id is known).
  for (const saved of readJson('session', outboxKey(), [])) {
    if (!saved || !saved.request_id || !saved.text) continue;
    chat(saved.text, saved.request_id);
  }
}

// ---------------------------------------------------------------- start

onChange(render);
onGo((areaId) => { sendChat(goCommand(areaId)); showTab('story'); });
$('lang').addEventListener('click', () => {
  switchLanguage();
  applyLanguage();
  if (!game.id) { loadCampaigns(); loadSessions(); }
});
for (const b of document.querySelectorAll('button.copy')) b.addEventListener('click', () => copyFrom(b.dataset.copy, b));
applyLanguage();

const params = new URLSearchParams(location.search);
// An invite link (`?join=<session>&invite=<code>`) names its session and
// code; one this browser has used already leads back to its seat.
const joining = params.get('join');
const invite = params.get('invite');
const playAs = (id, token) => {
  history.replaceState(null, '', sessionLink(id, token));
  startGame(id, token);
};
if (params.get('session') && params.get('token')) startGame(params.get('session'), params.get('token'));
else if (joining && invite) {
  const token = joinedToken(joining, invite);
  if (token) playAs(joining, token);
  else startJoin(joining, invite, playAs);
} else startLobby();
