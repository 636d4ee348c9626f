// A fleet node's inbox (docs/console.md, "On a fleet node"): the event
// stream carries this daemon's own requests only, so while the inbox is
// shown the page also lists every node's (GET /v1/pending?fleet=true) every
// two seconds and keeps the other nodes' from it (dropped again when the
// inbox is left). On a daemon that is no fleet node nothing is polled.

import { get } from './api.js';
import { changed, fleetPending, ownNode, state } from './store.js';

/** How often the fleet's requests are listed while the inbox is shown. */
const POLL_MS = 2000;

let timer = null;
let busy = false;
let answers = 0; // answers given from this page: a listing older than the last may show it still

/** Says a request was answered from this page: a listing under way drops what it read. */
export function answered() {
  answers += 1;
}

/** Polls the fleet's requests while `shown` (the inbox is) on a fleet node; else not. */
export function watch(shown) {
  const wanted = shown && ownNode() !== '';
  if (wanted && !timer) {
    poll();
    timer = setInterval(poll, POLL_MS);
  } else if (!wanted && timer) {
    clearInterval(timer);
    timer = null;
    answered();
    fleetPending([]);
  }
}

async function poll() {
  if (busy) return;
  busy = true;
  try {
    const before = answers;
    const answer = await get('/v1/pending?fleet=true');
    if (before === answers) fleetPending(answer.pending);
  } catch (err) {
    state.fleetError = err.message;
    changed();
  } finally {
    busy = false;
  }
}
