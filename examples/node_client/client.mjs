// A local-inference client for a served rl-workbench session, in Node.js (docs/serve.md, "Local inference").
//
// It fetches the learner's policy as ONNX (GET /policy.onnx), acts with onnxruntime-node in an env written here
// (--env: CartPole-v1, the default, or Pendulum-v1, each as gymnasium steps it), records every step, and posts
// experience batches (POST /experience, the binary "WBX1" framing) every BATCH steps and at each episode's end.
// It first checks that the policy's observation and action spaces are the env's, and says so when they are not.
// A policy whose steps carry no extras is served as its deterministic actor, and this client explores around it:
// - a Discrete one (the DQN family) epsilon-greedy (--epsilon);
// - a Box one (the off-policy agents: SAC, TD3, DDPG, TQC, CrossQ, DroQ; the ONNX gives the actor's action in the
//   env's bounds) with Gaussian noise, as TD3 and DDPG explore: action + N(0, (NOISE * half range)^2) per element,
//   clipped to the bounds, sent clipped (in the env's units, as the Python client's action is). While the policy
//   version's learner has taken fewer than its learning_starts steps (GET /policy's counters), it draws uniformly
//   in the bounds instead, as the learner and the Python client do then. For the SAC family this is not the
//   learner's own behaviour (the tanh-squashed Gaussian, whose spread the served ONNX does not hold): an
//   off-policy learner learns from replay whatever behaviour filled it, so it takes these steps all the same.
//   It sends no log_prob (below, in flush()).
// An on-policy one (GET /policy's "acting" says how: wb.PPO, wb.A2C, wb.RecurrentPPO) is served as its acting
// step, the actor's raw output and the critic's value beside the action: this client samples the action as the
// learner explores (a Discrete space's from its logits; a Box space's from the Gaussian N(mean, exp(log_std)),
// stepping the env with it clipped to the bounds and sending it unclipped) and sends each step's value and
// log-probability among the batch's extras, as wb.RemoteSession(url, inference="local") does. A recurrent policy's
// step ("recurrent": true, and its "memory" how to run it: an LSTM, GRU or GTrXL memory) has its state explicit
// too: this client keeps the episode's state, zeros at the episode's start, feeds it each step and sends the
// state each step used.
// Every SYNC steps it asks for the newest policy version (GET /policy/version) and reloads the ONNX policy when
// there is a new one. A batch that got no answer is sent again with the same number (the server applies it once).
//
// A policy it cannot act for is refused before acting, saying why, with exit status 2: MultiDiscrete, MultiBinary
// and Dict / Tuple (composite) actions, steps with extras it cannot compute, and a policy for another env than
// --env.
//
//   node client.mjs http://127.0.0.1:8000 [--env CartPole-v1] [--steps 2000] [--batch 128] [--sync 500]
//                   [--epsilon 0.1] [--noise 0.1] [--token T]
//
// (--epsilon is for the Discrete deterministic actors, --noise, the Gaussian noise's standard deviation as a
// fraction of the action's half range, for the Box ones; an on-policy policy samples from its distribution.)
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
const NOISE = Number(option("noise", 0.1));
const ENV = option("env", "CartPole-v1");
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

// -- Pendulum-v1, as gymnasium steps it (max_speed 8, max_torque 2, dt 0.05, g 10, m 1, l 1; 200-step limit) --

// Python's x % m takes the sign of m; JavaScript's the sign of x.
const angleNormalize = (x) => ((((x + Math.PI) % (2 * Math.PI)) + 2 * Math.PI) % (2 * Math.PI)) - Math.PI;

