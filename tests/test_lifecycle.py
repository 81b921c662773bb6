"""The one run lifecycle, tested once for the three run kinds: a Session, a Sweep and a Population
share one control object (``workbench.run.RunControl``) and behave alike: status values and their
transitions, start refused while running, pause/resume/stop, ``wait`` re-raising the run's error,
Ctrl-C (a second one too) and SIGTERM stopping the run before reaching the caller, and the exit hook.
Tiny budgets: a few hundred CartPole steps, or a long budget that the test stops."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import workbench as wb
from workbench.run import registry
from workbench.run.control import STATUSES, RunControl

pytest.importorskip("optuna")

KINDS = ["session", "sweep", "population"]
LONG = 10**7


def _ppo(**hp):
    return wb.PPO(
        "CartPole-v1", **{"n_steps": 16, "batch_size": 16, "n_epochs": 1, "net_arch": (8,), "n_envs": 1, **hp}
    )


def _dqn(eps: float = 1.0):
    return wb.DQN("CartPole-v1", learning_starts=0, train_freq=10**6, exploration=wb.EpsilonGreedy(eps, eps, 0.1))


class Run:
    """One run of ``kind`` behind the same few calls: ``start``/``run`` with its budget, ``progressed``."""

    def __init__(self, kind: str, tmp_path, steps: int, stop_when=None) -> None:
        self.kind, self.steps = kind, steps
        kwargs = {} if stop_when is None else {"stop_when": stop_when}
        if kind == "session":
            self.obj = wb.Session(_ppo(), seed=0, **kwargs)
        elif kind == "sweep":
            self.obj = wb.Sweep(
                _dqn,
                "CartPole-v1",
                {"eps": [1.0, 0.5]},
                trials=1,
                steps=steps,
                prune=False,
                metric="episode_reward",
                report_every=100,
                storage=tmp_path / "s.db",
                session_kwargs=kwargs,
            )
        else:
            self.obj = wb.pbt(
                _ppo,
                "CartPole-v1",
                population=2,
                space={"learning_rate": (1e-4, 1e-3)},
                steps=steps,
                interval=min(steps, 10**5),
                metric="episode_reward",
                directory=tmp_path / "p",
                start=False,
                session_kwargs=kwargs,
            )

    def start(self):
        return self.obj.start(self.steps) if self.kind == "session" else self.obj.start()

    def run(self):
        return self.obj.run(self.steps) if self.kind == "session" else self.obj.run()

    def trained(self) -> int:
        """Env steps trained so far, by the run's sessions."""
        if self.kind == "session":
            return self.obj.steps
        if self.kind == "sweep":
            return sum(r.steps for r in self.obj.results())
        return sum(s.steps for s in self.obj.members)

    def progressed(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.trained() < 20:
            assert time.monotonic() < deadline, f"the {self.kind} did not train"
            assert self.obj.status == "running", (self.obj.status, self.obj.error)
            time.sleep(0.02)


def _boom(session):
    raise ValueError("boom from stop_when")


@pytest.mark.parametrize("kind", KINDS)
def test_the_three_run_kinds_share_one_lifecycle_object(kind, tmp_path):
    run = Run(kind, tmp_path, 64)
    assert type(run.obj.run_control) is RunControl
    assert run.obj.run_control.kind == kind
    assert run.obj.status == "idle" and not run.obj.is_alive


@pytest.mark.parametrize("kind", KINDS)
def test_status_goes_from_running_to_paused_and_back_then_stopped(kind, tmp_path):
    run = Run(kind, tmp_path, LONG)
    obj = run.obj
    seen = [obj.status]
    assert run.start() is obj
    try:
        run.progressed()
        seen.append(obj.status)
        with pytest.raises(RuntimeError, match=f"this {kind} is already running"):
            run.start()
        obj.pause()
        seen.append(obj.status)
        assert obj.is_alive
        obj.pause()  # a second pause changes nothing
        assert obj.status == "paused"
        with pytest.raises(RuntimeError, match=f"this {kind} is already paused"):
            run.start()
        obj.resume()
        seen.append(obj.status)
        obj.resume()  # so does a second resume
    finally:
        obj.stop()
    seen.append(obj.status)
    assert seen == ["idle", "running", "paused", "running", "stopped"]
    assert not obj.is_alive and set(seen) <= set(STATUSES)
    assert obj.wait(timeout=1) is True and obj.error is None
    obj.stop()  # stopping a stopped run changes nothing
    obj.resume()
    obj.pause()
    assert obj.status == "stopped"


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_finishes_its_budget_and_can_go_on(kind, tmp_path):
    run = Run(kind, tmp_path, 64)
    assert run.run() is run.obj
    assert run.obj.status == "finished" and not run.obj.is_alive
    assert run.obj.wait() is True and run.obj.wait(timeout=0) is True


@pytest.mark.parametrize("kind", KINDS)
def test_wait_re_raises_the_runs_error_and_the_status_is_failed(kind, tmp_path):
    run = Run(kind, tmp_path, 400, stop_when=_boom)
    run.start()
    with pytest.raises(Exception, match="boom from stop_when") as info:
        run.obj.wait()
    assert info.value is run.obj.error
    assert run.obj.status == "failed" and not run.obj.is_alive
    with pytest.raises(Exception, match="boom from stop_when"):
        run.obj.wait()  # every later wait says it again


@pytest.mark.parametrize("kind", KINDS)
def test_wait_with_a_timeout_returns_false_while_the_run_goes_on(kind, tmp_path):
    run = Run(kind, tmp_path, LONG)
    run.start()
    try:
        assert run.obj.wait(timeout=0.05) is False
        assert run.obj.status == "running"
    finally:
        run.obj.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_in_wait_stops_the_run_before_reaching_the_caller_even_a_second_one(kind, tmp_path, monkeypatch):
    run = Run(kind, tmp_path, LONG)
    control = run.obj.run_control
    interrupts = []
    real_wait, real_wait_ended = RunControl.wait_until_ended, RunControl.wait_ended

    def wait_until_ended(self, timeout=None):
        if self is control and not interrupts:
            run.progressed()
            interrupts.append("in wait")
            raise KeyboardInterrupt  # as Ctrl-C lands in the main thread's wait
        return real_wait(self, timeout)

    def wait_ended(self, timeout):
        if self is control and interrupts == ["in wait"]:
            interrupts.append("while stopping")
            raise KeyboardInterrupt  # a second Ctrl-C while the stop joins the run's thread
        return real_wait_ended(self, timeout)

    monkeypatch.setattr(RunControl, "wait_until_ended", wait_until_ended)
    monkeypatch.setattr(RunControl, "wait_ended", wait_ended)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert interrupts == ["in wait", "while stopping"]
    assert run.obj.status == "stopped" and not run.obj.is_alive
    assert control.stop_reason == "interrupted"


@pytest.mark.parametrize("kind", KINDS)
def test_sigterm_in_wait_stops_the_run_and_exits_143(kind, tmp_path):
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        pytest.skip("needs the main thread and SIGTERM's default handler (the wait installs its own)")
    run = Run(kind, tmp_path, LONG)
    run.start()
    run.progressed()

    def send():
        # Only once the wait has put its handler in: SIGTERM's default would end the test process.
        deadline = time.monotonic() + 30
        while signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    with pytest.raises(SystemExit) as info:
        run.obj.wait()
    sender.join(5)
    assert info.value.code == 128 + signal.SIGTERM
    assert run.obj.status == "stopped" and not run.obj.is_alive
    assert run.obj.run_control.stop_reason == "terminated"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # put back


@pytest.mark.parametrize("kind", KINDS)
def test_the_exit_hook_stops_a_live_run(kind, tmp_path, capsys):
    run = Run(kind, tmp_path, LONG)
    run.start()
    run.progressed()
    assert any(r is run.obj for r in registry.live_runs())
    assert (run.obj in registry.sessions()) == (kind == "session")  # wb.sessions() lists sessions only
    registry.stop_all_at_exit(timeout=60)
    assert run.obj.status == "stopped" and not run.obj.is_alive
    assert f"workbench: at exit, stopped {run.obj!r}" in capsys.readouterr().err
