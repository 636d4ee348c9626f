// The live page: one EventSource on GET /v1/events?topics=all. The browser
// reconnects by itself with Last-Event-ID and the daemon replays what the
// page missed, or says `reset`, and the page fetches the snapshots again.
// While they load, events wait in a queue and apply after them in order.

import { apply, changed, load, state } from './store.js';

const NAMES = ['pending', 'decided', 'registered', 'unregistered', 'usage', 'denials', 'status'];
/** How long to wait before opening a stream the browser gave up on. */
const REOPEN_MS = 1000;

let source = null;
let lastId = '';
let queue = null; // events held while snapshots load
let reload = true;

/** Opens the stream; the page stays live from then on. */
export function start() {
  open();
}

function open() {
  const query = lastId ? '&last_event_id=' + encodeURIComponent(lastId) : '';
  source = new EventSource('/v1/events?topics=all' + query);
  source.addEventListener('open', () => online(true));
  source.addEventListener('error', () => {
    online(false);
    // A refused or failed answer ends an EventSource for good: open another.
    if (source.readyState === EventSource.CLOSED) setTimeout(open, REOPEN_MS);
  });
  source.addEventListener('reset', (event) => {
    remember(event);
    reload = true;
  });
  source.addEventListener('lagged', () => {
    reload = true;
    snapshots();
  });
  source.addEventListener('ready', (event) => {
    remember(event);
    online(true);
    if (reload) snapshots();
  });
  for (const name of NAMES) {
    source.addEventListener(name, (event) => {
      remember(event);
      const data = JSON.parse(event.data);
      if (queue) queue.push([name, data]);
      else apply(name, data);
    });
  }
}

function remember(event) {
  if (event.lastEventId) lastId = event.lastEventId;
}

function online(up) {
  if (state.online !== up) {
    state.online = up;
    changed();
  }
}

/** Fetches the snapshots, then applies what came meanwhile. */
async function snapshots() {
  if (queue) return;
  queue = [];
  reload = false;
  try {
    await load();
  } catch {
    reload = true;
  }
  const held = queue;
  queue = null;
  for (const [name, data] of held) apply(name, data);
  if (reload) setTimeout(snapshots, REOPEN_MS);
}
