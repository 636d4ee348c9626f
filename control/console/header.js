// The header: the daemon's health from /v1/status and the `status` event,
// the counts beside the tabs, and whether the event stream is up.

import { askSecret } from './auth.js';
import { secret, setSecret } from './api.js';
import { h, replace } from './dom.js';
import { changed, state } from './store.js';

/** Wires the secret button. */
export function setup() {
  document.getElementById('lock').addEventListener('click', async () => {
    if (secret()) {
      setSecret('');
      changed();
    } else {
      await askSecret('');
    }
  });
}

/** Renders the header from the state. */
export function render(view) {
  const status = state.status;
  const pill = (label, value, kind = '') => h('span', { class: 'pill ' + kind }, h('span', { class: 'label' }, label), ' ', String(value));
  const health = document.getElementById('health');
  if (status) {
    const engine = status.engine === 'up' ? 'ok' : 'bad';
    replace(
      health,
      pill('engine', status.engine, engine),
      pill('io', status.io_driver || '-'),
      pill('sandboxes', status.sandboxes),
      pill('pending', state.pending.size, state.pending.size ? 'warn' : ''),
      pill('connections', status.connections),
      status.node ? pill('node', status.node) : null,
    );
  }
  const connection = document.getElementById('connection');
  connection.textContent = state.online ? 'live' : 'offline: reconnecting';
  connection.className = 'connection ' + (state.online ? 'online' : 'offline');
  document.getElementById('nav-pending').textContent = String(state.pending.size);
  document.getElementById('nav-sandboxes').textContent = String(new Set([...state.registrations.values()].map((s) => s.id)).size);
  for (const link of document.querySelectorAll('#nav a')) {
    link.classList.toggle('active', link.dataset.view === view);
  }
  const lock = document.getElementById('lock');
  lock.textContent = secret() ? 'forget secret' : 'enter secret';
  lock.hidden = !(status && status.auth) && !secret();
}
