// One sandbox's page: per address, its allow and deny entries with where
// each came from (how it was registered, a preset, a file, an ask answer,
// a named policy it takes) and when a grant expires, and the mode and cap
// it works with (its own, or its policies'); a grant can be revoked from here.

import * as api from './api.js';
import { withSecret } from './auth.js';
import { bytes, clock, duration, h, replace } from './dom.js';
import { made, registrationsOf, state } from './store.js';
import { toast } from './toast.js';

const ORIGINS = { api: 'API', label: 'Docker label', config: 'config (--register)', run: 'crackbox run' };

/** Where `entry` of `spec` came from, as text. */
function source(spec, entry) {
  const origin = (spec.origins || {})[entry];
  if (origin && origin.from === 'ask') return 'ask answer';
  if (origin && origin.from === 'preset') return 'preset ' + origin.name;
  if (origin && origin.from === 'file') return 'file ' + origin.name;
  return ORIGINS[spec.origin || 'api'];
}

function expiry(spec, entry, now) {
  const origin = (spec.origins || {})[entry];
  if (!origin || origin.from !== 'ask') return '';
  if (!origin.expires) return 'never';
  const left = origin.expires - now;
  return left > 0 ? clock(origin.expires) + ' (in ' + duration(left) + ')' : 'expiring';
}

async function revoke(spec, entry) {
  try {
    await withSecret(() => api.revoke(spec.ip, entry));
    toast('Revoked ' + entry + ' for ' + spec.id + ' (' + spec.ip + ')');
  } catch (err) {
    toast('Could not revoke ' + entry + ': ' + err.message, 'error');
  }
}

/** The `kind` entries (allow or deny) of `spec` and of the named policies it takes, each with where it came from. */
function rowsOf(spec, kind) {
  const own = (kind === 'allow' ? spec.allowlist : spec.deny || []).map((entry) => ({ entry, from: source(spec, entry), own: true }));
  const named = made(spec).named.flatMap((policy) => (policy[kind] || []).map((entry) => ({ entry, from: 'policy ' + policy.name, own: false })));
  return own.concat(named);
}

function entries(spec, rows, kind, now) {
  if (!rows.length) return h('p', { class: 'empty' }, kind === 'allow' ? 'No allow entry: everything is denied (or asked).' : 'No deny entry.');
  return h(
    'table',
    { class: 'grid entries ' + kind, dataset: { ip: spec.ip } },
    h('thead', {}, h('tr', {}, h('th', {}, 'Entry'), h('th', {}, 'Came from'), kind === 'allow' ? [h('th', {}, 'Expires'), h('th', {})] : [])),
    h(
      'tbody',
      {},
      rows.map(({ entry, from, own }) => {
        const grant = own && ((spec.origins || {})[entry] || {}).from === 'ask';
        return h(
          'tr',
          { dataset: { entry, own: own ? 'yes' : 'no' } },
          h('td', { class: 'entry' }, entry),
          h('td', { class: 'source' }, from),
          kind === 'allow'
            ? [h('td', { class: 'expires' }, own ? expiry(spec, entry, now) : ''), h('td', {}, grant ? h('button', { type: 'button', class: 'revoke', onclick: () => revoke(spec, entry) }, 'Revoke') : '')]
            : [],
        );
      }),
    ),
  );
}

function facts(spec) {
  const usage = state.usage.get(spec.ip);
  const { mode, cap } = made(spec);
  const from = (given) => (given.from ? ' (policy ' + given.from + ')' : '');
  const rows = [
    ['Address', spec.ip],
    ['Mode', mode.value + from(mode)],
    ['Registered by', ORIGINS[spec.origin || 'api']],
    ['Cap', cap ? bytes(cap.value) + '/s each way' + from(cap) : 'none'],
  ];
  if ((spec.policies || []).length) rows.push(['Policies', spec.policies.join(', ')]);
  if (usage) {
    rows.push(['Moved', bytes(usage.bytes_up) + ' up, ' + bytes(usage.bytes_down) + ' down']);
    rows.push(['Now', bytes(usage.rate_up || 0) + '/s up, ' + bytes(usage.rate_down || 0) + '/s down, ' + usage.connections + ' open']);
  }
  return rows.map(([term, text]) => [h('dt', {}, term), h('dd', {}, text)]);
}

function registration(spec, now) {
  return h(
    'section',
    { class: 'registration', dataset: { ip: spec.ip } },
    h('dl', { class: 'facts' }, facts(spec)),
    h('h3', {}, 'Allowed'),
    entries(spec, rowsOf(spec, 'allow'), 'allow', now),
    h('h3', {}, 'Denied'),
    entries(spec, rowsOf(spec, 'deny'), 'deny', now),
  );
}

function recent(id) {
  const denials = state.denials.filter((denial) => denial.id === id).slice(-20).reverse();
  return denials.length
    ? h('ul', { class: 'denials' }, denials.map((d) => h('li', { class: d.enforced === false ? 'reported' : '' }, clock(d.time_ms) + '  ' + d.host + ':' + d.port + '  ' + d.reason + (d.enforced === false ? '  (let through: report mode)' : ''))))
    : h('p', { class: 'empty' }, 'None recently.');
}

/** What the page was last built from: rebuilt when it changes, else only its figures move. */
let built = { view: null, id: null, specs: '' };

/** Renders the page of sandbox `id` into `view`. */
export function render(view, id) {
  const specs = registrationsOf(id);
  const now = Date.now();
  const signature = JSON.stringify(specs) + JSON.stringify(specs.flatMap((spec) => made(spec).named));
  if (built.view === view && built.id === id && built.specs === signature && view.querySelector('section.sandbox')) {
    for (const section of view.querySelectorAll('section.registration')) {
      const spec = specs.find((s) => s.ip === section.dataset.ip);
      if (!spec) continue;
      replace(section.querySelector('dl.facts'), facts(spec));
      for (const tr of section.querySelectorAll('table.allow tbody tr[data-own="yes"]')) {
        tr.querySelector('td.expires').textContent = expiry(spec, tr.dataset.entry, now);
      }
    }
    replace(view.querySelector('#sandbox-denials'), recent(id));
    return;
  }
  built = { view, id, specs: signature };
  replace(
    view,
    h(
      'section',
      { class: 'sandbox' },
      h('p', {}, h('a', { href: '#/sandboxes' }, '← all sandboxes')),
      h('h2', { id: 'sandbox-id' }, id),
      specs.length ? specs.map((spec) => registration(spec, now)) : h('p', { class: 'empty' }, 'This sandbox is not registered (any more).'),
      h('h3', {}, 'Recent denials'),
      h('div', { id: 'sandbox-denials' }, recent(id)),
    ),
  );
}
