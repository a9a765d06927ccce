// Overview: identity, nodes and health, traffic chart, JetStream usage.
import { onSnapshot } from "./api.js";
import { h, num, bytes, dur, table } from "./ui.js";

const SVG = "http://www.w3.org/2000/svg";

function card(k, v, id) {
  return h("div", { class: "card", "data-testid": id }, h("div", { class: "k" }, k), h("div", { class: "v" }, v));
}

function chart(history) {
  const w = 900; const hgt = 170;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("preserveAspectRatio", "none");
  if (history.length < 2) return svg;
  const max = Math.max(1, ...history.map((p) => Math.max(p[1], p[2])));
  const t0 = history[0][0]; const t1 = history[history.length - 1][0];
  const x = (t) => ((t - t0) / Math.max(1, t1 - t0)) * (w - 10) + 5;
  const y = (v) => hgt - 10 - (v / max) * (hgt - 30);
  for (const [idx, cls] of [[1, "in"], [2, "out"]]) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("points", history.map((p) => `${x(p[0]).toFixed(1)},${y(p[idx]).toFixed(1)}`).join(" "));
    svg.append(line);
  }
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", 8); label.setAttribute("y", 14); label.setAttribute("font-size", 12);
  label.textContent = `max ${num(max)} msgs/s over ${Math.round((t1 - t0) / 60)} min`;
  svg.append(label);
  return svg;
}

function nodes(s) {
  const js = s.jetstream || {};
  const meta = js.meta_cluster;
  if (!meta) {
    return table([["Node"], ["Role"], ["Health"]],
      [h("tr", {}, h("td", {}, `${s.server.name} (this node)`), h("td", {}, "single node, meta leader"), h("td", { class: "ok" }, "ok"))]);
  }
  const rows = [h("tr", {}, h("td", {}, `${s.server.name} (this node)`),
    h("td", {}, meta.leader === s.server.name ? h("span", { class: "tag leader" }, "meta leader") : "follower"),
    h("td", { class: "ok" }, "ok"), h("td", {}, "–"), h("td", {}, "–"))];
  for (const r of meta.replicas || []) {
    const health = r.offline ? h("span", { class: "tag offline" }, "offline") : r.current ? h("span", { class: "ok" }, "current") : h("span", { class: "tag lagging" }, "lagging");
    rows.push(h("tr", {}, h("td", {}, r.name),
      h("td", {}, r.name === meta.leader ? h("span", { class: "tag leader" }, "meta leader") : "follower"),
      h("td", {}, health), h("td", { class: "num" }, num(r.lag || 0)), h("td", {}, r.active ? dur(r.active) + " ago" : "–")));
  }
  return table([["Node"], ["Role"], ["Health"], ["Lag", "num"], ["Last contact"]], rows, { "data-testid": "nodes" });
}

/** Mounts the overview page. */
export function mount(root) {
  const body = h("div");
  root.append(h("h1", {}, "Overview"), body);
  return onSnapshot((s) => {
    const v = s.varz; const js = s.jetstream || {};
    const local = js.local || {};
    const last = s.history[s.history.length - 1] || [0, 0, 0];
    body.replaceChildren(
      h("div", { class: "cards" },
        card("Server", s.server.name, "server-name"),
        card("Cluster", s.server.cluster || "(single node)"),
        card("Meta leader", js.meta_cluster ? js.meta_cluster.leader : s.server.name, "meta-leader"),
        card("Uptime", s.server.uptime),
        card("Connections", num(v.connections), "connections"),
        card("Subscriptions", num(v.subscriptions)),
        card("Msgs in / s", num(last[1]), "rate-in"),
        card("Msgs out / s", num(last[2]), "rate-out")),
      h("h2", {}, "Messages per second"),
      h("div", { class: "legend" }, h("span", { class: "in" }, "■ in"), h("span", { class: "out" }, "■ out"),
        h("span", { class: "muted" }, `totals: ${num(v.in_msgs)} in, ${num(v.out_msgs)} out`)),
      chart(s.history),
      h("h2", {}, "Nodes"), nodes(s),
      h("h2", {}, "JetStream"),
      js.enabled === undefined ? h("p", { class: "muted" }, "Your user may not use the JetStream API.") :
        h("div", { class: "cards" },
          card("Streams", num((js.streams || []).length), "js-streams"),
          card("Consumers", num(Object.values(js.consumers || {}).reduce((a, c) => a + (c ? c.length : 0), 0))),
          card("Messages (this node)", num(local.messages)),
          card("Bytes (this node)", bytes(local.bytes)),
          card("Memory used / limit", `${bytes(local.memory)} / ${local.max_memory ? bytes(local.max_memory) : "75% RAM"}`),
          card("File used / limit", `${bytes(local.storage)} / ${local.max_storage ? bytes(local.max_storage) : "unlimited"}`),
          card("API calls (errors)", `${num(local.api_total)} (${num(local.api_errors)})`)));
  });
}
