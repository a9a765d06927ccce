// Core NATS publish (with headers, or as a request) and a live subscription (wildcards).
import { publish } from "./api.js";
import { h, num, showError, render, b64 } from "./ui.js";

function parseHeaders(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean).map((l) => {
    const i = l.indexOf(":");
    if (i < 1) throw new Error(`header line "${l}" is not "Name: value"`);
    return [l.slice(0, i).trim(), l.slice(i + 1).trim()];
  });
}

/** Mounts the publish/subscribe page. */
export function mount(root) {
  const err = h("div");
  const subject = h("input", { placeholder: "orders.new", "data-testid": "pub-subject" });
  const hdrs = h("textarea", { placeholder: "Header-Name: value (one per line)", "data-testid": "pub-headers" });
  const payload = h("textarea", { placeholder: "payload", "data-testid": "pub-payload" });
  const asRequest = h("input", { type: "checkbox", "data-testid": "pub-request" });
  const result = h("div", { "data-testid": "pub-result" });
  const send = async () => {
    err.replaceChildren();
    try {
      const r = await publish(subject.value.trim(), payload.value, parseHeaders(hdrs.value), asRequest.checked);
      const parts = [];
      if (r.streams === null) parts.push(h("div", { class: "note" }, "Whether a stream captures this subject is unknown: your user may not use the JetStream API."));
      else if (r.captured) parts.push(h("div", { class: "note", "data-testid": "captured" }, `Captured by stream ${r.streams.join(", ")} (JetStream): stored, acknowledged with a PubAck.`));
      else parts.push(h("div", { class: "note", "data-testid": "core-only" }, "Core NATS only: no stream captures this subject, so the message is gone unless someone is subscribed now."));
      if (r.reply) parts.push(h("div", {}, r.captured ? "PubAck:" : "Reply:"), h("pre", { "data-testid": "reply" }, r.reply.json ? JSON.stringify(r.reply.json, null, 2) : r.reply.data));
      if (r.reply_error) parts.push(h("div", { class: "error" }, r.reply_error));
      if (r.delivered !== undefined) parts.push(h("div", {}, `Delivered to ${num(r.delivered)} subscriber(s).`));
      result.replaceChildren(...parts);
    } catch (e) { result.replaceChildren(); showError(err, e); }
  };

  const subSubject = h("input", { placeholder: "orders.> (wildcards allowed)", "data-testid": "sub-subject" });
  const subMode = h("select", {}, ["text", "json", "hex"].map((m) => h("option", { value: m }, m)));
  const subList = h("div", { "data-testid": "sub-msgs" });
  const subState = h("span", { class: "muted", "data-testid": "sub-state" });
  let source = null;
  let count = 0;
  let skipped = 0;
  const stop = () => { if (source) source.close(); source = null; subState.textContent = "not subscribed"; };
  const start = () => {
    stop();
    const subj = subSubject.value.trim();
    if (!subj) return;
    count = 0;
    skipped = 0;
    subList.replaceChildren();
    source = new EventSource(`/console/api/subscribe?subject=${encodeURIComponent(subj)}`);
    subState.textContent = `subscribed to ${subj}`;
    source.addEventListener("msgs", (ev) => {
      const batch = JSON.parse(ev.data);
      for (const m of batch.msgs) {
        count++;
        subList.prepend(h("div", { class: "card", "data-testid": "sub-msg" },
          h("div", { class: "row" }, h("b", {}, m.subject), m.reply ? h("span", { class: "muted" }, `reply ${m.reply}`) : null,
            h("span", { class: "muted" }, `${m.size} bytes`)),
          m.headers && m.headers.length ? h("div", { class: "muted" }, m.headers.map(([k, v]) => `${k}: ${v}`).join(" · ")) : null,
          h("pre", {}, render(b64(m.data), subMode.value))));
      }
      while (subList.childElementCount > 200) subList.lastChild.remove();
      skipped += batch.dropped;
      subState.dataset.shown = count;
      subState.dataset.skipped = skipped;
      subState.textContent = `subscribed to ${subj}: ${num(count)} shown${skipped ? `, ${num(skipped)} skipped by the rate bound` : ""}`;
    });
    source.onerror = () => { subState.textContent = `subscription to ${subj} interrupted (retrying)`; };
  };
  stop();
  root.append(h("h1", {}, "Publish & subscribe"), err,
    h("h2", {}, "Publish"),
    h("div", { class: "row" }, subject, h("label", {}, asRequest, " as a request (wait for a reply)")),
    hdrs, payload,
    h("div", { class: "row" }, h("button", { "data-testid": "pub-send", onclick: send }, "Publish")), result,
    h("h2", {}, "Subscribe"),
    h("p", { class: "muted" }, "Shows messages published through this node (bounded to 100 per second)."),
    h("div", { class: "row" }, subSubject, subMode,
      h("button", { "data-testid": "sub-start", onclick: start }, "Subscribe"),
      h("button", { class: "secondary", onclick: stop }, "Stop"), subState),
    subList);
  return stop;
}
