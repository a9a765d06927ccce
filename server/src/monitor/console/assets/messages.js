// Stream messages: browse by sequence (paged both ways) with an optional subject filter, shown
// as text, pretty JSON or hex; delete one message.
import { js, onSnapshot } from "./api.js";
import { h, num, showError, toast, confirmDialog, render, b64 } from "./ui.js";

const PAGE = 20;
/** Most single-message gets one backward page may take (deleted or filtered-out sequences). */
const MAX_PROBES = 400;

async function getAt(stream, seq, subject) {
  const body = subject ? { seq, next_by_subj: subject } : { seq };
  try {
    const r = await js(`STREAM.MSG.GET.${stream}`, body);
    return r.message;
  } catch (e) {
    if (e.info && e.info.err_code === 10037) return null; // no message found
    throw e;
  }
}

/** Up to PAGE messages from `seq` on. */
async function forward(stream, seq, subject, last) {
  const out = [];
  while (out.length < PAGE && seq <= last) {
    const m = await getAt(stream, seq, subject);
    if (!m) { if (subject) break; seq++; continue; }
    out.push(m);
    seq = m.seq + 1;
  }
  return out;
}

/** Up to PAGE messages before `seq`, oldest first. */
async function backward(stream, seq, subject, first) {
  const out = [];
  let probes = 0;
  for (let s = seq - 1; s >= first && out.length < PAGE && probes < MAX_PROBES; s--, probes++) {
    const m = await getAt(stream, s, null);
    if (m && (!subject || matches(subject, m.subject))) out.unshift(m);
  }
  return out;
}

function matches(filter, subject) {
  const f = filter.split("."); const s = subject.split(".");
  for (let i = 0; i < f.length; i++) {
    if (f[i] === ">") return s.length > i;
    if (i >= s.length || (f[i] !== "*" && f[i] !== s[i])) return false;
  }
  return f.length === s.length;
}

function headers(m) {
  if (!m.hdrs) return null;
  const lines = new TextDecoder().decode(b64(m.hdrs)).split("\r\n").slice(1).filter(Boolean);
  return lines.length ? h("div", { class: "muted" }, lines.join(" · ")) : null;
}

/** Mounts the messages page. */
export function mount(root, [stream]) {
  if (!stream) {
    const box = h("div");
    root.append(h("h1", {}, "Messages"), h("p", { class: "muted" }, "Pick a stream:"), box);
    return onSnapshot((s) => {
      box.replaceChildren(h("ul", {}, ((s.jetstream || {}).streams || []).map((st) =>
        h("li", {}, h("a", { href: `#/messages/${encodeURIComponent(st.config.name)}` }, st.config.name), ` (${num(st.state.messages)} messages)`))));
    });
  }
  let state = { first: 1, last: 0 };
  let shown = [];
  const err = h("div");
  const start = h("input", { type: "number", placeholder: "from seq (first)", "data-testid": "msg-start" });
  const subject = h("input", { placeholder: "subject filter (e.g. orders.*)", "data-testid": "msg-subject" });
  const mode = h("select", { "data-testid": "msg-mode" }, ["text", "json", "hex"].map((m) => h("option", { value: m }, m)));
  const list = h("div", { "data-testid": "messages" });
  const info = h("span", { class: "muted" });
  const show = () => {
    list.replaceChildren(...(shown.length ? shown.map((m) => h("div", { class: "card", "data-seq": m.seq },
      h("div", { class: "row" }, h("b", {}, `#${m.seq}`), h("span", {}, m.subject), h("span", { class: "muted" }, m.time),
        h("span", { class: "spacer" }),
        h("button", { class: "danger", onclick: () => del(m.seq), "data-testid": `msg-delete-${m.seq}` }, "Delete")),
      headers(m),
      h("pre", {}, render(b64(m.data), mode.value)))) : [h("p", { class: "muted" }, "No messages here.")]));
    info.textContent = `stream seq ${num(state.first)}…${num(state.last)}`;
  };
  let generation = 0; // a slower, older load must not overwrite a newer one
  const load = async (dir) => {
    const mine = ++generation;
    try {
      const subj = subject.value.trim();
      let page;
      if (dir === "next") {
        const from = shown.length ? shown[shown.length - 1].seq + 1 : state.first;
        page = await forward(stream, from, subj, state.last);
      } else if (dir === "prev") {
        const before = shown.length ? shown[0].seq : state.last + 1;
        page = await backward(stream, before, subj, state.first);
      } else if (dir === "last") {
        page = await backward(stream, state.last + 1, subj, state.first);
      } else {
        const from = Number(start.value) || state.first;
        page = await forward(stream, from, subj, state.last);
      }
      if (mine !== generation) return;
      shown = page;
      show();
    } catch (e) { showError(err, e); }
  };
  const del = async (seq) => {
    if (!await confirmDialog(`Delete message ${seq} of ${stream}?`)) return;
    try { await js(`STREAM.MSG.DELETE.${stream}`, { seq }); toast(`message ${seq} deleted`); shown = shown.filter((m) => m.seq !== seq); show(); }
    catch (e) { showError(err, e); }
  };
  const follow = h("input", { type: "checkbox", "data-testid": "msg-follow" });
  mode.addEventListener("change", show);
  root.append(h("h1", {}, `Messages of `, h("a", { href: `#/stream/${encodeURIComponent(stream)}` }, stream)), err,
    h("div", { class: "row" }, start, subject, mode,
      h("button", { "data-testid": "msg-go", onclick: () => load("go") }, "Show"),
      h("button", { class: "secondary", "data-testid": "msg-prev", onclick: () => load("prev") }, "◀ Older"),
      h("button", { class: "secondary", "data-testid": "msg-next", onclick: () => load("next") }, "Newer ▶"),
      h("button", { class: "secondary", onclick: () => load("last") }, "Latest"),
      h("label", {}, follow, " live tail"), info),
    list);
  let loaded = false;
  return onSnapshot((s) => {
    const st = ((s.jetstream || {}).streams || []).find((x) => x.config.name === stream);
    if (!st) return;
    const grew = st.state.last_seq !== state.last;
    state = { first: st.state.first_seq, last: st.state.last_seq };
    if (!loaded) { loaded = true; load("go"); } else if (follow.checked && grew) load("last");
    else info.textContent = `stream seq ${num(state.first)}…${num(state.last)}`;
  });
}
