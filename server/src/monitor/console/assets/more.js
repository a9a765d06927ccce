// Key/value buckets, object stores and the advisories feed.
import { js, publish, onSnapshot } from "./api.js";
import { h, num, bytes, table, showError, toast, b64, render } from "./ui.js";

function buckets(s, prefix) {
  return ((s.jetstream || {}).streams || []).filter((st) => st.config.name.startsWith(prefix));
}

async function lastOf(stream, subject) {
  try { return (await js(`STREAM.MSG.GET.${stream}`, { last_by_subj: subject })).message; } catch { return null; }
}

async function subjects(stream, filter) {
  const info = await js(`STREAM.INFO.${stream}`, { subjects_filter: filter });
  return Object.keys(info.state.subjects || {}).sort();
}

function hdr(m, name) {
  if (!m || !m.hdrs) return null;
  const line = new TextDecoder().decode(b64(m.hdrs)).split("\r\n").find((l) => l.toLowerCase().startsWith(name.toLowerCase() + ":"));
  return line ? line.slice(name.length + 1).trim() : null;
}

function picker(root, title, prefix, hashBase, chosen) {
  const box = h("div");
  root.append(h("h1", {}, title), box);
  return onSnapshot((s) => {
    const bs = buckets(s, prefix);
    box.replaceChildren(bs.length ? h("div", { class: "row" }, bs.map((st) => {
      const name = st.config.name.slice(prefix.length);
      return h("a", { href: `#/${hashBase}/${encodeURIComponent(name)}`, class: name === chosen ? "tag leader" : "tag" }, `${name} (${num(st.state.messages)})`);
    })) : h("p", { class: "muted" }, "None yet."));
  });
}

/** Mounts the key/value page. */
export function mountKv(root, [bucket]) {
  const stop = picker(root, "Key/value buckets", "KV_", "kv", bucket);
  if (!bucket) return stop;
  const stream = `KV_${bucket}`;
  const err = h("div");
  const body = h("div", { "data-testid": "kv-keys" });
  const history = h("div", { "data-testid": "kv-history" });
  const key = h("input", { placeholder: "key", "data-testid": "kv-key" });
  const value = h("input", { placeholder: "value", "data-testid": "kv-value" });
  let generation = 0; // a slower, older load must not overwrite a newer one
  const load = async () => {
    const mine = ++generation;
    try {
      const keys = await subjects(stream, `$KV.${bucket}.>`);
      const rows = [];
      for (const subj of keys.slice(0, 200)) {
        const m = await lastOf(stream, subj);
        const op = hdr(m, "KV-Operation");
        const k = subj.slice(`$KV.${bucket}.`.length);
        rows.push(h("tr", { "data-key": k }, h("td", {}, k), h("td", {}, op ? h("i", { class: "muted" }, op.toLowerCase()) : render(b64(m ? m.data : ""), "text")),
          h("td", { class: "num" }, m ? m.seq : "–"), h("td", {}, m ? m.time : ""),
          h("td", {}, h("div", { class: "row" },
            h("button", { class: "secondary", onclick: () => showHistory(k), "data-testid": `kv-history-${k}` }, "History"),
            h("button", { class: "secondary", onclick: () => op1(k, "DEL"), "data-testid": `kv-delete-${k}` }, "Delete"),
            h("button", { class: "danger", onclick: () => op1(k, "PURGE"), "data-testid": `kv-purge-${k}` }, "Purge")))));
      }
      if (mine !== generation) return;
      body.replaceChildren(rows.length ? table([["Key"], ["Value"], ["Revision", "num"], ["Time"], [""]], rows) : h("p", { class: "muted" }, "No keys."));
    } catch (e) { showError(err, e); }
  };
  const showHistory = async (k) => {
    const out = [];
    let seq = 1;
    while (out.length < 50) {
      let m;
      try { m = (await js(`STREAM.MSG.GET.${stream}`, { seq, next_by_subj: `$KV.${bucket}.${k}` })).message; } catch { break; }
      out.push(h("tr", {}, h("td", { class: "num" }, m.seq), h("td", {}, hdr(m, "KV-Operation") || "PUT"), h("td", {}, render(b64(m.data), "text")), h("td", {}, m.time)));
      seq = m.seq + 1;
    }
    history.replaceChildren(h("h2", {}, `History of ${k}`), table([["Revision", "num"], ["Op"], ["Value"], ["Time"]], out));
  };
  const op1 = async (k, op) => {
    const headers = [["KV-Operation", op]];
    if (op === "PURGE") headers.push(["Nats-Rollup", "sub"]);
    try { await publish(`$KV.${bucket}.${k}`, "", headers); toast(`${op.toLowerCase()} ${k}`); load(); } catch (e) { showError(err, e); }
  };
  const put = async () => {
    try { await publish(`$KV.${bucket}.${key.value.trim()}`, value.value, []); toast(`put ${key.value}`); load(); } catch (e) { showError(err, e); }
  };
  const watch = h("input", { type: "checkbox", checked: true, "data-testid": "kv-watch" });
  root.append(h("h2", {}, `Bucket ${bucket}`), err,
    h("div", { class: "row" }, key, value, h("button", { onclick: put, "data-testid": "kv-put" }, "Put"), h("button", { class: "secondary", onclick: load }, "Refresh"),
      h("label", {}, watch, " watch (reload on every change)")),
    body, history);
  load();
  // Watch: the shared live snapshot tells when the bucket's stream changed.
  let last; // undefined until the first snapshot; null while the bucket is not listed
  const stopWatch = onSnapshot((s) => {
    const st = buckets(s, "KV_").find((x) => x.config.name === stream);
    const seq = st ? st.state.last_seq : null;
    if (last !== undefined && seq !== last && watch.checked) load();
    last = seq;
  });
  return () => { stop(); stopWatch(); };
}

