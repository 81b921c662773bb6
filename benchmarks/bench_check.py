"""`make bench-check`: the learning checks, over several seeds, against thresholds recorded here.

The unit tests never train to a score; these rows do. Each row is a short training run that once sat in
``tests/`` as a single-seed test (PPO and DQN on CartPole at their defaults, the zoo presets, A2C with
eight envs, PPO and DQN with four local workers and with four Ray actors, PPO through a gymnasium vector
env, the external session, BCQ on recorded data, DQN with HER on bit flipping). Each row runs over
``--seeds`` seeds, each seed in its own process; the table shows every seed's score and the median, and a
row fails when its median falls below the threshold stored in ``benchmarks/results/bench_check.json``.
Then the reference weight hashes (``benchmarks/weight_hashes.py``) are compared with the stored ones.
Exit status 1 when anything failed.

    python benchmarks/bench_check.py                      # every row, 3 seeds, then the weight hashes
    python benchmarks/bench_check.py --rows bcq-cartpole --seeds 1 --no-hashes
    python benchmarks/bench_check.py --record             # re-record the thresholds and hashes (commit the JSON)
    python benchmarks/bench_check.py --record --hashes-only   # re-record the hashes alone (the rows stay)

How a threshold is recorded: ``--record`` runs the rows (``--rows`` to re-record some only, the others stay)
and stores every seed's score; the threshold is ``RULE`` times the lowest recorded seed score, so a later
median below it is a drop beyond what the recorded seeds spread over. Re-record after a change that is
meant to change learning (say why in the commit), never to make a failing check pass. ``--record`` also
stores the weight hashes.

The weight hashes depend on the torch build and the CPU (which vector instructions its float kernels take),
not only on the code: the same tree gives other hashes on an AVX-512 machine than on an AVX2 one. So they are
stored per machine kind (:func:`machine_kind`), and a check compares with the ones recorded on this kind. On a
kind with none recorded the check cannot tell a change of the code from the machine's: it says so, names the
kinds that have some, and fails; record this machine's with ``--record --hashes-only`` at a commit whose
weights are known good (say the last one that passed elsewhere), then check the change against them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "bench_check.json"
RULE = 0.8  # threshold = RULE x the lowest recorded seed score
PLAY_SEED = 100  # the deterministic evaluation's env seed, the same for every training seed


def _play(agent, env="CartPole-v1", episodes: int = 10) -> float:
    import numpy as np

    return float(np.mean(agent.play(env, episodes=episodes, seed=PLAY_SEED)))


def ppo_cartpole(seed: int) -> float:
    """PPO's defaults (the zoo's CartPole settings), 100k steps: the mean of 10 deterministic episodes."""
    import workbench as wb

    agent = wb.PPO("CartPole-v1", seed=seed)
    wb.Session(agent, "CartPole-v1", seed=seed).run(steps=100_000)
    return _play(agent)


def dqn_cartpole(seed: int) -> float:
    """DQN's defaults (the zoo's CartPole settings), 50k steps."""
    import workbench as wb

    agent = wb.DQN("CartPole-v1", seed=seed)
    wb.Session(agent, "CartPole-v1", seed=seed).run(steps=50_000)
    return _play(agent)


def _preset(algo: str, steps: int, seed: int) -> float:
    import workbench as wb

    agent, env = wb.preset("CartPole-v1", algo, seed=seed)
    wb.Session(agent, env, seed=seed).run(steps=steps)
    return _play(agent)


def ppo_preset_cartpole(seed: int) -> float:
    """``wb.preset("CartPole-v1", "ppo")``, 50k steps."""
    return _preset("ppo", 50_000, seed)


def a2c_preset_cartpole(seed: int) -> float:
    """``wb.preset("CartPole-v1", "a2c")``, 100k steps."""
    return _preset("a2c", 100_000, seed)


def a2c_8envs_cartpole(seed: int) -> float:
    """A2C with eight envs and no entropy bonus, 30k steps."""
    import workbench as wb

    agent = wb.A2C("CartPole-v1", seed=seed, n_envs=8, ent_coef=0.0)
    wb.Session(agent, "CartPole-v1", seed=seed).run(steps=30_000)
    return _play(agent)


def _ppo_on_workers(seed: int, backend: str) -> float:
    """PPO's defaults with four workers of ``backend``, 40k steps."""
    import workbench as wb

    agent = wb.PPO("CartPole-v1", seed=seed)
    wb.Session(agent, _cartpole, num_workers=4, backend=backend, seed=seed).run(40_000)
    return _play(agent)


