// The console's calls to its server: the JetStream API proxy, core publish, and the live
// snapshot stream. Every state-changing call carries the X-Jetraft-Console header (CSRF check).

/** An error answered by the server, with nats-server's text and codes when it had them. */
export class ApiError extends Error {
  constructor(err) {
    const codes = [err.code ? `code ${err.code}` : "", err.err_code ? `err_code ${err.err_code}` : ""]
      .filter(Boolean).join(", ");
    super(codes ? `${err.description} (${codes})` : err.description);
    this.info = err;
  }
}

/** POSTs `body` as JSON to a console API path; throws ApiError on an error answer. */
export async function post(path, body) {
  const resp = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Jetraft-Console": "1" },
    body: JSON.stringify(body ?? {}),
    credentials: "same-origin",
  });
  let data;
  try { data = await resp.json(); } catch { data = { error: { code: resp.status, description: resp.statusText } }; }
  if (data && data.error) throw new ApiError(data.error);
  return data;
}

/** One JetStream API request: `api` is the subject after `$JS.API.`. */
export function js(api, body) {
  return post("/console/api/js", { api, body: body ?? null });
}

/** A core publish (or request) from the page. */
export function publish(subject, payload, headers, request) {
  return post("/console/api/publish", { subject, payload, headers, request: !!request });
}

/** The session: auth required, logged in, user. */
export async function session() {
  const resp = await fetch("/console/api/session", { credentials: "same-origin" });
  return resp.json();
}

const listeners = new Set();
let latest = null;
let source = null;

/** The latest live snapshot (null before the first). */
export function snapshot() { return latest; }

/** Calls `fn` with every live snapshot; returns the function that stops it. */
export function onSnapshot(fn) {
  listeners.add(fn);
  if (latest) fn(latest);
  return () => listeners.delete(fn);
}

/** Opens the live stream (once). */
export function startLive(onState) {
  if (source) return;
  source = new EventSource("/console/api/events");
  source.addEventListener("snapshot", (ev) => {
    latest = JSON.parse(ev.data);
    onState(true);
    for (const fn of listeners) {
      try { fn(latest); } catch (e) { console.warn("live update failed", e); }
    }
  });
  source.onerror = () => onState(false);
}

/** Closes the live stream (logout). */
export function stopLive() {
  if (source) source.close();
  source = null;
  latest = null;
}
