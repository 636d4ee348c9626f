// The public admin API, as curl would call it (docs/admin-api.md). The
// admin secret lives in this tab's session storage and goes only in the
// Authorization header: never a cookie, so no other site can act with it.

const SECRET_KEY = 'crackbox.secret';

/** An answer that was not 2xx: its status and the server's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The secret in use, if any. */
export function secret() {
  return sessionStorage.getItem(SECRET_KEY) || '';
}

/** Keeps `value` as the secret for this tab ('' forgets it). */
export function setSecret(value) {
  if (value) sessionStorage.setItem(SECRET_KEY, value);
  else sessionStorage.removeItem(SECRET_KEY);
}

/** `method path` with an optional JSON body; the decoded JSON answer. */
export async function request(method, path, body, candidate) {
  const headers = { Accept: 'application/json' };
  const token = candidate === undefined ? secret() : candidate;
  if (token) headers.Authorization = 'Bearer ' + token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (err) {
    throw new ApiError(0, 'the daemon cannot be reached (' + err.message + ')');
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const message = data && typeof data.error === 'string' ? data.error : response.statusText;
    throw new ApiError(response.status, message);
  }
  return data;
}

/** GET `path`. */
export function get(path) {
  return request('GET', path);
}

/** Whether `candidate` is the daemon's secret; changes nothing. */
export async function checkSecret(candidate) {
  try {
    await request('POST', '/v1/auth', undefined, candidate);
    return true;
  } catch (err) {
    if (err.status === 401) return false;
    throw err;
  }
}

/**
 * Decides pending request `pending` (a GET /v1/pending element): once,
 * always or deny; `always` for `period` or into policy `policy` if given;
 * held by fleet node `node` if given (another node's: the answer reaches it
 * through etcd, docs/fleet.md). The answer says what it expects of the
 * request, so a page older than the daemon's ids (open across a restart)
 * gets a 409 instead of answering another request (docs/admin-api.md).
 */
export function decide(pending, decision, { period, policy, node } = {}) {
  const body = { decision };
  if (period) body.for = period;
  if (policy) body.policy = policy;
  body.expect = { ip: pending.ip, sandbox: pending.sandbox, host: pending.host, port: pending.port };
  const query = node ? '?node=' + encodeURIComponent(node) : '';
  return request('POST', '/v1/pending/' + encodeURIComponent(pending.id) + query, body);
}

/** Removes the grant of `entry` from the registration of `ip`. */
export function revoke(ip, entry) {
  return request('DELETE', '/v1/grants/' + encodeURIComponent(ip) + '/' + encodeURIComponent(entry));
}
