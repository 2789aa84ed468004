/**
 * DOM building for the dashboard: elements whose content is only ever set as text. Every field
 * shown comes from commands and agents and is hostile; this module must never parse data as
 * HTML (no innerHTML, no insertAdjacentHTML, no attributes from data but plain text ones).
 *
 * @module
 */

/**
 * An element with text-only children: strings become text nodes, `null`/`undefined` are
 * skipped. `props` may set `className`, `title`, `type`, `dataset` entries and `onclick`.
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "onclick") node.addEventListener("click", value);
    else if (["className", "title", "type", "disabled"].includes(key)) node[key] = value;
    else throw new Error(`el: unsupported property ${key}`);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const NAMED = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

const HIDDEN =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/gu;

/**
 * `text` with its control and invisible characters shown as escapes (`\x1b`, `\u{202e}`), as the
 * server shows approval records (src/approvals/visible.ts; tests/e2e/dashboard_auth_test.ts checks
 * both agree on every character), for commands and paths the server sends raw.
 */
export function visible(text) {
  return String(text).replace(HIDDEN, (c) => {
    const named = NAMED[c];
    if (named) return named;
    const code = c.codePointAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u{${code.toString(16)}}`;
  });
}

/** Replace every child of `node` with `children` (text-only, as in {@link el}). */
export function fill(node, ...children) {
  node.replaceChildren(
    ...children.filter((c) => c !== null && c !== undefined).map((c) =>
      c instanceof Node ? c : document.createTextNode(String(c))
    ),
  );
}

/** A duration in seconds as `1h 02m`, `3m 04s` or `5.2s`. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const s = Math.floor(seconds);
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
}

/** Bytes as `12.3 MiB`. */
export function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

/**
 * Whether `fields` (`{agent, command, profile}`) match a filter box's `query`: every
 * whitespace-separated term must be a case-insensitive substring of one of the fields, or, as
 * `agent:x`, `command:x` or `profile:x`, of that field.
 */
export function matches(query, fields) {
  const terms = String(query).toLowerCase().split(/\s+/).filter(Boolean);
  return terms.every((term) => {
    const colon = term.indexOf(":");
    const field = colon > 0 ? term.slice(0, colon) : "";
    if (Object.hasOwn(fields, field)) {
      return String(fields[field] ?? "").toLowerCase().includes(term.slice(colon + 1));
    }
    return Object.values(fields).some((v) => String(v ?? "").toLowerCase().includes(term));
  });
}

/** The `blob:` URL of the last download, revoked at the next (a browser may read it late). */
let lastDownload;

/** Save `bytes` as a file named `name` in the browser's downloads (a link the page clicks). */
export function download(bytes, name, type = "application/octet-stream") {
  if (lastDownload) URL.revokeObjectURL(lastDownload);
  const url = lastDownload = URL.createObjectURL(new Blob([bytes], { type }));
  const link = el("a", { className: "download-link" });
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
}

/**
 * Label each body cell of `table` with its column's heading (`data-label`, static text from the
 * page), which the narrow layout shows before the cell when rows become cards.
 */
export function labelCells(table) {
  const headings = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  for (const tr of table.querySelectorAll("tbody tr")) {
    [...tr.children].forEach((td, i) => {
      if (headings[i]) td.dataset.label = headings[i];
    });
  }
}
