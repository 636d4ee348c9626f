// The inbox: requests held in ask mode, one row per (sandbox, host:port)
// with the connections held, age and time left, decided per row or for a
// selection: once, for a while, always, deny; per row also always into one
// of the policies the sandbox names. A grant can be undone. On a fleet node
// every node's requests, one row per node too, each answered on its node.

import * as api from './api.js';
import { withSecret } from './auth.js';
import { duration, h, matches, replace, sandboxHref } from './dom.js';
import * as fleetList from './fleet.js';
import { changed, ownNode, pendingKey, state } from './store.js';
import { toast } from './toast.js';

const PERIODS = ['5m', '30m', '1h', '8h', '24h'];

const ui = {
  root: null,
  rows: new Map(), // group key -> row element
  selected: new Set(), // group keys
  focused: null, // group key
  filter: '',
  period: '30m',
  fleet: false, // whether the table was built for a fleet node (a Node column)
};

/** The policies the sandbox of `request` names: the fleet's list says, else this daemon's registration. */
function policiesOf(request) {
  if (Array.isArray(request.policies)) return request.policies;
  const spec = state.registrations.get(request.ip);
  return spec && spec.id === request.sandbox && Array.isArray(spec.policies) ? spec.policies : [];
}

/** The pending requests grouped by (node,) sandbox and target, oldest first. */
function groups() {
  const byKey = new Map();
  const fleet = ownNode() !== '';
  for (const request of state.pending.values()) {
    const target = request.host + ':' + request.port;
    const node = request.node || ownNode();
    const key = (fleet ? node + '\u0000' : '') + request.sandbox + '\u0000' + target;
    let group = byKey.get(key);
    if (!group) {
      group = { key, node, sandbox: request.sandbox, target, host: request.host, port: request.port, ips: new Set(), policies: new Set(), requests: [], held: 0, since: request.since };
      byKey.set(key, group);
    }
    group.ips.add(request.ip);
    for (const policy of policiesOf(request)) group.policies.add(policy);
    group.requests.push(request);
    group.held += request.waiting;
    group.since = Math.min(group.since, request.since);
  }
  return [...byKey.values()]
    .filter((group) => matches(ui.filter, [group.sandbox, group.target, ...group.ips, fleet ? group.node : '']))
    .sort((a, b) => a.since - b.since || a.key.localeCompare(b.key));
}

/** The period `for` buttons grant, or null when the custom one is not valid. */
function period() {
  return /^(\d+[smhd])+$/.test(ui.period) ? ui.period : null;
}

function build() {
  const fleet = ownNode() !== '';
  const filter = h('input', {
    id: 'inbox-filter',
    type: 'search',
    placeholder: fleet ? 'filter by node, sandbox, address or host  ( / )' : 'filter by sandbox, address or host  ( / )',
    value: ui.filter,
    oninput: (event) => {
      ui.filter = event.target.value;
      changed();
    },
  });
  const custom = h('input', { id: 'period-custom', class: 'custom', placeholder: 'e.g. 90m', hidden: PERIODS.includes(ui.period), value: PERIODS.includes(ui.period) ? '' : ui.period });
  custom.addEventListener('input', () => {
    ui.period = custom.value.trim();
    changed();
  });
  const select = h(
    'select',
    {
      id: 'period',
      title: 'how long "for" grants',
      onchange: (event) => {
        custom.hidden = event.target.value !== 'custom';
        ui.period = custom.hidden ? event.target.value : custom.value.trim();
        if (!custom.hidden) custom.focus();
        changed();
      },
    },
    PERIODS.map((p) => h('option', { value: p, selected: p === ui.period }, p)),
    h('option', { value: 'custom', selected: !PERIODS.includes(ui.period) }, 'custom…'),
  );
  const bulk = (decision, label) => h('button', { type: 'button', class: 'bulk ' + decision, dataset: { bulk: decision }, onclick: () => decideSelection(decision) }, label);
  const selectAll = h('input', { type: 'checkbox', id: 'select-all', title: 'select every row shown', onchange: (event) => selectEvery(event.target.checked) });
  ui.root = h(
    'section',
    { class: 'inbox' },
    h('div', { class: 'toolbar' }, filter, h('span', { class: 'spacer' }), h('span', { id: 'selection', class: 'selection' }), bulk('once', 'Once'), bulk('for', 'For'), select, custom, bulk('always', 'Always'), bulk('deny', 'Deny')),
    h(
      'table',
      { id: 'inbox-table', class: 'grid' },
      h('thead', {}, h('tr', {}, h('th', { class: 'check' }, selectAll), h('th', {}, 'Sandbox'), fleet ? h('th', {}, 'Node') : null, h('th', {}, 'Target'), h('th', { class: 'num' }, 'Held'), h('th', { class: 'num' }, 'Age'), h('th', { class: 'num' }, 'Time left'), h('th', {}, 'Decide'))),
      h('tbody', { id: 'inbox-rows' }),
    ),
    h('p', { id: 'inbox-empty', class: 'empty' }, 'Nothing is waiting for a decision.'),
    fleet ? h('p', { id: 'fleet-error', class: 'message', role: 'alert', hidden: true }) : null,
    h('p', { class: 'help' }, 'Keys: j / k move, x select, o once, f for the period, a always, d deny, / filter, Esc clear the selection.'),
  );
  ui.rows.clear();
  ui.fleet = fleet;
}

