// The page's language (the reader's choice, saved, else the browser's) and
// its text: `t(key)` looks a key up in the tables of /i18n.js
// (`window.I18N`, a classic script that runs before the modules), in the
// page's language, else in English.

import { $, readJson, writeJson } from './dom.js';

export let lang = pickLanguage();

function pickLanguage() {
  const saved = readJson('local', 'questd.lang', null);
  if (saved === 'en' || saved === 'zh') return saved;
  return (navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

export function t(key, vars) {
  const table = window.I18N || {};
  const s = (table[lang] && table[lang][key]) ?? (table.en && table.en[key]) ?? key;
  return s.replace(/\{(\w+)\}/g, (_, k) => (vars && vars[k] !== undefined ? String(vars[k]) : ''));
}

export function hasText(key) {
  const table = window.I18N || {};
  return Boolean((table[lang] && table[lang][key]) || (table.en && table.en[key]));
}

// A timed event's name for people: the page's words for the events it
// knows (`event.<name>`), else the game master's name with its
// underscores as spaces ("guards_return" → "Timed event: guards return").
export function eventName(event) {
  const name = String(event || '');
  if (name !== 'other' && hasText('event.' + name)) return t('event.' + name);
  return t('event.other', { event: name.replace(/_/g, ' ') });
}

// Switches between English and Chinese, and remembers the choice.
export function switchLanguage() {
  lang = lang === 'zh' ? 'en' : 'zh';
  writeJson('local', 'questd.lang', lang);
}

// The page's own text (`data-i18n`, `data-i18n-placeholder`,
// `data-i18n-label`) in the page's language.
export function translatePage() {
  document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
  for (const e of document.querySelectorAll('[data-i18n-placeholder]')) e.placeholder = t(e.dataset.i18nPlaceholder);
  // Controls whose visible text a narrow screen hides keep their name for
  // screen readers.
  for (const e of document.querySelectorAll('[data-i18n-label]')) e.setAttribute('aria-label', t(e.dataset.i18nLabel));
  $('lang').textContent = t('lang.switch');
  $('lang').title = t('lang.title');
}
