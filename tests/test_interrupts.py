"""Ctrl-C and SIGTERM while a session trains: the run is stopped and its thread joined before the
interrupt reaches the caller, a script that does not catch it exits as Python does, and the last
periodic checkpoint stays loadable (issue 32, case 1). The same in process, for sessions, sweeps and
populations alike (a second Ctrl-C too): tests/test_lifecycle.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import workbench as wb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import os, signal, sys, threading, time
# Ctrl-C as in a terminal, whatever the test process left its children: an ignored SIGINT is inherited
# across exec, and Python then installs no KeyboardInterrupt handler of its own.
signal.signal(signal.SIGINT, signal.default_int_handler)
import workbench as wb

agent = wb.PPO("CartPole-v1", n_envs=1, n_steps=16, batch_size=16, n_epochs=1)
session = wb.Session(agent, seed=0, checkpoint_every=64, checkpoint_dir={checkpoints!r})

def send():
    while session.steps < 300:
        time.sleep(0.005)
    print("TRAINING", flush=True)
    if {self_signal!r}:
        os.kill(os.getpid(), signal.{signal_name})

threading.Thread(target=send, daemon=True).start()
try:
    {call}
finally:
    print("STATUS", session.status, session.stop_reason, session.is_alive, flush=True)
"""


def _run(tmp_path, call: str, signal_name: str, self_signal: bool = True) -> subprocess.CompletedProcess:
    script = SCRIPT.format(
        checkpoints=str(tmp_path / "ck"), self_signal=self_signal, signal_name=signal_name, call=call
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if self_signal:
        return subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("TRAINING"), (line, proc.stderr.read() if proc.stderr else "")
    proc.send_signal(getattr(signal, signal_name))
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, line + out, err)


@pytest.mark.slow
@pytest.mark.parametrize("call", ["session.run(10_000_000)", "session.start(10_000_000); session.wait()"])
def test_ctrl_c_stops_the_run_before_reaching_the_caller_and_the_script_exits_as_on_ctrl_c(tmp_path, call):
    done = _run(tmp_path, call, "SIGINT")
    assert "terminate called" not in done.stderr, done.stderr
    assert done.returncode in (-signal.SIGINT, 130), (done.returncode, done.stderr[-2000:])
    assert "KeyboardInterrupt" in done.stderr
    assert "STATUS stopped interrupted False" in done.stdout, done.stdout
    agent = wb.load(tmp_path / "ck" / "latest")  # the last periodic checkpoint loads
    assert agent.num_timesteps >= 64


@pytest.mark.slow
def test_sigterm_stops_the_run_and_the_exit_code_says_so(tmp_path):
    done = _run(tmp_path, "session.run(10_000_000)", "SIGTERM", self_signal=False)
    assert "terminate called" not in done.stderr, done.stderr
    assert done.returncode == 128 + signal.SIGTERM, (done.returncode, done.stderr[-2000:])
    assert "STATUS stopped terminated False" in done.stdout, done.stdout
    assert wb.load(tmp_path / "ck" / "latest").num_timesteps >= 64
    leftovers = [p for p in (tmp_path / "ck").iterdir() if p.name not in ("latest",)]
    assert not leftovers, leftovers  # no half-written checkpoint beside the last good one


def test_the_sigterm_handler_is_put_back_after_run():
    before = signal.getsignal(signal.SIGTERM)
    session = wb.Session(wb.PPO("CartPole-v1", n_envs=1, n_steps=16, batch_size=16, n_epochs=1), seed=0)
    session.run(32)
    assert signal.getsignal(signal.SIGTERM) is before


RACE = """
import random, signal, sys, threading
from workbench.run.control import RunControl

control = RunControl()
control.ended = threading.Event()  # a run going on: nothing has set it yet
wait = control.ended.wait if sys.argv[1] == "event" else control.wait_ended
random.seed(0)
signal.signal(signal.SIGALRM, signal.default_int_handler)  # raises KeyboardInterrupt, as Ctrl-C does
for _ in range(5000):
    try:
        signal.setitimer(signal.ITIMER_REAL, random.uniform(1e-6, 2e-4))
        while True:
            wait(0.0001)
    except KeyboardInterrupt:
        pass
    assert not control.ended._cond._lock.locked(), "the event's lock was left held"
setter = threading.Thread(target=control.ended.set)  # the training thread's last act
setter.start()
setter.join(5)
assert not setter.is_alive() and control.wait_ended(1.0)
print("ok")
"""


@pytest.mark.slow
def test_ctrl_c_landing_anywhere_in_the_main_threads_wait_leaves_no_lock_held():
    """Thousands of interrupts at random moments of the main thread's wait for a run's end: the wait holds
    no lock a Ctrl-C could leave held (``Event.wait`` does: CPython can raise the interrupt inside it with
    the event's lock taken or its state half-restored, and the training thread's ``ended.set()`` then hangs
    or fails; the script's ``event`` mode shows it)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", RACE, "poll"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-2000:]
