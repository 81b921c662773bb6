"""What an open dashboard costs training: env steps per second with a live dashboard versus without.

Each repeat trains a fresh agent on CartPole-v1 for the same budget, once without a dashboard and
once with one refreshing at its fastest rate (4 times a second; no browser is attached, so the
widgets build and send their updates to nowhere, which is the kernel-side cost). The order
alternates between repeats so drifting machine load hits both alike.

Prints, for each agent, the median steps per second without and with the dashboard by wall clock
and by CPU time (all threads of this process: training plus the dashboard's refreshes), and the CPU
share the refreshes themselves took. On a quiet machine the wall-clock and CPU-time overheads agree;
on a shared one, other processes move the wall clock by more than the 5% being measured (the spread
printed beside it says by how much), so the pass/fail verdict and the exit status (1 when over 5%)
use the CPU-time overhead, which other processes do not inflate.

    python benchmarks/dashboard_overhead.py                      # PPO and DQN, 5 repeats each
    python benchmarks/dashboard_overhead.py --agents dqn --repeats 3 --steps 20000

Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import workbench as wb

STEPS = {"ppo": 40_000, "dqn": 15_000}
LIMIT = 0.05  # the most steps/second the dashboard may cost


class _TimedDashboard(wb.Dashboard):
    """A dashboard that adds up the CPU time its refreshes take (in whichever thread runs them)."""

    refresh_cpu = 0.0

    def refresh(self) -> None:
        start = time.thread_time()
        super().refresh()
        self.refresh_cpu += time.thread_time() - start


def steps_per_second(algo: str, steps: int, seed: int, dashboard: bool, interval: float) -> tuple[float, float, float]:
    """Train one fresh agent; returns (steps per wall second, steps per CPU second, refresh share).

    CPU time counts every thread of this process, the dashboard's included, and not other
    processes, so it shows the dashboard's cost even on a machine others are loading. The refresh
    share is the CPU time the dashboard's refreshes took, as a fraction of the run's wall time.
    """
    cls = {"ppo": wb.PPO, "dqn": wb.DQN}[algo]
    session = wb.Session(cls("CartPole-v1", seed=seed), "CartPole-v1", seed=seed)
    dash = _TimedDashboard(session, interval=interval) if dashboard else None
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        session.run(steps=steps)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        share = dash.refresh_cpu / wall if dash is not None else 0.0
    finally:
        if dash is not None:
            dash.close()
    return session.steps / wall, session.steps / cpu, share


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", nargs="+", default=["ppo", "dqn"], choices=sorted(STEPS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: per agent)")
    parser.add_argument("--interval", type=float, default=0.25, help="dashboard refresh interval in seconds")
    args = parser.parse_args(argv)

    failed = False
    for algo in args.agents:
        steps = args.steps or STEPS[algo]
        steps_per_second(algo, min(steps, 2_000), 0, True, args.interval)  # warm-up: first-use costs
        without, with_dash, shares = [], [], []
        cpu_without, cpu_with = [], []
        for repeat in range(args.repeats):
            # Alternate which goes first so slow drift in machine load does not favour either.
            for dashboard in (False, True) if repeat % 2 == 0 else (True, False):
                sps, cpu_sps, share = steps_per_second(algo, steps, repeat, dashboard, args.interval)
                (with_dash if dashboard else without).append(sps)
                (cpu_with if dashboard else cpu_without).append(cpu_sps)
                if dashboard:
                    shares.append(share)
            print(
                f"{algo} repeat {repeat + 1}: without {without[-1]:7,.0f} steps/s ({cpu_without[-1]:7,.0f}/CPU s)   "
                f"with dashboard {with_dash[-1]:7,.0f} steps/s ({cpu_with[-1]:7,.0f}/CPU s; "
                f"refreshes took {shares[-1]:.2%} of a core)",
                flush=True,
            )
        base, dash = statistics.median(without), statistics.median(with_dash)
        overhead = 1 - dash / base
        paired = 1 - statistics.median(w / o for w, o in zip(with_dash, without))  # runs next to each other
        spread = (max(without) - min(without)) / base  # how much the same run varies: machine noise
        cpu_base, cpu_dash = statistics.median(cpu_without), statistics.median(cpu_with)
        cpu_overhead = 1 - cpu_dash / cpu_base
        verdict = "ok" if cpu_overhead <= LIMIT else "OVER"
        print(
            f"{algo}: {steps:,} steps x {args.repeats} repeats, dashboard at {1 / args.interval:g} refreshes/s\n"
            f"  wall clock: median without {base:,.0f} steps/s, with {dash:,.0f} steps/s: overhead {overhead:+.1%} "
            f"(paired median {paired:+.1%}; runs without a dashboard spread {spread:.0%}: machine noise)\n"
            f"  CPU time:   median without {cpu_base:,.0f} steps/CPU s, with {cpu_dash:,.0f} steps/CPU s: "
            f"overhead {cpu_overhead:+.1%} -> {verdict} (limit {LIMIT:.0%})\n"
            f"  refreshes:  median {statistics.median(shares):.2%} of one core while training\n",
            flush=True,
        )
        failed |= cpu_overhead > LIMIT
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
