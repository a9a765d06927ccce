// The console shell: login when the server asks for credentials, the live stream, and a hash
// router that mounts one page at a time (#/streams, #/stream/NAME, #/consumers/NAME, ...).
import { session, startLive, stopLive, post } from "./api.js";
import { h, showError } from "./ui.js";
import * as overview from "./overview.js";
import * as streams from "./streams.js";
import * as consumers from "./consumers.js";
import * as messages from "./messages.js";
import * as pubsub from "./pubsub.js";
import * as more from "./more.js";

const pages = {
  "": ["overview", overview.mount],
  streams: ["streams", streams.mount],
  stream: ["streams", streams.mountStream],
  consumers: ["consumers", consumers.mount],
  messages: ["messages", messages.mount],
  pubsub: ["pubsub", pubsub.mount],
  kv: ["kv", more.mountKv],
  objects: ["objects", more.mountObjects],
  advisories: ["advisories", more.mountAdvisories],
};

let cleanup = null;

function route() {
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const [navName, mount] = pages[name] || pages[""];
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === navName));
  if (cleanup) { cleanup(); cleanup = null; }
  const view = document.getElementById("view");
  view.replaceChildren();
  try {
    cleanup = mount(view, rest.map(decodeURIComponent)) || null;
  } catch (e) {
    showError(view, e);
  }
}

function loginForm(info) {
  const view = document.getElementById("view");
  const err = h("div");
  const form = h("form", { class: "grid", "data-testid": "login" },
    h("label", {}, "User", h("input", { name: "user", autocomplete: "username" })),
    h("label", {}, "Password", h("input", { name: "password", type: "password", autocomplete: "current-password" })),
    h("label", {}, "or token", h("input", { name: "token", type: "password" })),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Log in")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = form.elements;
    try {
      await post("/console/api/login", { user: f.user.value, password: f.password.value, token: f.token.value });
      start();
    } catch (e) { showError(err, e); }
  });
  view.replaceChildren(h("h1", {}, `Log in to ${info.server_name}`),
    h("p", { class: "muted" }, "This server requires NATS credentials; the console acts with your permissions."),
    err, form);
}

async function start() {
  const info = await session();
  document.getElementById("ident").textContent = `${info.server_name} · v${info.version}`;
  const who = document.getElementById("who");
  who.replaceChildren();
  if (info.auth_required && !info.logged_in) {
    loginForm(info);
    return;
  }
  if (info.auth_required) {
    who.append(`user ${info.user ?? "(token)"} `, h("button", {
      class: "secondary", "data-testid": "logout",
      onclick: async () => { await post("/console/api/logout", {}); stopLive(); start(); },
    }, "Log out"));
  }
  const dot = document.getElementById("live-dot");
  startLive((on) => dot.classList.toggle("on", on));
  window.onhashchange = route;
  route();
}

start().catch((e) => showError(document.getElementById("view"), e));
