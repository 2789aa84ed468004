/**
 * Stock clients driving cat round trips, as an agent harness would: run under Node with the npm
 * `ws` package (transport `ws`) or Node's `http` with a keep-alive agent against the JSON API
 * (transport `http`), or under Deno with its built-in `WebSocket` (transport `deno-ws`).
 *
 * Input: one JSON argument {url, wsUrl, token, transport, ids, rounds, passes, wsModule?}. Each
 * session does `rounds` sequential round trips (write `marker\n`, wait until cat's output
 * shows the marker twice: the terminal's echo and cat's copy), all sessions at once. Over a
 * WebSocket each session has its own connection, subscribed to its output; writes use
 * `yield_time_ms: 0` and the echo is read from the pushed output. Over HTTP each round trip is
 * one `POST /v1/write_stdin` with `until`.
 *
 * Output on stdout: `warm` after one untimed pass, then (after a line on stdin) one JSON line
 * {passes: [{wall_s, latencies_ms}]}.
 * @module
 */

const isDeno = typeof Deno !== "undefined";
const nodeProcess = globalThis.process;
const cfg = JSON.parse(isDeno ? Deno.args[0] : nodeProcess.argv[2]);

/** Writes a line; resolves once it is flushed (a pipe write in Node is asynchronous). */
function out(line) {
  if (isDeno) {
    const bytes = new TextEncoder().encode(line + "\n");
    for (let at = 0; at < bytes.length;) at += Deno.stdout.writeSync(bytes.subarray(at));
    return Promise.resolve();
  }
  return new Promise((resolve) => nodeProcess.stdout.write(line + "\n", resolve));
}

async function stdinLine() {
  if (isDeno) {
    const buf = new Uint8Array(16);
    await Deno.stdin.read(buf);
    return;
  }
  await new Promise((resolve) => nodeProcess.stdin.once("data", resolve));
}

async function webSocketClass() {
  if (cfg.transport === "deno-ws") return globalThis.WebSocket;
  const mod = await import(cfg.wsModule);
  return mod.default ?? mod.WebSocket;
}

/** A session driven over its own WebSocket. */
async function wsSession(WS, id) {
  const socket = new WS(cfg.wsUrl, {
    headers: { authorization: `Bearer ${cfg.token}` },
  });
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = (e) => reject(new Error(`websocket: ${e.message ?? e}`));
  });
  let seen = "";
  let waiting;
  let next = 1;
  const answers = new Map();
  socket.onmessage = (e) => {
    const msg = JSON.parse(e.data);
    if (msg.method === "output") {
      seen += msg.params.text;
      if (waiting && seen.split(waiting.marker).length >= 3) {
        const w = waiting;
        waiting = undefined;
        w.resolve();
      }
    } else if (msg.id !== undefined) {
      const answer = answers.get(msg.id);
      answers.delete(msg.id);
      if (msg.error) answer?.reject(new Error(JSON.stringify(msg.error)));
      else answer?.resolve(msg.result);
    }
  };
  const call = (method, params) => {
    const rpcId = next++;
    socket.send(JSON.stringify({ jsonrpc: "2.0", id: rpcId, method, params }));
    return new Promise((resolve, reject) => answers.set(rpcId, { resolve, reject }));
  };
  await call("subscribe", { session_id: id });
  return {
    async roundTrip(marker) {
      seen = "";
      const echoed = new Promise((resolve) => waiting = { marker, resolve });
      const answered = call("write_stdin", {
        session_id: id,
        chars: `${marker}\n`,
        yield_time_ms: 0,
      });
      await Promise.all([echoed, answered]);
    },
    close: () => socket.close(),
  };
}

/** A session driven by POSTs through one shared keep-alive agent. */
async function httpSessions() {
  const http = await import("node:http");
  const agent = new http.Agent({ keepAlive: true });
  const post = (body) =>
    new Promise((resolve, reject) => {
      const data = JSON.stringify(body);
      const req = http.request(cfg.url + "/v1/write_stdin", {
        method: "POST",
        agent,
        headers: {
          authorization: `Bearer ${cfg.token}`,
          "content-type": "application/json",
          "content-length": new TextEncoder().encode(data).length,
        },
      }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c) => text += c);
        res.on("end", () =>
          res.statusCode === 200 ? resolve(JSON.parse(text)) : reject(new Error(text)));
      });
      req.on("error", reject);
      req.end(data);
    });
  return (id) => ({
    async roundTrip(marker) {
      const res = await post({
        session_id: id,
        chars: `${marker}\n`,
        until: `${marker}[\\s\\S]*${marker}`,
        yield_time_ms: 10000,
      });
      if (res.output.split(marker).length < 3) throw new Error(`incomplete: ${res.output}`);
    },
    close() {},
  });
}

async function main() {
  let sessions;
  if (cfg.transport === "http") {
    const make = await httpSessions();
    sessions = cfg.ids.map(make);
  } else {
    const WS = await webSocketClass();
    sessions = await Promise.all(cfg.ids.map((id) => wsSession(WS, id)));
  }
  const pass = async (tag) => {
    const latencies = [];
    const t0 = performance.now();
    await Promise.all(sessions.map(async (s, si) => {
      for (let r = 0; r < cfg.rounds; r++) {
        const t = performance.now();
        await s.roundTrip(`${tag}s${si}r${r}z`);
        latencies.push(performance.now() - t);
      }
    }));
    return { wall_s: (performance.now() - t0) / 1000, latencies_ms: latencies };
  };
  await pass("w");
  await out("warm");
  await stdinLine();
  const passes = [];
  for (let p = 0; p < cfg.passes; p++) passes.push(await pass(`p${p}`));
  await out(JSON.stringify({ passes }));
  for (const s of sessions) s.close();
  if (!isDeno) nodeProcess.exit(0);
}

await main();
