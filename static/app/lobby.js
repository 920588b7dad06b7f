// The lobby: the campaigns to start a session of, a save to continue as a
// new session, the links of a session just made (kept in localStorage, so
// the lobby offers to resume it), and the live sessions anyone may watch.

import { $, el, icon, notice, readJson, sessionLink, writeJson } from './dom.js';
import { hasText, lang, t } from './language.js';
import { questd } from './state.js';

export async function loadCampaigns() {
  const list = $('campaigns');
  try {
    const campaigns = await questd.campaigns();
    list.replaceChildren();
    for (const c of campaigns) {
      const card = el('article', 'campaign');
      card.dataset.campaignId = c.campaign_id;
      const art = el('div', 'campaign-art');
      art.appendChild(icon('lantern'));
      const info = el('div', 'grow');
      // The campaign's Chinese title and description, where it has them.
      const zh = lang === 'zh';
      const title = (zh && c.title_zh) || c.title || c.campaign_id;
      info.append(el('h3', null, title), el('p', 'muted', (zh && c.description_zh) || c.description || ''));
      const btn = el('button', 'primary start', t('lobby.start'));
      btn.type = 'button';
      btn.addEventListener('click', () => startSession(c, btn));
      card.append(art, info, btn);
      list.appendChild(card);
    }
    if (!campaigns.length) list.appendChild(el('p', 'muted', t('lobby.no_campaigns')));
  } catch (e) {
    list.replaceChildren(el('p', 'error', t('lobby.campaigns_failed', { message: e.message })));
  }
}

async function startSession(campaign, btn) {
  btn.disabled = true;
  btn.textContent = t('lobby.starting');
  try {
    const body = {
      campaign_id: campaign.campaign_id,
      visibility: $('public').checked ? 'public' : 'private',
    };
    // A person approves (or denies) each blow and each item handed over
    // (docs/protocol.md §19): the demo's fights and takings pause for it.
    if ($('approval-ask').checked) body.approval = { tools: ['hp_delta', 'add_inventory'] };
    showCreated(await questd.createSession(body), campaign.title);
  } catch (e) {
    notice(t('lobby.start_failed', { message: e.message }), 'error');
  } finally {
    btn.disabled = false;
    btn.textContent = t('lobby.start');
  }
}

// A session just made, from a campaign or a save: its links are kept in
// localStorage and shown in "Your session is ready".
function showCreated(s, title) {
  const mine = readJson('local', 'questd.sessions', {});
  mine[s.session_id] = { player: s.player_token, spectator: s.spectator_token, title };
  writeJson('local', 'questd.sessions', mine);
  const player = sessionLink(s.session_id, s.player_token);
  const spectator = sessionLink(s.session_id, s.spectator_token);
  $('player-link-text').value = player;
  $('spectator-link-text').value = spectator;
  $('player-link').href = player;
  $('spectator-link').href = spectator;
  $('created').hidden = false;
  $('created').scrollIntoView({ behavior: 'smooth', block: 'nearest' });
  loadSessions();
}

// "Continue from a save": the file chosen is sent as it is (the server
// checks it); a refusal says why, each of its problems on a line.
async function importSave(e) {
  e.preventDefault();
  const file = $('import-file').files[0];
  if (!file) return;
  const go = $('import-go');
  const problem = $('import-error');
  go.disabled = true;
  go.textContent = t('lobby.importing');
  problem.hidden = true;
  try {
    let save;
    try {
      save = JSON.parse(await file.text());
    } catch {
      showImportProblem(t('lobby.import_not_json'));
      return;
    }
    const s = await questd.importSession(save, { visibility: $('public').checked ? 'public' : 'private' });
    const title = save && save.campaign && typeof save.campaign.title === 'string' ? save.campaign.title : '';
    showCreated(s, title);
  } catch (err) {
    if (err.error_code === 'INVALID_SAVE') showImportProblem(t('lobby.import_invalid'), err.problems || []);
    else if (err.status === 413) showImportProblem(t('lobby.import_too_large'));
    else showImportProblem(t('lobby.import_failed', { message: err.message || err.error_code }));
  } finally {
    go.disabled = false;
    go.textContent = t('lobby.import_go');
  }
}

