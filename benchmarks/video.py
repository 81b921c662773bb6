"""Does writing evaluation videos slow training? (issue 36: a slow encoder at most 2%.)

The same PPO CartPole run (``video_every``, 10 videos of up to 3 s) trains with three encoders,
interleaved round by round (each going first in turn) so machine noise hits all alike:

* ``instant``: writes an empty file at once (the baseline: rendering and evaluation cost the same);
* ``slow``: sleeps ``--slow-s`` seconds per video before writing (an encoder far slower than the
  videos come: the writer falls behind, and its backlog drops clips rather than wait);
* ``ffmpeg``: the real encoder (H.264 MP4 through imageio-ffmpeg's ffmpeg, a separate process).

It prints the median wall time of each, the slowdown against ``instant``, and the share of the run the
training thread spent handing clips to the writer (the only encoding work on that thread; on a shared,
noisy machine the wall times of equal runs vary by more than the 2% asked for, this share does not). Only the training
thread's time is measured (``session.run`` returns when training ends; videos still being written
are waited for afterwards, outside the timing).

    python benchmarks/video.py                 # 5 rounds
    python benchmarks/video.py --rounds 3 --steps 20000

Not part of the test suite: speed is measured here, not asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import workbench as wb
from workbench.video import VideoWriter, encode_video

HANDOFFS: list[float] = []  # per run: the share of its wall time the training thread spent in submit


def _instant(frames, path, fps):
    with open(path, "wb") as f:
        f.write(b"")


def _slow(seconds: float):
    def encoder(frames, path, fps):
        time.sleep(seconds)
        _instant(frames, path, fps)

    return encoder


HANDOFF = [0.0]  # seconds the training thread spent handing clips to the writer (VideoWriter.submit)


def _timed_submit(submit):
    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return submit(self, *args, **kwargs)
        finally:
            HANDOFF[0] += time.perf_counter() - t0

    return timed


VideoWriter.submit = _timed_submit(VideoWriter.submit)  # counted, not changed


def run(encoder, steps: int, every: int, folder: str) -> tuple[float, int, int]:
    agent = wb.PPO("CartPole-v1", seed=0)
    session = wb.Session(
        agent,
        "CartPole-v1",
        seed=0,
        eval_episodes=1,
        video_every=every,
        checkpoint_dir=folder,
        video_options={"max_seconds": 3.0},
    )
    session._ctx.videos.encoder = encoder  # the benchmark's encoder (a hook for measuring, not an API)
    HANDOFF[0] = 0.0
    t0 = time.perf_counter()
    session.run(steps=steps)
    wall = time.perf_counter() - t0
    HANDOFFS.append(HANDOFF[0] / wall)
    session.videos.wait(120)
    return wall, len(session.videos), session.videos.dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--videos", type=int, default=10)
    parser.add_argument("--slow-s", type=float, default=3.0, help="seconds the slow encoder takes per video")
    args = parser.parse_args()
    encoders = {"instant": _instant, "slow": _slow(args.slow_s), "ffmpeg": encode_video}
    walls: dict[str, list[float]] = {name: [] for name in encoders}
    every = args.steps // args.videos
    with tempfile.TemporaryDirectory() as tmp:
        names = list(encoders)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:  # each encoder goes first in turn
                encoder = encoders[name]
                wall, written, dropped = run(encoder, args.steps, every, os.path.join(tmp, f"{name}-{r}"))
                walls[name].append(wall)
                print(f"round {r + 1} {name:8s} {wall:6.2f} s  videos written {written}, dropped {dropped}")
    base = statistics.median(walls["instant"])
    print(f"\n{args.steps} steps of PPO CartPole, a video every {every} steps, {args.rounds} rounds")
    print("  encoder  median wall   against instant (medians)   (median of the rounds' ratios)")
    for name, values in walls.items():
        median = statistics.median(values)
        paired = statistics.median(v / b for v, b in zip(values, walls["instant"]))
        print(f"  {name:8s} {median:8.2f} s   {100 * (median / base - 1):+6.1f}%{'':20s}{100 * (paired - 1):+6.1f}%")
    print(
        f"the training thread's time in VideoWriter.submit (the hand-over to the writer thread): at most "
        f"{100 * max(HANDOFFS):.4f}% of a run's wall time"
    )


if __name__ == "__main__":
    main()
