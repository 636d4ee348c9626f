// The denials feed: newest first, with the reason and (when the daemon
// says) the layer that decided; filterable. Would-be denials of
// report-mode sources are marked as let through.

import { clock, h, matches, replace, sandboxHref } from './dom.js';
import { changed, state } from './store.js';

const SHOWN = 300;

const ui = { root: null, filter: '', drawn: null };

function build() {
  ui.root = h(
    'section',
    { class: 'denials-feed' },
    h(
      'div',
      { class: 'toolbar' },
      h('input', {
        id: 'denials-filter',
        type: 'search',
        placeholder: 'filter by sandbox, address, host, reason or layer',
        value: ui.filter,
        oninput: (event) => {
          ui.filter = event.target.value;
          changed();
        },
      }),
      h('span', { class: 'spacer' }),
      h('span', { id: 'denials-count', class: 'selection' }),
    ),
    h(
      'table',
      { id: 'denials-table', class: 'grid' },
      h('thead', {}, h('tr', {}, ['Time', 'Sandbox', 'Address', 'Target', 'Reason', 'Layer', 'Outcome'].map((label) => h('th', {}, label)))),
      h('tbody', { id: 'denial-rows' }),
    ),
    h('p', { id: 'denials-empty', class: 'empty' }, 'No denial recorded.'),
  );
  ui.drawn = null;
}

/** Renders the feed into `view`. */
export function render(view) {
  if (!ui.root || !view.contains(ui.root)) {
    build();
    replace(view, ui.root);
  }
  const key = state.denials.length + '\u0000' + (state.denials.at(-1) || {}).time_ms + '\u0000' + ui.filter;
  if (ui.drawn === key) return;
  ui.drawn = key;
  const shown = state.denials
    .filter((d) => matches(ui.filter, [d.id, d.ip, d.host + ':' + d.port, d.reason, d.layer || '']))
    .slice(-SHOWN)
    .reverse();
  replace(
    ui.root.querySelector('#denial-rows'),
    shown.map((d) =>
      h(
        'tr',
        { class: d.enforced === false ? 'reported' : '' },
        h('td', {}, clock(d.time_ms)),
        h('td', {}, d.id ? h('a', { href: sandboxHref(d.id) }, d.id) : 'unregistered'),
        h('td', {}, d.ip),
        h('td', {}, d.host + ':' + d.port),
        h('td', { class: 'reason' }, d.reason),
        h('td', { class: 'layer' }, d.layer || ''),
        h('td', {}, d.enforced === false ? 'let through (report)' : 'refused'),
      ),
    ),
  );
  ui.root.querySelector('#denials-count').textContent = shown.length + ' shown of ' + state.denials.length;
  ui.root.querySelector('#denials-empty').hidden = shown.length > 0;
}