class Pendulum {
  reset() {
    this.th = Math.random() * 2 * Math.PI - Math.PI;
    this.thDot = Math.random() * 2 - 1;
    this.t = 0;
    return this.obs();
  }
  obs() {
    return Float32Array.of(Math.cos(this.th), Math.sin(this.th), this.thDot);
  }
  step(action) {
    const u = Math.min(Math.max(action[0], -2.0), 2.0);
    // The cost of the state the step starts from, as gymnasium's (before the state moves).
    const costs = angleNormalize(this.th) ** 2 + 0.1 * this.thDot ** 2 + 0.001 * u * u;
    const thDot = Math.min(Math.max(this.thDot + (((3 * 10.0) / 2) * Math.sin(this.th) + 3.0 * u) * 0.05, -8), 8);
    this.th += thDot * 0.05;
    this.thDot = thDot;
    this.t += 1;
    // Pendulum never terminates: its episodes end by the time limit, a truncation.
    return { obs: this.obs(), reward: -costs, terminated: false, truncated: this.t >= 200 };
  }
}

// The envs this client acts in, with the spaces a served policy must have to act in them (as
// workbench.checkpoint.space_to_json writes them, under GET /policy's "agent").
const ENVS = {
  "CartPole-v1": { make: () => new CartPole(), obsShape: [4], actionSpace: { type: "Discrete", n: 2, start: 0 } },
  "Pendulum-v1": {
    make: () => new Pendulum(),
    obsShape: [3],
    actionSpace: { type: "Box", low: [-2.0], high: [2.0], shape: [1], dtype: "float32" },
  },
};

// -- the policy ---------------------------------------------------------------------------------------------

async function get(path) {
  const response = await fetch(url + path, { headers });
  if (!response.ok) throw new Error(`GET ${path}: ${response.status} ${await response.text()}`);
  return response;
}

// The newest policy version's ONNX. With clock (an off-policy Box actor's warm-up depends on it), also how many
// steps its learner had taken when it was published (GET /policy's counters), and whether that is fewer than
// learning_starts: the Python client's copy takes the learner's clock with each version, and explores uniformly
// until then. The counters are read first: a version published between the two requests is newer, its clock at
// least theirs, so counters past learning_starts hold for it too; counters short of it hold only for their own
// version, and both are fetched again (at most ten times) until the ONNX is that version.
async function loadPolicy(clock = false) {
  for (let attempt = 0; ; attempt++) {
    const described = clock ? await (await get("/policy")).json() : null;
    const response = await get("/policy.onnx");
    const version = Number(response.headers.get("x-workbench-policy-version"));
    const session = await ort.InferenceSession.create(new Uint8Array(await response.arrayBuffer()));
    if (!clock) return { version, session, warming: false };
    const timesteps = Number(described.counters.num_timesteps || 0);
    const warming = timesteps < learningStarts;
    if (!warming || described.version === version || attempt >= 10) return { version, session, warming };
  }
}

async function greedy(policy, obs, nActions) {
  const feeds = { obs: new ort.Tensor("float32", obs, [1, obs.length]) };
  if (policy.session.inputNames.includes("action_mask")) {
    feeds.action_mask = new ort.Tensor("bool", new Uint8Array(nActions).fill(1), [1, nActions]);
  }
  const out = await policy.session.run(feeds);
  return Number(out[policy.session.outputNames[0]].data[0]);
}

// One draw of N(0, 1) (Box-Muller): the noise of a Gaussian policy's sample.
function standardNormal() {
  const u = 1 - Math.random(); // in (0, 1]: its log is finite
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * Math.random());
}

// A Discrete policy's action drawn from softmax(logits), and its log-probability log_softmax(logits)[action].
function sampleCategorical(logits) {
  const top = Math.max(...logits);
  const logSum = top + Math.log(logits.reduce((sum, l) => sum + Math.exp(l - top), 0));
  let u = Math.random(), action = logits.length - 1;
  for (let a = 0; a < logits.length; a++) {
    u -= Math.exp(logits[a] - logSum);
    if (u < 0) { action = a; break; }
  }
  return { action, logProb: logits[action] - logSum };
}