def _ape_x_dqn(seed: int, backend: str, steps: int, **session: object) -> float:
    """DQN with Ape-X-like settings, four workers of ``backend`` collecting while the learner learns."""
    import workbench as wb

    agent = wb.DQN(
        "CartPole-v1",
        seed=seed,
        net_arch=(64, 64),
        learning_rate=1e-3,
        learning_starts=500,
        train_freq=16,
        gradient_steps=8,
        target_update_interval=250,
        buffer_size=20_000,
        exploration=wb.EpsilonGreedy(1.0, 0.05, 0.25),
    )
    wb.Session(agent, _cartpole, num_workers=4, backend=backend, seed=seed, **session).run(steps)
    return _play(agent)


def ppo_workers_cartpole(seed: int) -> float:
    """PPO's defaults with four local worker processes, 40k steps."""
    return _ppo_on_workers(seed, "local")


def dqn_workers_cartpole(seed: int) -> float:
    """DQN with four local worker processes (Ape-X-like settings), 25k steps."""
    return _ape_x_dqn(seed, "local", 25_000)


def ppo_ray_cartpole(seed: int) -> float:
    """PPO's defaults with four Ray actors (a private local Ray), 40k steps."""
    return _ppo_on_workers(seed, "ray")


def dqn_ray_cartpole(seed: int) -> float:
    """DQN with four Ray actors collecting while the learner learns (Ape-X-like settings), 30k steps."""
    return _ape_x_dqn(seed, "ray", 30_000, sync_every=32)


def _cartpole():
    """A worker's env factory (module level, so that a worker process can import it)."""
    import gymnasium as gym

    return gym.make("CartPole-v1")


def ppo_vector_env_cartpole(seed: int) -> float:
    """PPO's defaults stepping a gymnasium sync vector env of 8 CartPoles, 50k steps."""
    import gymnasium as gym

    import workbench as wb

    venv = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync")
    agent = wb.PPO(venv, seed=seed)
    wb.Session(agent, venv, seed=seed).run(steps=50_000)
    return _play(agent)


def dqn_external_cartpole(seed: int) -> float:
    """DQN's defaults in an external session (the script steps the env, ``max_lag=0``), 12k steps."""
    import gymnasium as gym

    import workbench as wb

    budget = 12_000
    session = wb.Session.external(wb.DQN("CartPole-v1", seed=seed), seed=seed, max_lag=0)
    session.start(steps=budget)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    while session.status in ("idle", "running", "paused"):
        action = session.act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        session.feedback(reward, next_obs, terminated, truncated)
        obs = env.reset()[0] if terminated or truncated else next_obs
    session.wait(timeout=300)
    if session.steps != budget:
        raise RuntimeError(f"the external session ended at {session.steps} steps, not {budget}")
    return _play(session.agent)


def bcq_cartpole(seed: int) -> float:
    """BCQ on 15k steps a DQN recorded while learning, 3k updates: its return over the data's mean return."""
    import tempfile

    import numpy as np

    import workbench as wb

    with tempfile.TemporaryDirectory() as tmp:
        behaviour = wb.DQN("CartPole-v1", learning_starts=500, seed=seed)
        wb.Session(behaviour, "CartPole-v1", seed=seed, record=Path(tmp) / "data").run(steps=15_000)
        data = wb.Dataset.load(Path(tmp) / "data")
        agent = wb.BCQ(dataset=data, seed=seed)
        wb.Session(agent, dataset=data, seed=seed).run(steps=3000)
        return _play(agent) / float(np.mean(data.episode_returns()))


def dqn_her_bitflip(seed: int) -> float:
    """DQN with HER on 4-bit flipping, 600 steps: the share of 20 episodes solved before the time limit."""
    import numpy as np

    import workbench as wb
    from workbench.envs.goals import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4)
    agent = wb.DQN(
        env,
        replay=wb.HerReplay(strategy="future", n_sampled_goal=4),
        learning_starts=64,
        train_freq=4,
        gradient_steps=4,
        batch_size=32,
        learning_rate=2e-3,
        net_arch=(32,),
        target_update_interval=100,
        buffer_size=5000,
        exploration=wb.EpsilonGreedy(1.0, 0.05, 0.3),
        gamma=0.9,
        seed=seed,
    )
    wb.Session(agent, env, seed=seed).run(steps=600)
    returns = agent.play(env, episodes=20, seed=PLAY_SEED)
    return float(np.mean([r > -4 for r in returns]))  # -4: four steps, cut by the time limit


