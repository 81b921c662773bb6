// A local-inference client for a served rl-workbench session, in Node.js (docs/serve.md, "Local inference").
//
// It fetches the learner's policy as ONNX (GET /policy.onnx), acts with onnxruntime-node on a CartPole written
// here, records every step, and posts experience batches (POST /experience, the binary "WBX1" framing) every
// BATCH steps and at each episode's end. A policy whose steps carry no extras (the DQN family) is served as its
// greedy actor: this client explores epsilon-greedy around it. An on-policy one (GET /policy's "acting" says how:
// wb.PPO, wb.A2C, wb.RecurrentPPO) is served as its acting step, the actor's logits and the critic's value beside
// the action: this client samples the action from the logits (as the learner explores) and sends each step's
// value and log-probability among the batch's extras, as wb.RemoteSession(url, inference="local") does. A recurrent
// policy's step ("recurrent": true, and its "memory" how to run it: an LSTM, GRU or GTrXL memory) has its state
// explicit too: this client keeps the episode's state, zeros at the episode's start, feeds it each step and sends
// the state each step used.
// Every SYNC steps it asks for the newest policy version (GET /policy/version) and reloads the ONNX policy when
// there is a new one. A batch that got no answer is sent again with the same number (the server applies it once).
//
//   node client.mjs http://127.0.0.1:8000 [--steps 2000] [--batch 128] [--sync 500] [--epsilon 0.1] [--token T]
//
// (--epsilon is for the greedy policies; an on-policy one samples from its logits.)
//
// It prints one JSON line at the end: steps acted, batches and steps the server accepted, the policy versions seen.

import * as ort from "onnxruntime-node";

const args = process.argv.slice(2);
const url = (args[0] || "http://127.0.0.1:8000").replace(/\/$/, "");
const option = (name, value) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : value;
};
const STEPS = Number(option("steps", 2000));
const BATCH = Number(option("batch", 128));
const SYNC = Number(option("sync", 500));
const EPSILON = Number(option("epsilon", 0.1));
const TOKEN = option("token", process.env.WORKBENCH_SERVE_TOKEN);
const headers = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};

// -- CartPole-v1, as gymnasium steps it (Euler integration, 500-step limit) ---------------------------------

class CartPole {
  reset() {
    this.state = Array.from({ length: 4 }, () => Math.random() * 0.1 - 0.05);
    this.t = 0;
    return Float32Array.from(this.state);
  }
  step(action) {
    let [x, xDot, theta, thetaDot] = this.state;
    const force = action === 1 ? 10.0 : -10.0;
    const cos = Math.cos(theta), sin = Math.sin(theta);
    const temp = (force + 0.05 * thetaDot * thetaDot * sin) / 1.1;
    const thetaAcc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - (0.1 * cos * cos) / 1.1));
    const xAcc = temp - (0.05 * thetaAcc * cos) / 1.1;
    x += 0.02 * xDot; xDot += 0.02 * xAcc; theta += 0.02 * thetaDot; thetaDot += 0.02 * thetaAcc;
    this.state = [x, xDot, theta, thetaDot];
    this.t += 1;
    const terminated = Math.abs(x) > 2.4 || Math.abs(theta) > (12 * 2 * Math.PI) / 360;
    return { obs: Float32Array.from(this.state), reward: 1.0, terminated, truncated: !terminated && this.t >= 500 };
  }
}

// -- the policy ---------------------------------------------------------------------------------------------

async function get(path) {
  const response = await fetch(url + path, { headers });
  if (!response.ok) throw new Error(`GET ${path}: ${response.status} ${await response.text()}`);
  return response;
}

async function loadPolicy() {
  const response = await get("/policy.onnx");
  const version = Number(response.headers.get("x-workbench-policy-version"));
  const session = await ort.InferenceSession.create(new Uint8Array(await response.arrayBuffer()));
  return { version, session };
}

async function greedy(policy, obs, nActions) {
  const feeds = { obs: new ort.Tensor("float32", obs, [1, obs.length]) };
  if (policy.session.inputNames.includes("action_mask")) {
    feeds.action_mask = new ort.Tensor("bool", new Uint8Array(nActions).fill(1), [1, nActions]);
  }
  const out = await policy.session.run(feeds);
  return Number(out[policy.session.outputNames[0]].data[0]);
}