// A Box policy's action mean + exp(log_std) * noise, noise ~ N(0, 1) per element, unclipped (the env's step gets it
// clipped; the batch carries it as drawn, as the Python client's does), and its log-probability under the diagonal
// Gaussian: sum(-noise^2 / 2 - log_std - log(2 pi) / 2).
function sampleGaussian(mean, logStd) {
  const action = new Float32Array(mean.length);
  let logProb = 0;
  for (let i = 0; i < mean.length; i++) {
    const noise = standardNormal();
    action[i] = mean[i] + Math.exp(logStd[i]) * noise;
    logProb += -0.5 * noise * noise - logStd[i] - 0.5 * Math.log(2 * Math.PI);
  }
  return { action, logProb };
}

// An off-policy Box actor's exploring action, as TD3 and DDPG explore (wb.GaussianNoise): its deterministic
// action (the ONNX's, in the env's bounds) plus noise ~ N(0, (NOISE * half range)^2) per element, clipped to the
// bounds; while its learner is warming up (fewer steps than learning_starts), a uniform draw in the bounds.
async function noisyAction(policy, obs) {
  const action = new Float32Array(actionSize);
  if (policy.warming) {
    for (let i = 0; i < actionSize; i++) action[i] = low[i] + Math.random() * (high[i] - low[i]);
    return action;
  }
  const out = await policy.session.run({ obs: new ort.Tensor("float32", obs, [1, obs.length]) });
  const actor = out[policy.session.outputNames[0]].data;
  for (let i = 0; i < actionSize; i++) {
    const drawn = actor[i] + NOISE * ((high[i] - low[i]) / 2) * standardNormal();
    action[i] = Math.min(Math.max(drawn, low[i]), high[i]);
  }
  return action;
}