function showImportProblem(text, problems = []) {
  const box = $('import-error');
  box.replaceChildren(el('p', null, text));
  if (problems.length) {
    const list = el('ul', 'problems');
    for (const p of problems) list.appendChild(el('li', null, p));
    box.appendChild(list);
  }
  box.hidden = false;
}

export async function loadSessions() {
  const list = $('sessions');
  try {
    const sessions = await questd.listSessions();
    const mine = readJson('local', 'questd.sessions', {});
    list.replaceChildren();
    for (const s of sessions) {
      const li = el('li', 'session-row');
      li.dataset.sessionId = s.session_id;
      const info = el('div', 'grow');
      info.append(el('strong', null, s.title || s.session_id), el('div', 'muted mono', s.session_id));
      const counts = el('div', 'counts');
      const players = el('span', 'count');
      players.append(icon('user'), el('b', 'players', s.players), el('span', 'sr', t('lobby.players', { n: s.players })));
      const watchers = el('span', 'count');
      watchers.append(icon('eye'), el('b', 'spectators', s.spectators), el('span', 'sr', t('lobby.spectators', { n: s.spectators })));
      counts.append(players, watchers, el('span', 'muted', t('lobby.turns', { n: s.turns })));
      li.append(info, counts);
      if (mine[s.session_id] && mine[s.session_id].player) {
        const play = el('a', 'button primary small', t('lobby.resume'));
        play.href = sessionLink(s.session_id, mine[s.session_id].player);
        li.append(play);
      }
      if (s.spectator_token) {
        const watch = el('a', 'button ghost small watch', t('lobby.watch'));
        watch.href = sessionLink(s.session_id, s.spectator_token);
        li.append(watch);
      }
      list.appendChild(li);
    }
    if (!sessions.length) list.appendChild(el('li', 'muted empty', t('lobby.no_sessions')));
  } catch (e) {
    list.replaceChildren(el('li', 'error', t('lobby.sessions_failed', { message: e.message })));
  }
}

export async function startLobby() {
  document.body.dataset.view = 'lobby';
  $('refresh').addEventListener('click', loadSessions);
  $('import-form').addEventListener('submit', importSave);
  // The lobby shows once its campaigns are in, so nothing on it moves
  // down when they arrive (no layout shift); the live sessions come last
  // and only grow the page's end.
  await loadCampaigns();
  $('lobby').hidden = false;
  loadSessions();
  setInterval(() => { if (!document.hidden) loadSessions(); }, 5000);
}

// An invite link (`?join=<session>&invite=<code>`): asks for a name, joins, keeps the
// seat's token with the session's links in localStorage (so the lobby and
// the invite link itself lead back to the seat), and hands the token on.
export function startJoin(sessionId, inviteCode, onJoined) {
  document.body.dataset.view = 'join';
  $('join').hidden = false;
  const form = $('join-form');
  const input = $('join-name');
  const go = $('join-go');
  const problem = $('join-error');
  input.focus();
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const name = input.value.trim();
    if (!name) return;
    go.disabled = true;
    go.textContent = t('join.joining');
    problem.hidden = true;
    try {
      const seat = await questd.join(sessionId, inviteCode, name);
      const mine = readJson('local', 'questd.sessions', {});
      mine[seat.session_id] = { ...(mine[seat.session_id] || {}), player: seat.player_token, seat: seat.seat_id, invite: inviteCode };
      writeJson('local', 'questd.sessions', mine);
      $('join').hidden = true;
      onJoined(seat.session_id, seat.player_token);
    } catch (err) {
      const code = err && err.error_code;
      problem.textContent = ['join.' + code].filter(hasText).map((k) => t(k))[0] || t('join.failed', { message: err.message || code });
      problem.hidden = false;
    } finally {
      go.disabled = false;
      go.textContent = t('join.go');
    }
  });
}

// The seat this browser took with an invite to this session, if any.
export function joinedToken(sessionId, inviteCode) {
  const saved = readJson('local', 'questd.sessions', {})[sessionId];
  return saved && saved.player && saved.invite === inviteCode ? saved.player : null;
}
