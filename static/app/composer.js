// What the player writes: the checks on a message before it goes, handing
// it to the connection, and the quick commands under the story.

import { $, el, notice } from './dom.js';
import { t } from './language.js';
import { activeCharacter, area, game, nameOf } from './state.js';

// The server's longest chat text (QUESTD_MAX_TEXT_CHARS default).
const MAX_TEXT_CHARS = 2000;
// Refusals of a chat that put its text back into the input.
export const RETURNED_CODES = new Set(['TEXT_TOO_LONG', 'INVALID_FRAME', 'FORBIDDEN']);

export function sendChat(text) {
  text = String(text || '').trim();
  if (!text || game.role === 'spectator') return false;
  if (Array.from(text).length > MAX_TEXT_CHARS) {
    notice(t('notice.too_long', { n: MAX_TEXT_CHARS }), 'error');
    return false;
  }
  chat(text);
  return true;
}

// The command that takes the hero to a place, in the page's language and by
// the place's name in it (`去 灯笼门`, `go to Lantern Gate`), so the answer
// comes in that language too. By its id when the place has no name, or
// when another place goes by the same name: a name must lead to one place.
export function goCommand(areaId) {
  const a = area(areaId);
  const name = a ? nameOf(a) : '';
  const shared = name && game.snapshot.areas.some((x) => x.area_id !== areaId && nameOf(x) === name);
  return t('cmd.go', { place: name && !shared ? name : areaId });
}

// Hands a message to the connection, which sends it (again, with the same
// request_id, until its turn starts) and settles it with its turn's end. A
// failed turn shows in the story, a refusal as a notice (onError), and the
// session's end in the fatal panel; a message refused for what it says goes
// back into the input.
export function chat(text, requestId) {
  game.conn.chat(text, { requestId }).catch((e) => {
    const code = e && e.error_code;
    if (e.frame && e.frame.type === 'error') {
      const input = $('chat-input');
      if (RETURNED_CODES.has(code) && !input.value) input.value = text;
      return;
    }
    // A round's action replaced by a later one of this seat needs no word.
    if (e.frame || e.fatal || code === 'CLOSED' || code === 'OUTCOME_UNKNOWN' || code === 'REPLACED') return;
    notice(t('error.other', { code, message: e.message || '' }), 'error', 6000, code);
  });
}

// The quick commands under the story: the adventure here (look around, talk
// to and attack the person here, take something), then the wider game.
// `talk` and `attack` name the first person standing where the hero is, and
// are left out when nobody is.
const HINTS = ['look', 'talk', 'take', 'attack', 'where', 'explore', 'roll', 'status', 'scout', 'search'];
// Commands put in the input for the player to finish or confirm, not sent:
// those that need words (their text ends with a space) and attacks.
const CONFIRMED_HINTS = new Set(['attack']);

// Someone standing where the hero is, for the talk and attack commands.
function personHere() {
  const pc = activeCharacter();
  if (!pc) return null;
  return game.snapshot.characters.find((c) => c.kind === 'npc' && c.area_id === pc.area_id
    && c.state !== 'downed' && c.hp > 0) || null;
}

export function renderHints() {
  const box = $('hints');
  const who = personHere();
  const name = who ? nameOf(who) : '';
  const hints = HINTS.filter((h) => name || (h !== 'talk' && h !== 'attack')).map((h) => ({
    h, label: t('hint.' + h, { name }), cmd: t('hint.' + h + '.cmd', { name }),
  }));
  // Rebuilt only when they change, so a focused chip keeps its focus.
  const shown = JSON.stringify(hints);
  if (box.dataset.shown === shown) return;
  box.dataset.shown = shown;
  box.replaceChildren();
  for (const { h, label, cmd } of hints) {
    const b = el('button', 'hint', label);
    b.type = 'button';
    b.dataset.hint = h;
    b.addEventListener('click', () => {
      const input = $('chat-input');
      if (cmd.endsWith(' ') || CONFIRMED_HINTS.has(h)) {
        input.value = cmd;
        input.focus();
      } else {
        sendChat(cmd);
      }
    });
    box.appendChild(b);
  }
  showHintsCue();
}

// The quick commands scroll sideways when they do not fit: a fade and an
// arrow at the right edge say so while more lies beyond it, and the arrow
// (a button, so a keyboard reaches it too) scrolls the row on.
export function showHintsCue() {
  const box = $('hints');
  const more = box.scrollWidth - box.clientWidth - box.scrollLeft > 2;
  const arrow = $('hints-more');
  box.parentNode.classList.toggle('more', more);
  // The arrow goes at the end: its focus passes to the last command.
  if (!more && document.activeElement === arrow && box.lastElementChild) box.lastElementChild.focus();
  arrow.hidden = !more;
}

export function watchHints() {
  const box = $('hints');
  box.addEventListener('scroll', showHintsCue, { passive: true });
  $('hints-more').addEventListener('click', () => {
    box.scrollBy({ left: box.clientWidth * 0.7, behavior: 'smooth' });
  });
}