/** Mounts the object store page. */
export function mountObjects(root, [bucket]) {
  const stop = picker(root, "Object stores", "OBJ_", "objects", bucket);
  if (!bucket) return stop;
  const stream = `OBJ_${bucket}`;
  const err = h("div");
  const body = h("div", { "data-testid": "objects" });
  const download = async (meta) => {
    try {
      const parts = [];
      let seq = 1;
      for (;;) {
        let m;
        try { m = (await js(`STREAM.MSG.GET.${stream}`, { seq, next_by_subj: `$O.${bucket}.C.${meta.nuid}` })).message; } catch { break; }
        parts.push(b64(m.data));
        seq = m.seq + 1;
      }
      const url = URL.createObjectURL(new Blob(parts));
      const a = h("a", { href: url, download: meta.name });
      document.body.append(a); a.click(); a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) { showError(err, e); }
  };
  (async () => {
    try {
      const metas = [];
      for (const subj of (await subjects(stream, `$O.${bucket}.M.>`)).slice(0, 200)) {
        const m = await lastOf(stream, subj);
        if (!m) continue;
        try { metas.push(JSON.parse(new TextDecoder().decode(b64(m.data)))); } catch { /* not an object's metadata */ }
      }
      body.replaceChildren(metas.length ? table([["Name"], ["Size", "num"], ["Chunks", "num"], ["Digest"], ["Modified"], [""]],
        metas.filter((o) => !o.deleted).map((o) => h("tr", {}, h("td", {}, o.name), h("td", { class: "num" }, bytes(o.size)), h("td", { class: "num" }, num(o.chunks)),
          h("td", {}, o.digest || ""), h("td", {}, o.mtime || ""), h("td", {}, h("button", { class: "secondary", onclick: () => download(o), "data-testid": `download-${o.name}` }, "Download")))))
        : h("p", { class: "muted" }, "No objects."));
    } catch (e) { showError(err, e); }
  })();
  root.append(h("h2", {}, `Store ${bucket}`), err, body);
  return stop;
}

/** Mounts the advisories feed. */
export function mountAdvisories(root) {
  const box = h("div", { "data-testid": "advisories" });
  root.append(h("h1", {}, "Advisories"),
    h("p", { class: "muted" }, "JetStream advisories ($JS.EVENT.ADVISORY.>) published by this node since the console was opened, newest first."), box);
  return onSnapshot((s) => {
    const list = ((s.jetstream || {}).advisories || []).slice().reverse();
    box.replaceChildren(list.length ? table([["Subject"], ["Time"], ["Details"]], list.map((a) => {
      const b = a.body || {};
      const details = Object.entries(b).filter(([k]) => !["type", "id", "timestamp", "server", "client"].includes(k))
        .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join("  ");
      return h("tr", {}, h("td", {}, a.subject), h("td", {}, b.timestamp || ""), h("td", {}, details));
    })) : h("p", { class: "muted" }, "No advisories yet."));
  });
}
