"""Acting is fair while a session learns: the agent's lock is handed to waiting threads in the order
they came, so an act waits for the update in progress, not for every update the loop takes next."""

from __future__ import annotations

import threading
import time

import gymnasium as gym

import workbench as wb
from workbench.agents.fairlock import FairRLock


def _wait_for_waiters(lock: FairRLock, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(lock._waiters) < n:
        assert time.monotonic() < deadline, "the other thread never waited for the lock"
        time.sleep(0.001)


def test_a_thread_that_releases_and_takes_the_lock_again_waits_behind_the_waiting_ones():
    lock = FairRLock()
    order: list[str] = []
    lock.acquire()
    lock.acquire()  # reentrant
    waiter = threading.Thread(target=lambda: (lock.acquire(), order.append("act"), lock.release()))
    waiter.start()
    _wait_for_waiters(lock, 1)
    lock.release()
    assert lock._owner == threading.get_ident()  # still held once: nothing handed over yet
    lock.release()
    lock.acquire()  # at once again, as a learning loop does: the waiting thread goes first
    order.append("learner")
    lock.release()
    waiter.join(10)
    assert order == ["act", "learner"]


def test_timeouts_and_non_blocking_acquire():
    lock = FairRLock()
    lock.acquire()
    got: list[bool] = []
    other = threading.Thread(target=lambda: got.extend([lock.acquire(blocking=False), lock.acquire(timeout=0.05)]))
    other.start()
    other.join(10)
    assert got == [False, False] and not lock._waiters  # a timed-out waiter leaves the queue
    lock.release()
    assert not lock.locked()
    try:
        lock.release()
    except RuntimeError as exc:
        assert "does not hold" in str(exc)
    else:
        raise AssertionError("releasing a lock not held must raise")


def test_acts_made_while_a_session_learns_are_served_in_turn():
    env = gym.make("CartPole-v1")
    agent = wb.DQN(
        observation_space=env.observation_space,
        action_space=env.action_space,
        learning_starts=0,
        seed=0,
        net_arch=[16],
    )
    assert isinstance(agent._lock, FairRLock)
    # Hold the agent as an update does, let 4 threads wait to act, then "update" again at once:
    # every waiting act is answered before the second update starts.
    order: list[str] = []
    agent._lock.acquire()
    actors = [
        threading.Thread(target=lambda i=i: (agent.act([0.0, 0.0, 0.0, 0.0]), order.append(f"act{i}")))
        for i in range(4)
    ]
    for i, actor in enumerate(actors):
        actor.start()
        _wait_for_waiters(agent._lock, i + 1)
    agent._lock.release()
    with agent._lock:
        order.append("update")
    for actor in actors:
        actor.join(10)
    assert order == ["act0", "act1", "act2", "act3", "update"]
