// What the page knows: the snapshots it fetched and every event since,
// applied in order. Views read it and re-render when it changes.

import { get } from './api.js';

/** Denials kept for the feed. */
const DENIALS_KEPT = 1000;

export const state = {
  registrations: new Map(), // ip -> registration (GET /v1/state element)
  pending: new Map(), // pendingKey -> request (GET /v1/pending element)
  usage: new Map(), // ip -> usage record with `rate_up`, `rate_down` (bytes/s)
  denials: [], // newest last
  status: null, // GET /v1/status
  online: false,
  loaded: false,
  decided: [], // the last requests decided, newest last: {request, decision}
  fleetError: '', // on a fleet node: why the other nodes' requests could not be listed
  policies: new Map(), // name -> named policy (GET /v1/policies element)
};

const listeners = new Set();
let scheduled = false;

/** Calls `listener` (coalesced, once per frame) after every change. */
export function onChange(listener) {
  listeners.add(listener);
}

/** Says the state changed. */
export function changed() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => {
    scheduled = false;
    for (const listener of listeners) listener();
  });
}

/** Fetches every snapshot and replaces what the page knew. */
export async function load() {
  const [registrations, pending, usage, denials, status, policies] = await Promise.all([
    get('/v1/state'),
    get('/v1/pending').catch(() => ({ pending: [] })),
    get('/v1/usage').catch(() => []),
    get('/v1/denials?limit=200').catch(() => []),
    get('/v1/status'),
    get('/v1/policies').catch(() => ({ policies: [] })),
  ]);
  state.policies = new Map(policies.policies.map((policy) => [policy.name, policy]));
  state.registrations = new Map(registrations.map((spec) => [spec.ip, spec]));
  // Other fleet nodes' requests come from the fleet's list (fleet.js), not from these.
  const others = [...state.pending].filter(([key]) => typeof key === 'string');
  state.pending = new Map([...others, ...pending.pending.map((request) => [request.id, request])]);
  state.usage = new Map(usage.map((record) => [record.ip, record]));
  state.denials = denials;
  state.status = status;
  state.loaded = true;
  changed();
}

/** This daemon's name as a fleet node (`GET /v1/status`), or '' when it is none. */
export function ownNode() {
  return (state.status && state.status.node) || '';
}

/**
 * The key of `request` in `state.pending`: its id for this daemon's own
 * (which `GET /v1/events` follows), `NODE/ID` for another fleet node's.
 */
export function pendingKey(request) {
  return request.node && request.node !== ownNode() ? request.node + '/' + request.id : request.id;
}

/** Replaces the other fleet nodes' requests with `list` (`GET /v1/pending?fleet=true`). */
export function fleetPending(list) {
  for (const key of [...state.pending.keys()]) if (typeof key === 'string') state.pending.delete(key);
  for (const request of list) {
    if (request.node !== ownNode()) state.pending.set(pendingKey(request), request);
  }
  state.fleetError = '';
  changed();
}

/** Applies one event of `GET /v1/events`. */
export function apply(name, data) {
  switch (name) {
    case 'pending':
      state.pending.set(data.id, data);
      break;
    case 'decided':
      state.pending.delete(data.id);
      state.decided.push(data);
      state.decided = state.decided.slice(-50);
      break;
    case 'registered':
      state.registrations.set(data.ip, data);
      break;
    case 'unregistered':
      state.registrations.delete(data.ip);
      state.usage.delete(data.ip);
      break;
    case 'usage':
      for (const record of data.sources) usage(record, data.time_ms);
      break;
    case 'denials':
      seam(data.denials);
      break;
    case 'status':
      // A policy changed moves the registry's generation: read them again.
      if (state.status && state.status.generation !== data.generation) refreshPolicies();
      state.status = data;
      break;
    default:
      return;
  }
  changed();
}

/** Reads the named policies again; the page keeps what it had when they cannot be read. */
async function refreshPolicies() {
  try {
    const answer = await get('/v1/policies');
    state.policies = new Map(answer.policies.map((policy) => [policy.name, policy]));
    changed();
  } catch (_) {
    // Kept as they were: the next generation reads them again.
  }
}

/** How strict a mode is: a registration without its own takes its policies' strictest. */
const STRICTNESS = { report: 0, ask: 1, enforce: 2 };

/**
 * What registration `spec` works with, its named policies included
 * (docs/policy.md, "Named policies"): its own mode and cap, else the
 * strictest mode and the smallest cap its policies give (`from`: the
 * policy's name, '' for its own), and the policies it names that exist.
 */
export function made(spec) {
  const named = (spec.policies || []).map((name) => state.policies.get(name)).filter(Boolean);
  let mode = spec.mode ? { value: spec.mode, from: '' } : null;
  let cap = spec.bandwidth ? { value: spec.bandwidth, from: '' } : null;
  for (const policy of named) {
    if (!spec.mode && policy.mode && (!mode || STRICTNESS[policy.mode] > STRICTNESS[mode.value])) mode = { value: policy.mode, from: policy.name };
    if (!spec.bandwidth && policy.bandwidth && (!cap || policy.bandwidth < cap.value)) cap = { value: policy.bandwidth, from: policy.name };
  }
  return { mode: mode || { value: 'enforce', from: '' }, cap, named };
}

/** Keeps a usage record with its rates since the previous one. */
function usage(record, time) {
  const before = state.usage.get(record.ip);
  const seconds = before && before.time_ms ? (time - before.time_ms) / 1000 : 0;
  const rate = (now, then) => (seconds > 0 && now >= then ? (now - then) / seconds : 0);
  state.usage.set(record.ip, {
    ...record,
    time_ms: time,
    rate_up: before ? rate(record.bytes_up, before.bytes_up) : 0,
    rate_down: before ? rate(record.bytes_down, before.bytes_down) : 0,
  });
}

/** Appends new denials; at the seam with the snapshot a record already shown is not shown twice. */
function seam(denials) {
  const key = (d) => [d.time_ms, d.ip, d.id, d.host, d.port, d.reason].join('\u0000');
  const tail = new Set(state.denials.slice(-denials.length).map(key));
  for (const denial of denials) {
    if (!tail.delete(key(denial))) state.denials.push(denial);
  }
  if (state.denials.length > DENIALS_KEPT) state.denials = state.denials.slice(-DENIALS_KEPT);
}

/** Every registration of sandbox `id`. */
export function registrationsOf(id) {
  return [...state.registrations.values()].filter((spec) => spec.id === id);
}