// An on-policy policy's acting step: obs (and a recurrent policy's episode state) in; the action sampled from the
// policy's logits (as the learner explores), its log-probability, the value (and the next state) out. GET /policy's
// "acting" (and "memory") name them.
async function actingStep(policy, obs, state, start, nActions, names, memory) {
  const feeds = { obs: new ort.Tensor("float32", obs, [1, obs.length]) };
  if (memory) {
    feeds[names.state] = new ort.Tensor("float32", state, [1, ...memory.shape]);
    feeds[names.episode_start] = new ort.Tensor("float32", Float32Array.of(start ? 1 : 0), [1]);
  }
  if (policy.session.inputNames.includes("action_mask")) {
    feeds.action_mask = new ort.Tensor("bool", new Uint8Array(nActions).fill(1), [1, nActions]);
  }
  const out = await policy.session.run(feeds);
  const logits = Array.from(out[names.policy_output].data);
  const top = Math.max(...logits);
  const logSum = top + Math.log(logits.reduce((sum, l) => sum + Math.exp(l - top), 0));
  let u = Math.random(), action = logits.length - 1;
  for (let a = 0; a < logits.length; a++) {
    u -= Math.exp(logits[a] - logSum);
    if (u < 0) { action = a; break; }
  }
  return {
    action,
    logProb: logits[action] - logSum,
    value: Number(out[names.value].data[0]),
    next: memory ? Float32Array.from(out[names.next_state].data) : null,
  };
}

// -- experience batches: b"WBX1", uint32 header length, the JSON header, the arrays --------------------------

function encodeBatch(header, arrays) {
  const listed = arrays.map(([name, dtype, shape]) => ({ name, dtype, shape }));
  const head = new TextEncoder().encode(JSON.stringify({ ...header, arrays: listed }));
  const bodies = arrays.map(([, , , data]) => new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  const total = 8 + head.length + bodies.reduce((n, b) => n + b.length, 0);
  const out = new Uint8Array(total);
  out.set(new TextEncoder().encode("WBX1"), 0);
  new DataView(out.buffer).setUint32(4, head.length, true); // little-endian, as every array (x86 and ARM are)
  out.set(head, 8);
  let offset = 8 + head.length;
  for (const b of bodies) {
    out.set(b, offset);
    offset += b.length;
  }
  return out;
}

async function post(body) {
  for (let attempt = 0; ; attempt++) {
    try {
      const response = await fetch(url + "/experience", {
        method: "POST",
        headers: { ...headers, "Content-Type": "application/octet-stream" },
        body,
      });
      const answer = await response.json();
      if (!response.ok) throw Object.assign(new Error(answer.error), { refused: true });
      return answer;
    } catch (error) {
      if (error.refused || attempt >= 20) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 50 * 2 ** attempt))); // the same batch again
    }
  }
}

// -- the loop ------------------------------------------------------------------------------------------------