// An on-policy policy's acting step: obs (and a recurrent policy's episode state) in; the action sampled from the
// policy's distribution (as the learner explores), its log-probability, the value (and the next state) out.
// GET /policy's "acting" (and "memory") name them.
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
  const output = Array.from(out[names.policy_output].data);
  const { action, logProb } = names.log_std
    ? sampleGaussian(output, Array.from(out[names.log_std].data))
    : sampleCategorical(output);
  return {
    action,
    logProb,
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

// -- spaces, as GET /policy's "agent" describes them (workbench.checkpoint.space_to_json) -------------------

// A Box bound: the server writes an infinite one as "inf" / "-inf".
const bound = (x) => (x === "inf" ? Infinity : x === "-inf" ? -Infinity : Number(x));

function spaceText(s) {
  const list = (x) => `[${[x].flat(Infinity).join(", ")}]`;
  switch (s.type) {
    case "Discrete":
      return `Discrete(${s.n}${s.start ? `, start=${s.start}` : ""})`;
    case "Box":
      return `Box(${list(s.low)}, ${list(s.high)}, shape [${s.shape}])`;
    case "MultiDiscrete":
      return `MultiDiscrete(${list(s.nvec)})`;
    case "MultiBinary":
      return `MultiBinary(${list(s.n)})`;
    case "Dict":
      return `Dict(${Object.entries(s.spaces).map(([k, v]) => `${k}: ${spaceText(v)}`).join(", ")})`;
    case "Tuple":
      return `Tuple(${s.spaces.map(spaceText).join(", ")})`;
    default:
      return String(s.type);
  }
}

function sameSpace(a, b) {
  if (a.type !== b.type) return false;
  if (a.type === "Discrete") return a.n === b.n && (a.start || 0) === (b.start || 0);
  if (a.type !== "Box" || String(a.shape) !== String(b.shape)) return false;
  const same = (x, y) => {
    const [p, q] = [[x].flat(Infinity).map(bound), [y].flat(Infinity).map(bound)];
    return p.length === q.length && p.every((v, i) => v === q[i]);
  };
  return same(a.low, b.low) && same(a.high, b.high);
}

// -- the loop ------------------------------------------------------------------------------------------------

const refuse = (why) => {
  console.error(why);
  process.exit(2);
};
if (!(ENV in ENVS)) refuse(`--env ${ENV}: this client acts in ${Object.keys(ENVS).join(" or ")}`);
if (!(Number.isFinite(NOISE) && NOISE >= 0)) {
  refuse(
    `--noise ${option("noise")}: the exploration noise's standard deviation, as a fraction of the action's half ` +
      "range, is a number >= 0 (0.1 by default; 0 acts with the deterministic actor)",
  );
}
const described = await (await get("/policy")).json();
const algorithm = described.agent.algorithm;
const space = described.agent.action_space;
const fallback = 'use wb.RemoteSession(url, inference="local") from Python, or inference="server" (POST /act)';
// A recurrent policy: the served ONNX runs its memory, one state input and output (GET /policy's "memory").
const memory = described.recurrent ? described.memory : null;
if (described.recurrent && !memory) {
  refuse(
    `the served policy (${algorithm}) is recurrent but GET /policy does not say how to run its memory ` +
      `("memory"): this server is older than this client; ${fallback}`,
  );
}
// An on-policy policy: the served ONNX is its acting step, the actor's raw output and the value beside the action
// (GET /policy's "acting"): a Discrete space's logits, a Box space's Gaussian mean and its log_std. Older servers
// served a recurrent policy's acting step without "acting": "memory" names its outputs then, a Discrete one's logits.
const acting = described.acting || null;
const distribution = acting ? acting.distribution : memory && space.type === "Discrete" ? "categorical" : null;
if (memory && !distribution) {
  refuse(
    `the served policy (${algorithm}) is recurrent with ${spaceText(space)} actions but GET /policy does not say ` +
      `how to sample them ("acting"): this server is older than this client; ${fallback}`,
  );
}
const SAMPLED = ["categorical", "gaussian"];
if (distribution && !SAMPLED.includes(distribution)) {
  refuse(
    `this client does not support the served policy's actions: ${algorithm} samples a ${distribution} ` +
      `distribution over ${spaceText(space)} actions, and this client samples only categorical (Discrete) and ` +
      `gaussian (Box) policies; ${fallback}`,
  );
}
const sampling = Boolean(distribution);
// Served as its deterministic actor: this client explores around a Discrete one (epsilon-greedy) or an off-policy
// Box one (Gaussian noise); an on-policy learner needs samples of its own distribution, which it did not serve.
if (!sampling && space.type !== "Discrete" && (space.type !== "Box" || described.on_policy)) {
  refuse(
    `this client does not support the served policy's actions: ${algorithm} is served as its deterministic actor ` +
      `over ${spaceText(space)} actions, and this client explores only around a Discrete one (epsilon-greedy: the ` +
      `DQN family) or an off-policy Box one (Gaussian noise: SAC, TD3, DDPG, TQC, CrossQ, DroQ); ${fallback}`,
  );
}
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
    `the served policy's (${algorithm}) steps carry extras this client cannot compute from the ONNX policy ` +
      `(${lacking.join(", ")}); ${fallback}`,
  );
}
// The policy must be one for the env this client acts in: its observations and actions those of --env.
const spec = ENVS[ENV];
if (
  String(described.obs_shape) !== String(spec.obsShape) ||
  described.obs_dtype !== "float32" ||
  !sameSpace(space, spec.actionSpace)
) {
  refuse(
    `the served policy (${algorithm}) is not one for --env ${ENV}: it takes observations of shape ` +
      `[${described.obs_shape}] (${described.obs_dtype}) and acts in ${spaceText(space)}, and ${ENV} gives ` +
      `observations of shape [${spec.obsShape}] (float32) and takes ${spaceText(spec.actionSpace)}; pass the ` +
      `policy's env with --env (${Object.keys(ENVS).join(", ")}), or serve a policy for ${ENV}`,
  );
}
const box = space.type === "Box";
// An off-policy Box actor (SAC, TD3, DDPG, TQC, CrossQ, DroQ): Gaussian noise around it (noisyAction), uniform
// while its learner has taken fewer than learning_starts steps.
const noisy = !sampling && box;
const learningStarts = Number(described.agent.hyperparameters?.learning_starts ?? 0);
const obsSize = described.obs_shape.reduce((a, b) => a * b, 1);
const actionSize = box ? space.shape.reduce((a, b) => a * b, 1) : 1;
const nActions = box ? 0 : space.n;
// A Box action steps the env clipped to the bounds, as the Python client's env_action_converter clips it.
const low = box ? [space.low].flat(Infinity).map(bound) : [];
const high = box ? [space.high].flat(Infinity).map(bound) : [];
const stateSize = memory ? memory.shape.reduce((a, b) => a * b, 1) : 0;
// A batch fits the server's limits: its steps (max_batch_steps) and its bytes (max_body; a GTrXL's state is
// kilobytes a step), with room for the header.
const stepBytes = 8 * obsSize + (box ? 4 * actionSize : 8) + 4 + 2 + 4 + (sampling ? 8 : 0) + 4 * stateSize;
const batchLimit = Math.max(
  1,
  Math.min(BATCH, described.max_batch_steps || BATCH, Math.floor(((described.max_body || 1 << 20) - 65536) / stepBytes)),
);
const client = `node-${Math.random().toString(36).slice(2, 12)}`;
let policy = await loadPolicy(noisy);
const versions = [policy.version];
let seq = 0, accepted = 0, batches = 0, uniform = 0;
let rows = [], episodes = [], episodeReturn = 0, episodeLength = 0;
const env = spec.make();
let obs = env.reset();

