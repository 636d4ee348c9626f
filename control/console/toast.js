// Short messages at the bottom of the page, some with an action (undo).

import { h } from './dom.js';

const SHOWN_MS = 10000;

/** Shows `text`; `kind` is 'info' or 'error'; `action` {label, run} adds a button. */
export function toast(text, kind = 'info', action = null) {
  const box = document.getElementById('toasts');
  const item = h('div', { class: 'toast ' + kind, role: kind === 'error' ? 'alert' : 'status' }, text);
  if (action) {
    item.append(
      h(
        'button',
        {
          type: 'button',
          class: 'undo',
          onclick: async () => {
            item.remove();
            await action.run();
          },
        },
        action.label,
      ),
    );
  }
  item.append(h('button', { type: 'button', class: 'close', title: 'dismiss', onclick: () => item.remove() }, '×'));
  box.append(item);
  setTimeout(() => item.remove(), action ? SHOWN_MS * 3 : SHOWN_MS);
}
