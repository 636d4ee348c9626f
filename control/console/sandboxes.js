// Every sandbox: one row per registration id with its addresses, mode, how
// it was registered and its live usage (rates, tunnels, connections,
// denials, and how close it runs to its bandwidth cap); sortable, filterable.

import { bytes, h, matches, replace, sandboxHref } from './dom.js';
import { changed, made, state } from './store.js';

const COLUMNS = [
  ['id', 'Sandbox', 'text'],
  ['ips', 'Addresses', 'text'],
  ['mode', 'Mode', 'text'],
  ['origin', 'Registered by', 'text'],
  ['entries', 'Entries', 'num'],
  ['rate', 'Rate (up / down)', 'num'],
  ['total', 'Moved', 'num'],
  ['tunnels', 'Tunnels', 'num'],
  ['connections', 'Open', 'num'],
  ['denials', 'Denials', 'num'],
  ['cap', 'Cap', 'num'],
];

const ui = { root: null, rows: new Map(), filter: '', sort: 'id', descending: false };

/** The sandboxes with their registrations and usage summed. */
export function sandboxes() {
  const byId = new Map();
  for (const spec of state.registrations.values()) {
    let sandbox = byId.get(spec.id);
    if (!sandbox) {
      sandbox = { id: spec.id, ips: [], modes: new Set(), origins: new Set(), entries: 0, up: 0, down: 0, total: 0, tunnels: 0, connections: 0, denials: 0, cap: null, closeness: 0 };
      byId.set(spec.id, sandbox);
    }
    sandbox.ips.push(spec.ip);
    sandbox.modes.add(made(spec).mode.value);
    sandbox.origins.add(spec.origin || 'api');
    sandbox.entries = Math.max(sandbox.entries, spec.allowlist.length);
    const usage = state.usage.get(spec.ip);
    if (!usage) continue;
    sandbox.up += usage.rate_up || 0;
    sandbox.down += usage.rate_down || 0;
    sandbox.total += usage.bytes_up + usage.bytes_down;
    sandbox.tunnels += usage.tunnels;
    sandbox.connections += usage.connections;
    sandbox.denials += Object.values(usage.denials || {}).reduce((sum, n) => sum + n, 0);
    if (usage.bandwidth) {
      sandbox.cap = usage.bandwidth;
      const rate = Math.max(usage.rate_up || 0, usage.rate_down || 0);
      sandbox.closeness = Math.max(sandbox.closeness, rate / usage.bandwidth);
    }
  }
  return [...byId.values()];
}

function value(sandbox, column) {
  switch (column) {
    case 'ips':
      return sandbox.ips.join(' ');
    case 'mode':
      return [...sandbox.modes].join(' ');
    case 'origin':
      return [...sandbox.origins].join(' ');
    case 'rate':
      return sandbox.up + sandbox.down;
    case 'cap':
      return sandbox.cap ? sandbox.closeness : -1;
    default:
      return sandbox[column];
  }
}

function sorted() {
  const shown = sandboxes().filter((s) => matches(ui.filter, [s.id, ...s.ips, ...s.modes, ...s.origins]));
  const direction = ui.descending ? -1 : 1;
  return shown.sort((a, b) => {
    const [x, y] = [value(a, ui.sort), value(b, ui.sort)];
    const order = typeof x === 'number' ? x - y : String(x).localeCompare(String(y));
    return direction * (order || a.id.localeCompare(b.id));
  });
}

function build() {
  const heads = COLUMNS.map(([column, label, kind]) =>
    h('th', { class: kind, dataset: { sort: column } }, h('button', { type: 'button', class: 'sort', onclick: () => sortBy(column) }, label)),
  );
  ui.root = h(
    'section',
    { class: 'sandboxes' },
    h(
      'div',
      { class: 'toolbar' },
      h('input', {
        id: 'sandboxes-filter',
        type: 'search',
        placeholder: 'filter by id, address, mode or origin',
        value: ui.filter,
        oninput: (event) => {
          ui.filter = event.target.value;
          changed();
        },
      }),
    ),
    h('table', { id: 'sandboxes-table', class: 'grid' }, h('thead', {}, h('tr', {}, heads)), h('tbody', { id: 'sandbox-rows' })),
    h('p', { id: 'sandboxes-empty', class: 'empty' }, 'No sandbox is registered.'),
  );
  ui.rows.clear();
}

function sortBy(column) {
  ui.descending = ui.sort === column ? !ui.descending : false;
  ui.sort = column;
  changed();
}

function row() {
  const cells = COLUMNS.map(([column, , kind]) => h('td', { class: column + ' ' + kind }));
  replace(cells[0], h('a', { class: 'id' }));
  return h('tr', {}, cells);
}

function update(tr, sandbox) {
  const cells = tr.children;
  const link = cells[0].firstChild;
  link.textContent = sandbox.id;
  link.setAttribute('href', sandboxHref(sandbox.id));
  cells[1].textContent = sandbox.ips.join(', ');
  cells[2].textContent = [...sandbox.modes].join(', ');
  cells[3].textContent = [...sandbox.origins].join(', ');
  cells[4].textContent = String(sandbox.entries);
  cells[5].textContent = bytes(sandbox.up) + '/s / ' + bytes(sandbox.down) + '/s';
  cells[6].textContent = bytes(sandbox.total);
  cells[7].textContent = String(sandbox.tunnels);
  cells[8].textContent = String(sandbox.connections);
  cells[9].textContent = String(sandbox.denials);
  if (sandbox.cap) {
    const percent = Math.min(100, Math.round(sandbox.closeness * 100));
    replace(cells[10], bytes(sandbox.cap) + '/s ', h('meter', { min: 0, max: 100, value: percent, high: 80, title: percent + '% of the cap' }), ' ' + percent + '%');
  } else {
    cells[10].textContent = 'none';
  }
  tr.dataset.sandbox = sandbox.id;
}

/** Renders the list into `view`. */
export function render(view) {
  if (!ui.root || !view.contains(ui.root)) {
    build();
    replace(view, ui.root);
  }
  const shown = sorted();
  const ids = new Set(shown.map((s) => s.id));
  for (const [id, tr] of ui.rows) {
    if (!ids.has(id)) {
      tr.remove();
      ui.rows.delete(id);
    }
  }
  const body = ui.root.querySelector('#sandbox-rows');
  shown.forEach((sandbox, index) => {
    let tr = ui.rows.get(sandbox.id);
    if (!tr) {
      tr = row();
      ui.rows.set(sandbox.id, tr);
    }
    update(tr, sandbox);
    if (body.children[index] !== tr) body.insertBefore(tr, body.children[index] || null);
  });
  for (const th of ui.root.querySelectorAll('th[data-sort]')) {
    th.classList.toggle('sorted', th.dataset.sort === ui.sort);
    th.classList.toggle('descending', th.dataset.sort === ui.sort && ui.descending);
  }
  ui.root.querySelector('#sandboxes-empty').hidden = shown.length > 0;
}