function row(group) {
  const cell = (name, ...children) => h('td', { class: name }, ...children);
  const act = (decision, label) => h('button', { type: 'button', class: 'act ' + decision, dataset: { act: decision }, onclick: () => decideGroups([group.key], decision) }, label);
  const check = h('input', { type: 'checkbox', class: 'select', title: 'select', onchange: (event) => select(group.key, event.target.checked) });
  // A sandbox of another node has its page there, not here.
  const own = group.node === ownNode() || !ui.fleet;
  const dataset = { key: group.key, target: group.target, sandbox: group.sandbox };
  if (ui.fleet) dataset.node = group.node;
  return h(
    'tr',
    { dataset, onclick: (event) => { if (event.target.tagName === 'TD') focus(group.key); } },
    cell('check', check),
    cell('sandbox', h(own ? 'a' : 'span', { href: own ? sandboxHref(group.sandbox) : null, class: 'id' }), h('div', { class: 'ips sub' })),
    ui.fleet ? cell('node') : null,
    cell('target'),
    cell('held num'),
    cell('age num'),
    cell('left num'),
    cell('actions', act('once', 'Once'), act('for', 'For'), act('always', 'Always'), h('span', { class: 'policies' }), act('deny', 'Deny')),
  );
}

/** The row's buttons answering always into one of `policies`, made again when they change. */
function policyButtons(tr, group) {
  const names = [...group.policies].sort();
  const span = tr.querySelector('span.policies');
  if (span.dataset.names === names.join(',')) return;
  span.dataset.names = names.join(',');
  replace(
    span,
    names.map((name) =>
      h('button', { type: 'button', class: 'act policy', title: 'always, for every sandbox of policy ' + name, dataset: { act: 'policy', policy: name }, onclick: () => decideGroups([group.key], 'always', name) }, 'Always in ' + name),
    ),
  );
}

function update(tr, group, now) {
  const timeout = state.status ? state.status.ask_timeout_ms : 30000;
  const cell = (name) => tr.querySelector('td.' + name);
  cell('check').firstChild.checked = ui.selected.has(group.key);
  cell('sandbox').firstChild.textContent = group.sandbox;
  cell('sandbox').lastChild.textContent = [...group.ips].join(', ');
  if (ui.fleet) cell('node').textContent = group.node;
  cell('target').textContent = group.target;
  cell('target').title = group.target;
  const entry = group.port === 80 || group.port === 443 ? group.host : group.target;
  tr.querySelector('button.act.always').title = 'always: adds ' + entry + ', which also covers its subdomains' + (entry === group.host ? ' on every port' : '');
  cell('held').textContent = String(group.held);
  cell('age').textContent = duration(now - group.since);
  const left = group.since + timeout - now;
  cell('left').textContent = left > 0 ? duration(left) : 'timing out';
  cell('left').classList.toggle('urgent', left < 10000);
  tr.querySelector('button[data-act="for"]').textContent = 'For ' + (period() || '?');
  policyButtons(tr, group);
  tr.classList.toggle('focused', ui.focused === group.key);
  tr.classList.toggle('selected', ui.selected.has(group.key));
}

/** Renders the inbox into `view`. */
export function render(view) {
  if (!ui.root || !view.contains(ui.root) || ui.fleet !== (ownNode() !== '')) {
    build();
    replace(view, ui.root);
  }
  const shown = groups();
  const keys = new Set(shown.map((group) => group.key));
  for (const key of ui.selected) if (!keys.has(key)) ui.selected.delete(key);
  if (!keys.has(ui.focused)) ui.focused = shown.length ? shown[0].key : null;
  const body = ui.root.querySelector('#inbox-rows');
  for (const [key, tr] of ui.rows) {
    if (!keys.has(key)) {
      tr.remove();
      ui.rows.delete(key);
    }
  }
  const now = Date.now();
  shown.forEach((group, index) => {
    let tr = ui.rows.get(group.key);
    if (!tr) {
      tr = row(group);
      ui.rows.set(group.key, tr);
    }
    update(tr, group, now);
    if (body.children[index] !== tr) body.insertBefore(tr, body.children[index] || null);
  });
  ui.root.querySelector('#inbox-empty').hidden = shown.length > 0;
  const fleetError = ui.root.querySelector('#fleet-error');
  if (fleetError) {
    fleetError.textContent = state.fleetError ? "Other nodes' requests cannot be listed: " + state.fleetError : '';
    fleetError.hidden = !state.fleetError;
  }
  ui.root.querySelector('#inbox-table').hidden = shown.length === 0;
  ui.root.querySelector('#selection').textContent = ui.selected.size ? ui.selected.size + ' selected' : '';
  ui.root.querySelector('#select-all').checked = shown.length > 0 && ui.selected.size === shown.length;
  for (const button of ui.root.querySelectorAll('button.bulk')) button.disabled = ui.selected.size === 0;
}