async function flush() {
  if (rows.length === 0) return;
  const n = rows.length;
  const stack = (key, size) => {
    const out = new Float32Array(n * size);
    rows.forEach((row, i) => out.set(row[key], i * size));
    return out;
  };
  const actions = box
    ? ["action", "float32", [n, ...space.shape], stack("action", actionSize)] // as drawn: unclipped
    : ["action", "int64", [n], BigInt64Array.from(rows, (r) => BigInt(r.action))];
  const arrays = [
    ["obs", "float32", [n, ...described.obs_shape], stack("obs", obsSize)],
    actions,
    ["reward", "float32", [n], Float32Array.from(rows, (r) => r.reward)],
    ["next_obs", "float32", [n, ...described.obs_shape], stack("nextObs", obsSize)],
    ["terminated", "bool", [n], Uint8Array.from(rows, (r) => (r.terminated ? 1 : 0))],
    ["truncated", "bool", [n], Uint8Array.from(rows, (r) => (r.truncated ? 1 : 0))],
  ];
  // The behaviour's log-probability of each action, where this client knows it. Not for an off-policy Box actor:
  // Gaussian noise clipped to the bounds has a density inside them and a point mass on each bound, no one
  // log-density (the Python client sends the SAC family's squashed-Gaussian log-density, a behaviour this client
  // does not follow, and none for TD3 and DDPG). The server takes a batch without log_prob, and an off-policy
  // learner reads none: replay learns from any behaviour.
  if (!noisy) arrays.push(["log_prob", "float32", [n], Float32Array.from(rows, (r) => r.logProb)]);
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
  } else if (noisy) {
    action = await noisyAction(policy, obs);
    if (policy.warming) uniform += 1;
  } else {
    const best = await greedy(policy, obs, nActions);
    action = Math.random() < EPSILON ? Math.floor(Math.random() * nActions) : best;
    logProb = Math.log((action === best ? 1 - EPSILON : 0) + EPSILON / nActions);
  }
  const envAction = box ? action.map((a, i) => Math.min(Math.max(a, low[i]), high[i])) : action;
  const { obs: nextObs, reward, terminated, truncated } = env.step(envAction);
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
      policy = await loadPolicy(noisy);
      versions.push(policy.version);
    }
  }
}
await flush();
console.log(
  JSON.stringify({
    env: ENV,
    steps: STEPS,
    batches,
    accepted,
    versions,
    sampled: sampling,
    distribution,
    memory: memory ? memory.kind : null,
    noise: noisy ? NOISE : null,
    uniform,
  }),
);
