// Asking for the admin secret: once, when the daemon needs one, checked
// with POST /v1/auth (which changes nothing) before it is kept.

import { checkSecret, secret, setSecret } from './api.js';
import { changed, state } from './store.js';

let waiting = null;

/** Asks for the secret; resolves true once a right one is kept, false on cancel. */
export function askSecret(message = '') {
  const dialog = document.getElementById('secret-dialog');
  const text = document.getElementById('secret-message');
  const input = document.getElementById('secret-input');
  text.textContent = message;
  input.value = '';
  if (!dialog.open) dialog.showModal();
  input.focus();
  if (!waiting) {
    waiting = new Promise((resolve) => {
      const done = (kept) => {
        dialog.close();
        waiting = null;
        resolve(kept);
      };
      document.getElementById('secret-cancel').onclick = () => done(false);
      document.getElementById('secret-form').onsubmit = async (event) => {
        event.preventDefault();
        const candidate = input.value;
        try {
          if (await checkSecret(candidate)) {
            setSecret(candidate);
            changed();
            done(true);
          } else {
            text.textContent = 'That secret is wrong: nothing was changed. Try again.';
            input.select();
          }
        } catch (err) {
          text.textContent = 'Cannot check the secret: ' + err.message;
        }
      };
    });
  }
  return waiting;
}

/** Whether the daemon wants a secret and the page has none yet. */
export function secretMissing() {
  return Boolean(state.status && state.status.auth && !secret());
}

/** Runs `action`; on a 401 asks for the secret and, once a right one is kept, runs it again. */
export async function withSecret(action) {
  try {
    return await action();
  } catch (err) {
    if (err.status !== 401) throw err;
    const message = secret()
      ? 'The daemon refused the secret this page holds (' + err.message + '): nothing was changed.'
      : 'This daemon needs its admin secret for changes: nothing was changed yet.';
    setSecret('');
    if (await askSecret(message)) return action();
    throw err;
  }
}
