// Streams: the list, the create form, and one stream's page (state, Raft group, purge, delete).
import { js, onSnapshot } from "./api.js";
import { h, num, bytes, dur, table, showError, toast, confirmDialog, field, formValues, list, secondsToNs } from "./ui.js";

function sel(name, options, value) {
  return h("select", { name }, options.map((o) => h("option", { value: o, selected: o === value }, o)));
}

function createForm(done, existing) {
  const err = h("div");
  const c = existing || {};
  const opt = (v) => (v === undefined || v === null || v < 0 ? undefined : v);
  const form = h("form", { class: "grid", "data-testid": "stream-form" },
    field("Name", h("input", { name: "name", required: true, placeholder: "ORDERS", value: c.name, readonly: !!existing })),
    field("Subjects (comma separated)", h("input", { name: "subjects", placeholder: "orders.>", value: (c.subjects || []).join(", ") })),
    field("Storage", sel("storage", ["file", "memory"], c.storage || "file")),
    field("Retention", sel("retention", ["limits", "interest", "workqueue"], c.retention || "limits")),
    field("Max messages", h("input", { name: "max_msgs", type: "number", placeholder: "unlimited", value: opt(c.max_msgs) })),
    field("Max bytes", h("input", { name: "max_bytes", type: "number", placeholder: "unlimited", value: opt(c.max_bytes) })),
    field("Max age (seconds)", h("input", { name: "max_age", type: "number", placeholder: "unlimited", value: c.max_age ? c.max_age / 1e9 : undefined })),
    field("Max message size", h("input", { name: "max_msg_size", type: "number", placeholder: "unlimited", value: opt(c.max_msg_size) })),
    field("Discard", sel("discard", ["old", "new"], c.discard || "old")),
    field("Replicas", sel("num_replicas", ["1", "3", "5"], String(c.num_replicas || 1))),
    field("Duplicate window (seconds)", h("input", { name: "duplicate_window", type: "number", placeholder: "120", value: c.duplicate_window ? c.duplicate_window / 1e9 : undefined })),
    h("label", { class: "check" }, h("input", { name: "allow_direct", type: "checkbox", checked: existing ? !!c.allow_direct : true }), "Allow direct get"),
    h("div", { class: "actions" }, h("button", { type: "submit", "data-testid": existing ? "stream-save" : "stream-create" }, existing ? "Save changes" : "Create stream")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    const cfg = {
      name: v.name, subjects: list(v.subjects), storage: v.storage, retention: v.retention,
      discard: v.discard, num_replicas: Number(v.num_replicas), allow_direct: v.allow_direct,
    };
    for (const k of ["max_msgs", "max_bytes", "max_msg_size"]) if (v[k] !== "") cfg[k] = Number(v[k]);
    if (v.max_age !== "") cfg.max_age = secondsToNs(v.max_age);
    if (v.duplicate_window !== "") cfg.duplicate_window = secondsToNs(v.duplicate_window);
    for (const k of ["max_msgs", "max_bytes", "max_msg_size"]) if (v[k] === "" && existing) cfg[k] = -1;
    if (v.max_age === "" && existing) cfg.max_age = 0;
    try {
      if (existing) {
        await js(`STREAM.UPDATE.${v.name}`, { ...existing, ...cfg });
        toast(`stream ${v.name} updated`);
      } else {
        await js(`STREAM.CREATE.${v.name}`, cfg);
        toast(`stream ${v.name} created`);
      }
      done(v.name);
    } catch (e) { showError(err, e); }
  });
  return h("div", {}, err, form);
}

/** The Raft group of a stream: leader and each replica's state. */
export function raftView(info) {
  const c = info.cluster;
  if (!c) return h("p", { class: "muted" }, "Not clustered.");
  const rows = [h("tr", {}, h("td", {}, c.leader || "(no leader)"), h("td", {}, h("span", { class: "tag leader" }, "leader")), h("td", { class: "num" }, "–"), h("td", {}, "–"))];
  for (const r of c.replicas || []) {
    const state = r.offline ? h("span", { class: "tag offline", "data-testid": "replica-offline" }, "offline")
      : r.current ? h("span", { class: "ok" }, "current") : h("span", { class: "tag lagging" }, `lagging`);
    rows.push(h("tr", { "data-replica": r.name }, h("td", {}, r.name), h("td", {}, state),
      h("td", { class: "num" }, num(r.lag || 0)), h("td", {}, r.active ? `${dur(r.active)} ago` : "–")));
  }
  return table([["Peer"], ["State"], ["Behind (entries)", "num"], ["Last contact"]], rows, { "data-testid": "raft", "data-leader": c.leader || "" });
}