function select(key, on) {
  if (on) ui.selected.add(key);
  else ui.selected.delete(key);
  changed();
}

function selectEvery(on) {
  ui.selected.clear();
  if (on) for (const group of groups()) ui.selected.add(group.key);
  changed();
}

function focus(key) {
  ui.focused = key;
  changed();
}

function decideSelection(decision) {
  const keys = ui.selected.size ? [...ui.selected] : ui.focused ? [ui.focused] : [];
  return decideGroups(keys, decision);
}

/**
 * Decides every request of the groups `keys` as `decision` (once, for,
 * always, deny; `always` into `policy` when given), each on its node.
 */
async function decideGroups(keys, decision, policy) {
  const chosen = period();
  if (decision === 'for' && !chosen) {
    toast('The period "' + ui.period + '" is not a duration: say 90m, 2h or 1d12h.', 'error');
    return;
  }
  const wanted = new Set(keys);
  const requests = groups().filter((group) => wanted.has(group.key)).flatMap((group) => group.requests);
  const grants = [];
  let decided = 0;
  for (const request of requests) {
    try {
      const node = request.node && request.node !== ownNode() ? request.node : null;
      const options = { period: decision === 'for' ? chosen : null, policy, node };
      const answer = await withSecret(() => api.decide(request, decision === 'for' ? 'always' : decision, options));
      decided += 1;
      fleetList.answered();
      state.pending.delete(pendingKey(request));
      if (answer && answer.grant) grants.push(answer.grant);
    } catch (err) {
      if (err.status === 404 || (err.status === 409 && err.message.includes('this answer expects'))) {
        // Gone, or the id now names another request: the row was stale.
        fleetList.answered();
        state.pending.delete(pendingKey(request));
        toast('Not decided: ' + err.message, 'error');
      } else {
        toast('Could not decide ' + request.host + ':' + request.port + ' for ' + request.sandbox + ': ' + err.message, 'error');
        break;
      }
    }
  }
  for (const key of keys) ui.selected.delete(key);
  changed();
  if (!decided) return;
  const word = policy ? 'allowed always in policy ' + policy : { once: 'allowed once', for: 'allowed for ' + chosen, always: 'allowed always', deny: 'denied' }[decision];
  const one = grants.length === 1 ? grants[0].entry + ' ' + word + ' (its subdomains too)' : requests[0].host + ':' + requests[0].port + ' ' + word;
  const text = decided === 1 ? one : decided + ' requests ' + word;
  const undo = grants.length ? { label: 'Undo', run: () => revokeAll(grants) } : null;
  toast(text, 'info', undo);
}

async function revokeAll(grants) {
  try {
    for (const grant of grants) await withSecret(() => api.revoke(grant.ip, grant.entry));
    toast('Grant removed: ' + grants.map((grant) => grant.entry).join(', '));
  } catch (err) {
    toast('Could not remove the grant: ' + err.message, 'error');
  }
}

/** Handles a key pressed on the inbox; true when it was one of its shortcuts. */
export function key(event) {
  if (!ui.root) return false;
  const shown = groups();
  const index = shown.findIndex((group) => group.key === ui.focused);
  const move = (by) => {
    const next = shown[Math.min(shown.length - 1, Math.max(0, index + by))];
    if (next) focus(next.key);
  };
  switch (event.key) {
    case 'j':
    case 'ArrowDown':
      move(1);
      return true;
    case 'k':
    case 'ArrowUp':
      move(-1);
      return true;
    case 'x':
      if (ui.focused) select(ui.focused, !ui.selected.has(ui.focused));
      return true;
    case 'o':
      decideSelection('once');
      return true;
    case 'f':
      decideSelection('for');
      return true;
    case 'a':
      decideSelection('always');
      return true;
    case 'd':
      decideSelection('deny');
      return true;
    case '/':
      ui.root.querySelector('#inbox-filter').focus();
      return true;
    case 'Escape':
      ui.selected.clear();
      changed();
      return true;
    default:
      return false;
  }
}
