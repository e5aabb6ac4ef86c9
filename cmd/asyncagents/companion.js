// The asyncagents plugin for OpenCode, written by `asyncagents install` (version VERSION).
// It gives OpenCode's agents the asyncagents tools, and lets the asyncagents daemon, one per
// user, reach this OpenCode: it serves this process's OpenCode API on a loopback port, behind
// a credential made at each start, and tells the daemon that port, the project directory and
// this process id over the daemon's socket, starting the daemon when none answers.
// `asyncagents uninstall` removes this file.
const SOCKET = SOCKET_PATH;
const START = START_COMMAND;
const VERSION = VERSION_TEXT;
const HEARTBEAT_MS = 5000;

export const Asyncagents = async (input) => {
  // The API of this OpenCode as its own client reaches it: in-process in a TUI without a
  // port, else its listener. A server password set for OpenCode is sent on the daemon's behalf.
  const cfg = input.client?._client?.getConfig?.() ?? {};
  const inner = cfg.fetch ?? fetch;
  const base = cfg.baseUrl ?? String(input.serverUrl);
  const pw = process.env.OPENCODE_SERVER_PASSWORD;
  const serverAuth = pw ? "Basic " + btoa((process.env.OPENCODE_SERVER_USERNAME || "opencode") + ":" + pw) : "";

  // fail says why the agents get no asyncagents tools: in OpenCode's log, in a toast a few
  // seconds later (once a TUI shows), and again in a toast at the first message.
  const fail = (why) => {
    const message = "asyncagents: no tools: " + why;
    console.error(message);
    const headers = { "content-type": "application/json" };
    if (serverAuth) headers.authorization = serverAuth;
    const body = JSON.stringify({ title: "asyncagents", message, variant: "error", duration: 30000 });
    const toast = () => inner(new Request(new URL("/tui/show-toast", base), { method: "POST", headers, body })).catch(() => {});
    setTimeout(toast, 5000).unref?.();
    let told = false;
    return {
      "chat.message": async () => {
        if (!told) {
          told = true;
          await toast();
        }
      },
    };
  };

  let z;
  try {
    z = (await import("@opencode-ai/plugin")).tool.schema;
  } catch (e) {
    return fail("@opencode-ai/plugin, which OpenCode installs into its config folder, cannot be loaded: " + e);
  }
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  const secret = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  const expected = "Basic " + btoa("asyncagents:" + secret);
  const listener = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0, // the event stream stays open
    fetch: async (req) => {
      if (req.headers.get("authorization") !== expected) return new Response("unauthorized\n", { status: 401 });
      if (req.headers.get("host") !== "127.0.0.1:" + listener.port) return new Response("bad host\n", { status: 403 });
      const url = new URL(req.url);
      const headers = new Headers(req.headers);
      headers.delete("authorization");
      headers.delete("host");
      headers.delete("accept-encoding"); // fetch would decompress a body whose header still says gzip
      if (serverAuth) headers.set("authorization", serverAuth);
      const init = { method: req.method, headers, signal: req.signal };
      if (req.method !== "GET" && req.method !== "HEAD") init.body = await req.arrayBuffer();
      const res = await inner(new Request(new URL(url.pathname + url.search, base), init));
      if (!res.headers.has("content-encoding")) return res;
      const out = new Headers(res.headers);
      out.delete("content-encoding");
      out.delete("content-length");
      return new Response(res.body, { status: res.status, statusText: res.statusText, headers: out });
    },
  });

  const hello = { url: "http://127.0.0.1:" + listener.port, secret, directory: input.directory, pid: process.pid, plugin: VERSION, started: Date.now() };
  const post = async (path, body, signal) => {
    const res = await fetch("http://asyncagents" + path, {
      unix: SOCKET, method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify(body), signal, timeout: false,
    });
    const text = await res.text();
    if (!res.ok) {
      const err = new Error(text.trim() || res.statusText);
      err.status = res.status;
      throw err;
    }
    return JSON.parse(text);
  };
  // announce tells the daemon of this OpenCode; when no daemon answers it starts one and
  // tells it.
  const announce = async () => {
    try {
      return await post("/v1/announce", hello);
    } catch (e) {
      if (e.status) throw e;
    }
    const started = Bun.spawn(START, { stdin: "ignore", stdout: "ignore", stderr: "pipe" });
    if ((await started.exited) !== 0) throw new Error("asyncagents daemon did not start: " + (await new Response(started.stderr).text()).trim());
    return await post("/v1/announce", hello);
  };

  let server = ""; // the daemon's id of this OpenCode
  // reannounce announces this OpenCode again, once at a time (a heartbeat and tool calls
  // may find the daemon gone together).
  let announcing = null;
  const reannounce = () =>
    (announcing ??= announce()
      .then((a) => {
        server = a.server;
        return a;
      })
      .finally(() => {
        announcing = null;
      }));

  let info;
  try {
    info = await announce();
  } catch (e) {
    listener.stop(true);
    return fail(e.message);
  }
  server = info.server;

  const zodOf = (s) => {
    let t;
    if (Array.isArray(s.enum)) t = z.enum(s.enum);
    else if (s.type === "string") t = typeof s.maxLength === "number" ? z.string().max(s.maxLength) : z.string();
    else if (s.type === "boolean") t = z.boolean();
    else if (s.type === "integer" || s.type === "number") {
      t = s.type === "integer" ? z.number().int() : z.number();
      if (typeof s.minimum === "number") t = t.min(s.minimum);
      if (typeof s.maximum === "number") t = t.max(s.maximum);
    } else t = z.any();
    return s.description ? t.describe(s.description) : t;
  };
  const tools = {};
  for (const def of info.tools) {
    const required = new Set(def.parameters.required ?? []);
    const args = {};
    for (const [name, s] of Object.entries(def.parameters.properties ?? {})) args[name] = required.has(name) ? zodOf(s) : zodOf(s).optional();
    tools[def.name] = {
      description: def.description,
      args,
      execute: async (a, ctx) => {
        const call = () => post("/v1/call", {
          server, tool: def.name, args: a,
          caller: { sessionID: ctx.sessionID, messageID: ctx.messageID, agent: ctx.agent, callID: ctx.callID },
        }, ctx.abort);
        let res;
        try {
          res = await call();
        } catch (e) {
          if (e.status && e.status !== 404) throw e;
          await reannounce(); // the daemon stopped, or forgot this OpenCode
          res = await call();
        }
        if (res.error) throw new Error(res.error);
        return res.output;
      },
    };
  }
  // Every few seconds the plugin checks that the daemon follows this OpenCode, and announces
  // it again (starting a daemon) when it does not: a daemon that died learns of the runs of
  // this OpenCode that end meanwhile even when no tool is called. Not once the plugin file
  // is gone (asyncagents uninstall).
  let checking = false;
  const heartbeat = setInterval(async () => {
    if (checking) return;
    checking = true;
    try {
      await post("/v1/ping", { server });
    } catch (e) {
      if ((!e.status || e.status === 404) && (await Bun.file(import.meta.path).exists())) {
        try {
          await reannounce();
        } catch (e2) {
          console.error("asyncagents: " + e2.message);
        }
      }
    } finally {
      checking = false;
    }
  }, HEARTBEAT_MS);
  heartbeat.unref?.();
  return {
    tool: tools,
    dispose: async () => {
      clearInterval(heartbeat);
      listener.stop(true);
    },
  };
};
