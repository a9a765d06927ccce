// Consumers of a stream: live positions on one line over the stream's sequence range, the
// table of positions, create (push or pull, durable or ephemeral), pause/resume and delete.
import { js, onSnapshot, snapshot } from "./api.js";
import { h, num, ago, table, showError, toast, confirmDialog, field, formValues, list, secondsToNs } from "./ui.js";

const COLORS = ["#2f6fde", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285", "#5c940d", "#e67700"];

function sel(name, options, value) {
  return h("select", { name }, options.map((o) => h("option", { value: o, selected: o === value }, o)));
}

function createForm(stream, err) {
  const form = h("form", { class: "grid", "data-testid": "consumer-form" },
    field("Name (durable)", h("input", { name: "name", placeholder: "blank: ephemeral" })),
    field("Kind", sel("kind", ["pull", "push"], "pull")),
    field("Deliver subject (push)", h("input", { name: "deliver_subject", placeholder: "deliver.orders" })),
    field("Deliver policy", sel("deliver_policy", ["all", "new", "last", "last_per_subject", "by_start_sequence", "by_start_time"], "all")),
    field("Start sequence", h("input", { name: "opt_start_seq", type: "number" })),
    field("Start time (RFC 3339)", h("input", { name: "opt_start_time", placeholder: "2025-01-01T00:00:00Z" })),
    field("Ack policy", sel("ack_policy", ["explicit", "all", "none"], "explicit")),
    field("Ack wait (seconds)", h("input", { name: "ack_wait", type: "number", placeholder: "30" })),
    field("Max deliver", h("input", { name: "max_deliver", type: "number", placeholder: "unlimited" })),
    field("Backoff (seconds, comma separated)", h("input", { name: "backoff", placeholder: "1, 5, 30" })),
    field("Filter subjects (comma separated)", h("input", { name: "filter_subjects" })),
    field("Max ack pending", h("input", { name: "max_ack_pending", type: "number", placeholder: "1000" })),
    field("Replicas (0: the stream's)", h("input", { name: "num_replicas", type: "number", placeholder: "0" })),
    h("div", { class: "actions" }, h("button", { type: "submit", "data-testid": "consumer-create" }, "Create consumer")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    const cfg = { deliver_policy: v.deliver_policy, ack_policy: v.ack_policy };
    if (v.name) { cfg.durable_name = v.name; cfg.name = v.name; }
    if (v.kind === "push") {
      if (!v.deliver_subject) { showError(err, new Error("a push consumer needs a deliver subject")); return; }
      cfg.deliver_subject = v.deliver_subject;
    }
    if (v.opt_start_seq) cfg.opt_start_seq = Number(v.opt_start_seq);
    if (v.opt_start_time) cfg.opt_start_time = v.opt_start_time;
    if (v.ack_wait) cfg.ack_wait = secondsToNs(v.ack_wait);
    if (v.max_deliver) cfg.max_deliver = Number(v.max_deliver);
    if (v.backoff) cfg.backoff = list(v.backoff).map(secondsToNs);
    const filters = list(v.filter_subjects);
    if (filters.length === 1) cfg.filter_subject = filters[0];
    else if (filters.length > 1) cfg.filter_subjects = filters;
    if (v.max_ack_pending) cfg.max_ack_pending = Number(v.max_ack_pending);
    if (v.num_replicas) cfg.num_replicas = Number(v.num_replicas);
    const api = v.name ? `CONSUMER.CREATE.${stream}.${v.name}` : `CONSUMER.CREATE.${stream}`;
    try {
      const r = await js(api, { stream_name: stream, config: cfg });
      toast(`consumer ${r.name} created`);
      form.reset();
    } catch (e) { showError(err, e); }
  });
  return form;
}

/** All consumers of a stream on one line over its sequence range. */
function track(st, consumers) {
  const first = Math.max(0, (st.state.first_seq || 1) - 1);
  const last = Math.max(first + 1, st.state.last_seq || 0);
  const frac = (seq) => (Math.min(Math.max(seq, first), last) - first) / (last - first);
  const pos = (seq) => `${2 + 96 * frac(seq)}%`;
  const marks = [];
  consumers.forEach((c, i) => {
    const color = COLORS[i % COLORS.length];
    const d = c.delivered.stream_seq; const a = c.ack_floor.stream_seq;
    marks.push(h("div", { class: frac(d) > 0.7 ? "mark flip" : "mark", style: `left:${pos(d)};background:${color}`, "data-testid": `mark-${c.name}`, "data-seq": d, title: `${c.name}: delivered up to ${d}` },
      h("span", { style: `color:${color};top:${-6 + (i % 3) * 14}px` }, `${c.name} ${d}`)));
    if (a !== d) {
      marks.push(h("div", { class: frac(d) > 0.7 ? "mark flip" : "mark", style: `left:${pos(a)};background:${color};opacity:.4`, title: `${c.name}: ack floor ${a}` }));
    }
  });
  return h("div", { class: "track", "data-testid": "track" }, h("div", { class: "range" }), ...marks,
    h("div", { class: "ends" }, h("span", {}, `first ${num(first + 1)}`), h("span", {}, `last ${num(last)}`)));
}

function row(stream, c, err) {
  const cfg = c.config || {};
  const cell = (k, v) => h("td", { class: "num", "data-field": k }, num(v));
  const paused = !!c.paused;
  const pause = async () => {
    try {
      if (paused) await js(`CONSUMER.PAUSE.${stream}.${c.name}`, {});
      else await js(`CONSUMER.PAUSE.${stream}.${c.name}`, { pause_until: new Date(Date.now() + 3600e3).toISOString() });
      toast(paused ? `${c.name} resumed` : `${c.name} paused for an hour`);
    } catch (e) { showError(err, e); }
  };
  const del = async () => {
    if (!await confirmDialog(`Delete consumer ${c.name} of ${stream}?`)) return;
    try { await js(`CONSUMER.DELETE.${stream}.${c.name}`); toast(`consumer ${c.name} deleted`); } catch (e) { showError(err, e); }
  };
  return h("tr", { "data-consumer": c.name },
    h("td", {}, h("b", {}, c.name), h("div", { class: "muted" }, cfg.deliver_subject ? `push → ${cfg.deliver_subject}` : "pull", cfg.durable_name ? " · durable" : " · ephemeral")),
    h("td", {}, `${cfg.ack_policy} / ${cfg.deliver_policy}`),
    cell("delivered_consumer", c.delivered.consumer_seq), cell("delivered_stream", c.delivered.stream_seq),
    cell("ack_floor_consumer", c.ack_floor.consumer_seq), cell("ack_floor_stream", c.ack_floor.stream_seq),
    cell("num_pending", c.num_pending), cell("num_ack_pending", c.num_ack_pending), cell("num_redelivered", c.num_redelivered),
    cell("num_waiting", c.num_waiting),
    h("td", {}, ago(c.delivered.last_active)),
    h("td", {}, paused ? h("span", { class: "warn" }, "paused") : "active"),
    h("td", {}, h("div", { class: "row" },
      h("button", { class: "secondary", onclick: pause, "data-testid": `pause-${c.name}` }, paused ? "Resume" : "Pause"),
      h("button", { class: "danger", onclick: del, "data-testid": `delete-${c.name}` }, "Delete"))));
}

/** Mounts the consumers page (of one stream, or a stream picker). */
export function mount(root, [stream]) {
  if (!stream) {
    const box = h("div");
    root.append(h("h1", {}, "Consumers"), h("p", { class: "muted" }, "Pick a stream:"), box);
    return onSnapshot((s) => {
      box.replaceChildren(h("ul", {}, ((s.jetstream || {}).streams || []).map((st) =>
        h("li", {}, h("a", { href: `#/consumers/${encodeURIComponent(st.config.name)}` }, st.config.name), ` (${st.state.consumer_count} consumers)`))));
    });
  }
  const err = h("div");
  const live = h("div");
  const formBox = h("div", { hidden: true });
  root.append(h("h1", {}, `Consumers of `, h("a", { href: `#/stream/${encodeURIComponent(stream)}` }, stream)),
    err,
    h("div", { class: "row" }, h("button", { "data-testid": "new-consumer", onclick: () => { formBox.hidden = !formBox.hidden; } }, "New consumer")),
    formBox, live);
  formBox.append(createForm(stream, err));
  const render = (st, list) => {
    const consumers = list.slice().sort((a, b) => a.name.localeCompare(b.name));
    live.replaceChildren(
      h("h2", {}, "Positions over the stream"),
      h("p", { class: "muted" }, `Stream holds ${num(st.state.messages)} messages, seq ${num(st.state.first_seq)}…${num(st.state.last_seq)}. A solid mark is the last delivered message, a faded one the ack floor.`),
      track(st, consumers),
      consumers.length ? table([["Consumer"], ["Ack / deliver"], ["Delivered (cons)", "num"], ["Delivered (stream)", "num"], ["Ack floor (cons)", "num"], ["Ack floor (stream)", "num"],
        ["Pending", "num"], ["Ack pending", "num"], ["Redelivered", "num"], ["Waiting pulls", "num"], ["Last active"], ["State"], [""]],
        consumers.map((c) => row(stream, c, err)), { "data-testid": "consumers" })
        : h("p", { class: "muted" }, "No consumers yet."));
  };
  // The shared sample lists the consumers of the first streams only (live.rs); for a stream past
  // them this page asks for its consumers itself, once per sample and never two at a time.
  let asking = false;
  return onSnapshot((s) => {
    const j = s.jetstream || {};
    const st = (j.streams || []).find((x) => x.config.name === stream);
    if (!st) { live.replaceChildren(h("p", { class: "muted" }, "No such stream.")); return; }
    const sampled = (j.consumers || {})[stream];
    if (sampled) { render(st, sampled); return; }
    if (asking) return;
    asking = true;
    js(`CONSUMER.LIST.${stream}`, {})
      .then((r) => render(st, r.consumers || []))
      .catch((e) => showError(err, e))
      .finally(() => { asking = false; });
  });
}

export { snapshot };
