"""The loops behind one interface: ``run(ctx, target_steps) -> end reason``.

* :class:`EnvLoop`: the session steps its envs through a runner (``workbench.parallel``) and the
  agent learns from every batch (``agent.observe``, ``ready``, ``update``).
* :class:`ExternalLoop`: the same loop over the application's envs (``Session.external``): its
  runner waits for the application's ``feedback`` and counts its episodes.
* :class:`OfflineLoop`: each step is one gradient step of an offline agent on its dataset
  (``wb.Session(agent, dataset=ds)``); ``stop_when`` is asked after evaluations and estimates.

A loop reaches its run only through ``ctx`` (:class:`workbench.run.context.RunContext`): its ``state``,
``between_steps``, ``update_once``, ``after_step``, ``ask_stop_when`` and the runner it holds.
The end reason is ``"finished"`` (the budget was reached, or ``stop_when`` said so) or ``"stopped"``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ..envs.atari import GAME_END_KEY
from ..envs.core import SUCCESS_KEY
from ..loop import EpisodeTracker
from ..parallel import Runner, make_runner
from ..validation import LossWatch, check_env_batch

__all__ = ["FEEDBACK_WAIT_S", "SUCCESS_WINDOW", "EnvLoop", "ExternalLoop", "Loop", "OfflineLoop"]

SUCCESS_WINDOW = 100
"""``success_rate`` is the share of successes among this many last episodes that reported one (SB3's)."""

FEEDBACK_WAIT_S = 0.05
"""An external session's loop checks pause and stop this often while it waits for feedback."""


class Loop:
    """What every loop gives its session: :meth:`run`, how its runner is built, and what it does
    when a run starts and ends."""

    external = False
    """True for a loop over the application's envs (saved with a run: ``Session.reopen`` says how to reopen it)."""

    def run(self, ctx: Any, target_steps: int) -> str:
        """Train until ``target_steps`` (``ctx.steps``); ``"finished"`` or ``"stopped"``."""
        raise NotImplementedError

    def build_runner(self, ctx: Any) -> Runner:
        """The runner stepping the session's envs (``call_env`` builds one before a run too)."""
        s = ctx.state
        seed = s.seed
        if ctx.counters.resumed_from_disk and seed is not None:
            # A resumed run must not replay its first episodes: envs whose random streams were
            # saved continue them; the others get seeds derived from the step count.
            seed = int(np.random.SeedSequence([seed, s.steps]).generate_state(1)[0])
        return make_runner(
            s.env_source,
            s.agent.num_envs,
            seed=seed,
            num_workers=s.num_workers,
            backend=s.backend,
            agent=s.agent,
            **s.backend_options,
        )

    def run_started(self) -> None:
        """A run starts (called under the control lock, before the thread can end)."""

    def run_ended(self) -> None:
        """The run has ended (under the control lock)."""

    def external_runner(self, call: str) -> Any:
        """The application's runner of an external session; a ``RuntimeError`` naming ``call`` otherwise."""
        raise RuntimeError(
            f"{call}() is for sessions driven by the application: build one with "
            "wb.Session.external(agent); this session steps its own env"
        )

    def no_eval_env(self) -> str:
        """Why ``evaluate()`` has no env to play on, for a session whose env cannot be copied."""
        return (
            "evaluate() needs eval_env= when the session's env is an instance, which it cannot copy to play "
            "on: pass eval_env= (an env instance, a registered id or a zero-argument factory) to the Session"
        )


class EnvLoop(Loop):
    """Env steps through the session's runner; the agent learns from each batch."""

    def run(self, ctx: Any, target_steps: int) -> str:
        recorder = ctx.state.recorder
        try:
            return self._run(ctx, target_steps)
        finally:
            if recorder is not None:
                recorder.write()

    def _run(self, ctx: Any, target_steps: int) -> str:
        state, agent = ctx.state, ctx.state.agent
        ctx.begin()
        runner, obs, episodes = ctx.prepare_runner()
        agent.train()
        # Schedules count against the furthest target planned so far: a run stopped (or saved)
        # and continued to its planned end follows an uninterrupted run's schedule exactly.
        agent.total_timesteps = max(target_steps, agent.total_timesteps or 0)
        record = state.signals.record
        recorder = state.recorder
        # Worker backends name the worker an episode ran in.
        per_worker = runner.envs_per_worker
        # What the envs return and what the updates return are checked on every batch (cheaply):
        # a NaN fails the run naming its source instead of silently breaking the weights.
        check_env_batch(state.steps, obs)
        losses = LossWatch(agent.algorithm)
        ended = "finished"

        while state.steps < target_steps:
            if ctx.between_steps():
                ended = "stopped"
                break
            if not runner.wait_ready(FEEDBACK_WAIT_S):
                continue  # an external session with no transition in every slot yet: check pause and stop again

            # The one step function (workbench.loop.env_step), here or in the runner's workers.
            with ctx.control.inside("env.step"):
                transitions, obs = runner.transitions(agent, obs)
            if ctx.control.abandoned:
                break  # given up while this step hung: nothing more is learned or counted
            t = transitions
            check_env_batch(state.steps, obs, t.rewards, t.next_obs, t.terminated, t.truncated)
            if recorder is not None:
                recorder.add(transitions)
            agent.observe(transitions)
            ctx.obs = obs

            finished = runner.ended_episodes()
            if finished is None:
                if GAME_END_KEY in t.extras:  # Atari training: whole games' raw scores (workbench.envs.atari)
                    finished = EpisodeTracker.games(t.extras[GAME_END_KEY])
                else:
                    finished = episodes.add(t.rewards, t.terminated | t.truncated)
            if finished:
                now = state.elapsed
                for episode in finished:
                    state.episodes += 1
                    record("episode_reward", state.steps, episode.reward, now)
                    record("episode_length", state.steps, float(episode.length), now)
                    if per_worker:
                        record(f"worker_{episode.env // per_worker}/episode_reward", state.steps, episode.reward, now)
                if ctx.ask_stop_when():
                    # The data of this step is learned from as an uninterrupted run would (a full
                    # PPO rollout at the cut is not dropped: a resumed run then does the same updates).
                    if agent.ready():
                        ctx.update_once(losses)
                    break

            successes = t.extras.get(SUCCESS_KEY)
            if successes is not None:  # goal envs: info["is_success"] of the episodes that ended
                self._record_successes(state, successes)

            for name, value in runner.drain_signals():
                record(name, state.steps, value, state.elapsed)

            if agent.ready():
                ctx.update_once(losses)
            ctx.after_step()  # the env loop asks stop_when after episodes, not after evaluations

        ctx.rate.tick(final=True)
        ctx.close_runner()
        return ended

    def _record_successes(self, state: Any, successes: np.ndarray) -> None:
        """Record ``success_rate`` (over the last :data:`SUCCESS_WINDOW` episodes) for each episode that
        ended with ``info["is_success"]`` (the non-NaN entries)."""
        ended = successes[~np.isnan(successes)]
        if not ended.size:
            return
        window = getattr(self, "_successes", None)
        if window is None:
            window = self._successes = deque(maxlen=SUCCESS_WINDOW)  # type: ignore[var-annotated]
        now = state.elapsed
        for value in ended.tolist():
            window.append(value)
            state.signals.record("success_rate", state.steps, float(np.mean(window)), now)


class ExternalLoop(EnvLoop):
    """The env loop over the application's envs (``Session.external``): ``runner`` is its
    :class:`~workbench.parallel.external.ExternalRunner`, built with the session and kept."""

    external = True

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    def build_runner(self, ctx: Any) -> Runner:
        """The application's episodes: nothing to build; its reset is a placeholder."""
        return self.runner

    def run_started(self) -> None:
        """Feedback from now on is learned from."""
        self.runner.run_started()

    def run_ended(self) -> None:
        """Later feedback is not learned from (``Session.feedback``)."""
        self.runner.run_ended()

    def external_runner(self, call: str) -> Any:
        """The application's runner."""
        return self.runner

    def no_eval_env(self) -> str:
        """An external session has no env of its own to copy."""
        return (
            "evaluate() needs an env to play on, and an external session has none (the application owns "
            "it): build the session with Session.external(agent, eval_env=...), where eval_env is an env "
            "instance, a registered id or a zero-argument factory such as `lambda: MyEnv(cfg)`"
        )


class OfflineLoop(Loop):
    """Gradient steps of an offline agent on its dataset until ``target_steps``."""

    def run(self, ctx: Any, target_steps: int) -> str:
        state = ctx.state
        agent = state.agent
        ctx.begin()
        agent.train()
        agent.total_timesteps = max(target_steps, agent.total_timesteps or 0)
        if not agent.ready():
            raise RuntimeError(f"{agent.algorithm} has no dataset to learn from: pass dataset= to the session")
        losses = LossWatch(agent.algorithm)
        ended = "finished"
        while state.steps < target_steps:
            if ctx.between_steps():  # live edits (set), pause and stop, pause and stop as in the env loop
                ended = "stopped"
                break
            ctx.update_once(losses)
            asked = ctx.after_step()  # steps_per_second, evaluation, estimates, checkpoint
            if asked and ctx.ask_stop_when():
                break
        ctx.rate.tick(final=True)  # the rate since the last one, as the env loop records at its end
        return ended

    def no_eval_env(self) -> str:
        """An offline session learns from its dataset and has no env to copy."""
        return (
            "evaluate() needs an env to play on, and an offline session has none (it learns from its dataset): "
            "pass eval_env= (an env instance, a registered id or a zero-argument factory) to the Session"
        )