const described = await (await get("/policy")).json();
const refuse = (why) => {
  console.error(why);
  process.exit(2);
};
// A recurrent policy: the served ONNX runs its memory, one state input and output (GET /policy's "memory").
const memory = described.recurrent ? described.memory : null;
if (described.recurrent && !memory) {
  refuse(
    `the served policy (${described.agent.algorithm}) is recurrent but GET /policy does not say how to run its ` +
      "memory (\"memory\"): this server is older than this client; use wb.RemoteSession(url, inference=\"local\") " +
      "from Python, or inference=\"server\" (POST /act)",
  );
}
if (!("action" in (described.actions || { action: null }))) {
  refuse("the served policy's action space is composite (Dict / Tuple): this client acts in CartPole's Discrete(2)");
}
// An on-policy policy: the served ONNX is its acting step, logits and value beside the action (GET /policy's
// "acting"); this client samples a Discrete action from the logits.
const acting = described.acting || null;
if (acting && acting.distribution !== "categorical") {
  refuse(
    `the served policy (${described.agent.algorithm}) samples a ${acting.distribution} distribution: this client ` +
      "acts in CartPole's Discrete(2), sampling from logits; use wb.RemoteSession(url, inference=\"local\") from " +
      'Python, or inference="server" (POST /act)',
  );
}
// Older servers served a recurrent policy's acting step without "acting": "memory" names its outputs then.
const sampling = Boolean(acting || memory);
const names = { ...(memory ? memory.onnx : {}), ...(acting ? acting.onnx : {}) };
// The extras each step must carry: an on-policy policy's value and log-probability (and a recurrent one's state)
// come out of its ONNX acting step; others are refused.
const extras = described.extras || {};
const computed = [
  ...(sampling ? ["values", "log_probs"] : []),
  ...(memory ? [memory.extra.replace(/^extras\//, "")] : []),
];
const lacking = Object.keys(extras).filter((key) => !computed.includes(key));
if (lacking.length) {
  refuse(
    `the served policy's (${described.agent.algorithm}) steps carry extras this client cannot compute from the ` +
      `ONNX policy (${lacking.join(", ")}); use wb.RemoteSession(url, inference="local") from Python, or ` +
      'inference="server" (POST /act)',
  );
}
const obsSize = described.obs_shape.reduce((a, b) => a * b, 1);
const nActions = 2;
const stateSize = memory ? memory.shape.reduce((a, b) => a * b, 1) : 0;
// A batch fits the server's limits: its steps (max_batch_steps) and its bytes (max_body; a GTrXL's state is
// kilobytes a step), with room for the header.
const stepBytes = 8 * obsSize + 8 + 4 + 2 + 4 + (sampling ? 8 : 0) + 4 * stateSize;
const batchLimit = Math.max(
  1,
  Math.min(BATCH, described.max_batch_steps || BATCH, Math.floor(((described.max_body || 1 << 20) - 65536) / stepBytes)),
);
const client = `node-${Math.random().toString(36).slice(2, 12)}`;
let policy = await loadPolicy();
const versions = [policy.version];
let seq = 0, accepted = 0, batches = 0;
let rows = [], episodes = [], episodeReturn = 0, episodeLength = 0;
const env = new CartPole();
let obs = env.reset();

async function flush() {
  if (rows.length === 0) return;
  const n = rows.length;
  const stack = (key) => {
    const out = new Float32Array(n * obsSize);
    rows.forEach((row, i) => out.set(row[key], i * obsSize));
    return out;
  };
  const arrays = [
    ["obs", "float32", [n, ...described.obs_shape], stack("obs")],
    ["action", "int64", [n], BigInt64Array.from(rows, (r) => BigInt(r.action))],
    ["reward", "float32", [n], Float32Array.from(rows, (r) => r.reward)],
    ["next_obs", "float32", [n, ...described.obs_shape], stack("nextObs")],
    ["terminated", "bool", [n], Uint8Array.from(rows, (r) => (r.terminated ? 1 : 0))],
    ["truncated", "bool", [n], Uint8Array.from(rows, (r) => (r.truncated ? 1 : 0))],
    ["log_prob", "float32", [n], Float32Array.from(rows, (r) => r.logProb)],
  ];
  if (sampling) {
    arrays.push(
      ["extras/values", "float32", [n], Float32Array.from(rows, (r) => r.value)],
      ["extras/log_probs", "float32", [n], Float32Array.from(rows, (r) => r.logProb)],
    );
  }
  if (memory) {
    const states = new Float32Array(n * stateSize);
    rows.forEach((row, i) => states.set(row.state, i * stateSize));
    arrays.push([memory.extra, "float32", [n, ...memory.shape], states]); // the state each step used
  }
  seq += 1;
  const header = { client, seq, episode: "node", version: rows[0].version, steps: n, episodes };
  rows = [];
  episodes = [];
  const answer = await post(encodeBatch(header, arrays));
  accepted += answer.accepted;
  batches += 1;
}

// The episode's memory (a recurrent policy): zeros at its start, then each step's next state.
let state = new Float32Array(stateSize), starting = true;

for (let step = 1; step <= STEPS; step++) {
  let action, logProb, value = 0, used = null;
  if (sampling) {
    const out = await actingStep(policy, obs, state, starting, nActions, names, memory);
    ({ action, logProb, value } = out);
    if (memory) {
      used = state;
      state = out.next;
    }
    starting = false;
  } else {
    const best = await greedy(policy, obs, nActions);
    action = Math.random() < EPSILON ? Math.floor(Math.random() * nActions) : best;
    logProb = Math.log((action === best ? 1 - EPSILON : 0) + EPSILON / nActions);
  }
  const { obs: nextObs, reward, terminated, truncated } = env.step(action);
  if (rows.length && rows[0].version !== policy.version) await flush(); // one batch, one policy version
  rows.push({ obs, action, reward, nextObs, terminated, truncated, logProb, value, state: used, version: policy.version });
  episodeReturn += reward;
  episodeLength += 1;
  const ended = terminated || truncated;
  if (ended) {
    episodes.push([rows.length - 1, episodeReturn, episodeLength]);
    episodeReturn = 0;
    episodeLength = 0;
  }
  if (ended) {
    state = new Float32Array(stateSize); // the next episode's memory starts empty
    starting = true;
  }
  obs = ended ? env.reset() : nextObs;
  if (ended || rows.length >= batchLimit) await flush();
  if (step % SYNC === 0) {
    const { version } = await (await get("/policy/version")).json();
    if (version > policy.version) {
      policy = await loadPolicy();
      versions.push(policy.version);
    }
  }
}
await flush();
console.log(
  JSON.stringify({ steps: STEPS, batches, accepted, versions, sampled: sampling, memory: memory ? memory.kind : null }),
);