ROWS: dict[str, Callable[[int], float]] = {
    "ppo-cartpole": ppo_cartpole,
    "dqn-cartpole": dqn_cartpole,
    "ppo-preset-cartpole": ppo_preset_cartpole,
    "a2c-preset-cartpole": a2c_preset_cartpole,
    "a2c-8envs-cartpole": a2c_8envs_cartpole,
    "ppo-workers-cartpole": ppo_workers_cartpole,
    "dqn-workers-cartpole": dqn_workers_cartpole,
    "ppo-ray-cartpole": ppo_ray_cartpole,
    "dqn-ray-cartpole": dqn_ray_cartpole,
    "ppo-vector-env-cartpole": ppo_vector_env_cartpole,
    "dqn-external-cartpole": dqn_external_cartpole,
    "bcq-cartpole": bcq_cartpole,
    "dqn-her-bitflip": dqn_her_bitflip,
}


def run_one(row: str, seed: int) -> None:
    """Child process: train one row at one seed and print its result as the last line (JSON)."""
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    score = ROWS[row](seed)
    print(json.dumps({"row": row, "seed": seed, "score": score, "wall_s": time.perf_counter() - start}))


def spawn(row: str, seed: int, timeout: float) -> dict:
    """Run one (row, seed) in its own Python process; a crash or a timeout is a failed seed, not a crash here."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-one", row, "--seed", str(seed)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"row": row, "seed": seed, "error": f"timed out after {timeout:.0f} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"row": row, "seed": seed, "error": f"exit {out.returncode}: {tail}"}
    return json.loads(lines[-1])


def load_stored(path: Path) -> dict:
    """The stored thresholds and hashes, or an empty record when none were recorded yet."""
    if path.exists():
        return json.loads(path.read_text())
    return {"rows": {}, "weight_hashes_by_machine": {}}


FLOAT_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
"""The CPU features that choose which float kernels torch runs, so which bits its sums end with."""

LEGACY_KIND = "recorded before machine kinds were kept"
"""The kind under which hashes stored as one flat ``weight_hashes`` table (before 2026-12-07) are read."""


def machine_kind(cpuinfo: str | None = None) -> str:
    """What the weight hashes depend on besides the code: the CPU's model, the float features of
    :data:`FLOAT_FLAGS` it has, and the torch build. ``cpuinfo``: /proc/cpuinfo's text (read when None)."""
    import torch

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    present = [f for f in FLOAT_FLAGS if f in flags]
    return f"{model} [{' '.join(present) or 'no listed float features'}] torch {torch.__version__}"


def hash_sets(stored: dict) -> dict[str, dict[str, str]]:
    """Every recorded hash set by machine kind (a flat table from before kinds were kept under :data:`LEGACY_KIND`)."""
    sets = {kind: entry["hashes"] for kind, entry in stored.get("weight_hashes_by_machine", {}).items()}
    if stored.get("weight_hashes"):
        sets.setdefault(LEGACY_KIND, stored["weight_hashes"])
    return sets


def compare_hashes(stored: dict, hashes: dict[str, str], kind: str) -> tuple[bool, str]:
    """Whether ``hashes`` pass against the set recorded on ``kind``, and the line that says so. With no set
    recorded on this kind: a pass only when they equal a set recorded on another kind, else a failure naming
    the kinds that have one and how to record this one."""
    sets = hash_sets(stored)
    if kind in sets:
        reference = sets[kind]
        moved = sorted(n for n in hashes if reference.get(n) != hashes[n])
        if moved:
            return False, (
                f"weight hashes: FAIL, {len(moved)} of {len(hashes)} differ from those recorded on this machine "
                f"kind ({kind}): {', '.join(moved)}"
            )
        return True, f"weight hashes: ok, {len(hashes)} equal those recorded on this machine kind ({kind})"
    for other, reference in sets.items():
        if all(reference.get(n) == h for n, h in hashes.items()):
            return True, f"weight hashes: ok, {len(hashes)} equal those recorded on {other}"
    differ = {other: sum(reference.get(n) != h for n, h in hashes.items()) for other, reference in sets.items()}
    known = "; ".join(f"{other}: {count} of {len(hashes)} differ" for other, count in differ.items()) or "none"
    return False, (
        f"weight hashes: NOT CHECKED, none recorded on this machine kind ({kind}); the recorded kinds: {known}. "
        "Record this machine's with --record --hashes-only at a commit whose weights are known good, then "
        "check the change against them"
    )