/** Mounts the streams list. */
export function mount(root) {
  const listBox = h("div");
  const formBox = h("div", { hidden: true });
  root.append(h("h1", {}, "Streams"),
    h("div", { class: "row" }, h("button", { "data-testid": "new-stream", onclick: () => { formBox.hidden = !formBox.hidden; } }, "New stream")),
    formBox, listBox);
  formBox.append(createForm((name) => { location.hash = `#/stream/${encodeURIComponent(name)}`; }));
  return onSnapshot((s) => {
    const j = s.jetstream || {};
    if (j.error) { showError(listBox, { message: j.error.description }); return; }
    const rows = (j.streams || []).map((st) => {
      const c = st.config; const t = st.state;
      return h("tr", { "data-stream": c.name },
        h("td", {}, h("a", { href: `#/stream/${encodeURIComponent(c.name)}` }, c.name)),
        h("td", {}, (c.subjects || []).join(", ")), h("td", {}, c.storage), h("td", {}, c.retention),
        h("td", { class: "num" }, c.num_replicas), h("td", { class: "num", "data-field": "messages" }, num(t.messages)),
        h("td", { class: "num" }, bytes(t.bytes)), h("td", { class: "num" }, num(t.first_seq)), h("td", { class: "num" }, num(t.last_seq)),
        h("td", { class: "num" }, h("a", { href: `#/consumers/${encodeURIComponent(c.name)}` }, num(t.consumer_count))),
        h("td", {}, st.cluster ? st.cluster.leader || "–" : "–"));
    });
    listBox.replaceChildren(rows.length ? table([["Name"], ["Subjects"], ["Storage"], ["Retention"], ["Replicas", "num"], ["Messages", "num"], ["Bytes", "num"], ["First seq", "num"], ["Last seq", "num"], ["Consumers", "num"], ["Leader"]], rows, { "data-testid": "streams" })
      : h("p", { class: "muted" }, "No streams yet."));
  });
}

/** Mounts one stream's page. */
export function mountStream(root, [name]) {
  const live = h("div");
  const err = h("div");
  const purgeSubject = h("input", { placeholder: "subject (optional)", "data-testid": "purge-subject" });
  const purgeKeep = h("input", { type: "number", placeholder: "keep N (optional)", "data-testid": "purge-keep" });
  const purge = async () => {
    const body = {};
    if (purgeSubject.value.trim()) body.filter = purgeSubject.value.trim();
    if (purgeKeep.value.trim()) body.keep = Number(purgeKeep.value);
    if (!await confirmDialog(`Purge stream ${name}${body.filter ? ` (subject ${body.filter})` : ""}${body.keep !== undefined ? `, keeping ${body.keep}` : ""}?`, "Purge")) return;
    try { const r = await js(`STREAM.PURGE.${name}`, body); toast(`purged ${r.purged} messages`); } catch (e) { showError(err, e); }
  };
  const del = async () => {
    if (!await confirmDialog(`Delete stream ${name} and all its messages and consumers?`)) return;
    try { await js(`STREAM.DELETE.${name}`); toast(`stream ${name} deleted`); location.hash = "#/streams"; } catch (e) { showError(err, e); }
  };
  const editBox = h("div");
  let current = null;
  const edit = () => {
    if (editBox.childElementCount) { editBox.replaceChildren(); return; }
    if (current) editBox.append(createForm(() => editBox.replaceChildren(), current));
  };
  root.append(h("h1", {}, `Stream ${name}`),
    h("div", { class: "row" },
      h("a", { href: `#/consumers/${encodeURIComponent(name)}` }, "Consumers"), "·",
      h("a", { href: `#/messages/${encodeURIComponent(name)}` }, "Messages")),
    err, live,
    h("h2", {}, "Edit, purge and delete"),
    h("div", { class: "row" }, h("button", { class: "secondary", "data-testid": "edit-stream", onclick: edit }, "Edit configuration")), editBox,
    h("div", { class: "row" }, purgeSubject, purgeKeep,
      h("button", { class: "secondary", "data-testid": "purge", onclick: purge }, "Purge"),
      h("button", { class: "danger", "data-testid": "delete-stream", onclick: del }, "Delete stream")));
  return onSnapshot((s) => {
    const st = ((s.jetstream || {}).streams || []).find((x) => x.config.name === name);
    if (!st) { live.replaceChildren(h("p", { class: "muted" }, "No such stream (yet).")); return; }
    const c = st.config; const t = st.state;
    current = c;
    const kv = (k, v) => h("tr", {}, h("th", {}, k), h("td", {}, v));
    live.replaceChildren(
      h("h2", {}, "State"),
      table([["Messages", "num"], ["Bytes", "num"], ["First seq", "num"], ["Last seq", "num"], ["Subjects", "num"], ["Deleted", "num"], ["Consumers", "num"]],
        [h("tr", {}, [t.messages, bytes(t.bytes), t.first_seq, t.last_seq, t.num_subjects, t.num_deleted, t.consumer_count].map((x) => h("td", { class: "num" }, typeof x === "number" ? num(x) : x ?? "–")))], { "data-testid": "stream-state" }),
      h("h2", {}, "Raft group"), raftView(st),
      h("h2", {}, "Configuration"),
      h("table", {}, h("tbody", {},
        kv("Subjects", (c.subjects || []).join(", ")), kv("Storage", c.storage), kv("Retention", c.retention),
        kv("Replicas", c.num_replicas), kv("Max messages", c.max_msgs), kv("Max bytes", c.max_bytes),
        kv("Max age", c.max_age ? dur(c.max_age) : "unlimited"), kv("Max message size", c.max_msg_size), kv("Discard", c.discard),
        kv("Duplicate window", dur(c.duplicate_window)), kv("Allow direct", String(!!c.allow_direct)))));
  });
}
