// Small DOM and formatting helpers shared by the pages.

/** Builds an element: h("td", {class: "num"}, "3"). Attributes starting with "on" are listeners. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** A table with headers `cols` ([label, class?]) and rows of cells. */
export function table(cols, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, cols.map(([label, cls]) => h("th", { class: cls }, label)))),
    h("tbody", {}, rows));
}

export function num(n) {
  if (n === undefined || n === null) return "–";
  return Number(n).toLocaleString("en-US");
}

export function bytes(n) {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

/** Nanoseconds as a short duration. */
export function dur(ns) {
  if (!ns) return "–";
  const s = ns / 1e9;
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

/** How long ago an RFC 3339 time was. */
export function ago(t) {
  if (!t || t.startsWith("0001")) return "never";
  const ms = Date.now() - Date.parse(t);
  if (Number.isNaN(ms)) return t;
  return ms < 1000 ? "just now" : `${dur(ms * 1e6)} ago`;
}

/** Shows an error box inside `where` (replacing an older one). */
export function showError(where, err) {
  where.querySelectorAll(":scope > .error").forEach((e) => e.remove());
  const box = h("div", { class: "error", "data-testid": "error" }, err.message || String(err));
  where.prepend(box);
  return box;
}

export function toast(text) {
  const t = document.getElementById("toast");
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 3000);
}

/** Asks for confirmation in a modal; resolves true when confirmed. */
export function confirmDialog(text, action) {
  return new Promise((resolve) => {
    const close = (v) => { modal.remove(); resolve(v); };
    const modal = h("div", { class: "modal", "data-testid": "confirm" },
      h("div", {}, h("p", {}, text),
        h("div", { class: "row" },
          h("button", { class: "danger", "data-testid": "confirm-yes", onclick: () => close(true) }, action || "Delete"),
          h("button", { class: "secondary", onclick: () => close(false) }, "Cancel"))));
    document.body.append(modal);
  });
}

/** A labelled form field. */
export function field(label, input) {
  return h("label", {}, label, input);
}

/** Reads a form's named inputs into an object (checkboxes as booleans). */
export function formValues(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    out[el.name] = el.type === "checkbox" ? el.checked : el.value.trim();
  }
  return out;
}

/** Comma or space separated list. */
export function list(text) {
  return (text || "").split(/[\s,]+/).filter(Boolean);
}

/** Seconds (text) as nanoseconds, or undefined when blank. */
export function secondsToNs(text) {
  if (text === "" || text === undefined) return undefined;
  return Math.round(Number(text) * 1e9);
}

/** Payload bytes as text, pretty JSON or hex. */
export function render(bytesArr, mode) {
  if (mode === "hex") {
    const lines = [];
    for (let i = 0; i < bytesArr.length; i += 16) {
      const chunk = Array.from(bytesArr.slice(i, i + 16));
      lines.push(i.toString(16).padStart(6, "0") + "  " + chunk.map((b) => b.toString(16).padStart(2, "0")).join(" "));
    }
    return lines.join("\n");
  }
  const text = new TextDecoder().decode(bytesArr);
  if (mode === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
  }
  return text;
}

/** Base64 to bytes. */
export function b64(s) {
  const bin = atob(s || "");
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