def record_hashes(stored: dict, hashes: dict[str, str], kind: str, recorded: dict) -> None:
    """Store ``hashes`` as this machine kind's set (the other kinds' sets stay as they were)."""
    stored.setdefault("weight_hashes_by_machine", {})[kind] = {"hashes": dict(hashes), "recorded": recorded}


def run_hashes() -> dict[str, str]:
    """Run benchmarks/weight_hashes.py in its own process: {setup name: sha256}."""
    script = ROOT / "benchmarks" / "weight_hashes.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, check=True)
    hashes = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            hashes[parts[0]] = parts[1]
    return hashes


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run the rows (and the hashes), print the table, and return the exit status (1: a check failed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="", help=f"comma-separated rows (default: all): {', '.join(ROWS)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per row, 0..N-1 (default 3)")
    parser.add_argument("--record", action="store_true", help="store the scores as the new thresholds and hashes")
    parser.add_argument("--no-hashes", action="store_true", help="skip the reference weight hashes")
    parser.add_argument("--hashes-only", action="store_true", help="no rows: the reference weight hashes alone")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the stored thresholds (JSON)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed per (row, seed) process")
    parser.add_argument("--run-one", metavar="ROW", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        run_one(args.run_one, args.seed)
        return 0
    rows = [] if args.hashes_only else [r for r in args.rows.split(",") if r] or list(ROWS)
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown row(s) {', '.join(unknown)}; the rows are: {', '.join(ROWS)}")
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    stored = load_stored(args.results)
    failed = False

    print(f"{'row':26s} {'scores (seed 0..)':34s} {'median':>8s} {'threshold':>9s} {'wall s':>7s}  result")
    for row in rows:
        results = [spawn(row, seed, args.timeout) for seed in range(args.seeds)]
        errors = [r["error"] for r in results if "error" in r]
        scores = [r["score"] for r in results if "score" in r]
        walls = [r["wall_s"] for r in results if "wall_s" in r]
        median = statistics.median(scores) if scores else float("nan")
        threshold = stored["rows"].get(row, {}).get("threshold")
        if errors:
            verdict, failed = "FAIL: " + "; ".join(errors), True
        elif args.record:
            verdict = "recorded"
            stored["rows"][row] = {
                "scores": scores,
                "median": median,
                "threshold": round(RULE * min(scores), 4),
                "doc": (ROWS[row].__doc__ or "").strip(),
                # Per row: a partial --record (--rows) leaves the other rows' records as they were.
                "recorded": {"date": datetime.date.today().isoformat(), "commit": _commit()},
            }
        elif threshold is None:
            verdict, failed = "FAIL: no threshold recorded (run with --record)", True
        elif median < threshold:
            verdict, failed = "FAIL: median below the threshold", True
        else:
            verdict = "ok"
        shown = " ".join(f"{s:.3g}" for s in scores)
        thr = "-" if threshold is None else f"{threshold:.3g}"
        wall = statistics.median(walls) if walls else float("nan")
        print(f"{row:26s} {shown:34s} {median:8.3g} {thr:>9s} {wall:7.1f}  {verdict}", flush=True)

    import torch

    recorded = {
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "seeds": args.seeds,
    }
    if not args.no_hashes:
        hashes, kind = run_hashes(), machine_kind()
        if args.record:
            record_hashes(stored, hashes, kind, recorded)
            print(f"weight hashes: {len(hashes)} recorded for this machine kind ({kind})")
        else:
            ok, line = compare_hashes(stored, hashes, kind)
            failed = failed or not ok
            print(line)

    if args.record:
        stored["rule"] = f"threshold = {RULE} x the lowest recorded seed score; a row fails when its median is below"
        if not args.hashes_only:
            stored["recorded"] = recorded
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.results}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
