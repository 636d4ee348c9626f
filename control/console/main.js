// The console's entry point: the hash routes (#/inbox, #/sandboxes,
// #/sandbox/ID, #/denials), the keyboard, and one render per change.

import * as denials from './denials.js';
import * as feed from './feed.js';
import * as fleet from './fleet.js';
import * as header from './header.js';
import * as inbox from './inbox.js';
import * as sandbox from './sandbox.js';
import * as sandboxes from './sandboxes.js';
import { changed, onChange, state } from './store.js';

/** The view the hash names, and its argument. */
function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [view, ...rest] = hash.split('/');
  if (view === 'sandbox' && rest.length) return ['sandbox', decodeURIComponent(rest.join('/'))];
  if (view === 'sandboxes' || view === 'denials') return [view, null];
  return ['inbox', null];
}

function render() {
  const [view, argument] = route();
  header.render(view === 'sandbox' ? 'sandboxes' : view);
  fleet.watch(view === 'inbox');
  const main = document.getElementById('view');
  main.dataset.view = view;
  main.setAttribute('aria-busy', String(!state.loaded));
  if (!state.loaded) return;
  if (view === 'inbox') inbox.render(main);
  else if (view === 'sandboxes') sandboxes.render(main);
  else if (view === 'sandbox') sandbox.render(main, argument);
  else denials.render(main);
  // The first complete render, for anyone timing the page (its benchmark).
  if (!performance.getEntriesByName('console-rendered').length) performance.mark('console-rendered');
}

/** Whether keys pressed on `target` are text being typed (not shortcuts). */
function typing(target) {
  if (target instanceof HTMLInputElement) return target.type !== 'checkbox';
  return target instanceof HTMLSelectElement || target instanceof HTMLTextAreaElement;
}

document.addEventListener('keydown', (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (typing(event.target)) {
    if (event.key === 'Escape') event.target.blur();
    return;
  }
  if (document.getElementById('secret-dialog').open) return;
  if (route()[0] === 'inbox' && inbox.key(event)) event.preventDefault();
});

window.addEventListener('hashchange', changed);
onChange(render);
header.setup();
feed.start();
setInterval(changed, 1000);
changed();
