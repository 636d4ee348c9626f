// Building the page from data: every string becomes a text node or an
// attribute value, never markup (docs/console.md, "Security").

/** An element with properties and children; strings become text nodes. */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'checked' || key === 'value' || key === 'disabled') node[key] = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

/** Appends children (nested arrays, nodes, strings; null skipped). */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replaces every child of `node`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A link to one sandbox's page. */
export function sandboxHref(id) {
  return '#/sandbox/' + encodeURIComponent(id);
}

/** 1536 -> "1.5 KiB". */
export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = Number(n) || 0;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return (unit === 0 ? String(value) : value.toFixed(value < 10 ? 1 : 0)) + ' ' + units[unit];
}

/** A duration in ms -> "45s", "3m 20s", "2h 5m", "3d 4h". */
export function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + (s % 60) + 's';
  const hours = Math.floor(m / 60);
  if (hours < 48) return hours + 'h ' + (m % 60) + 'm';
  return Math.floor(hours / 24) + 'd ' + (hours % 24) + 'h';
}

/** A time in ms since the epoch -> local "HH:MM:SS". */
export function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

/** Whether every word of `filter` appears in one of `texts`. */
export function matches(filter, texts) {
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
  const haystack = texts.join(' ').toLowerCase();
  return words.every((word) => haystack.includes(word));
}
