"""Observations from local workers through shared memory (issue 51): the same arrays as through the workers'
answers, for a plain frame and a Dict of a frame and floats (the codec's two layouts), and nothing left in
``/dev/shm`` once the workers have mapped their blocks."""

from __future__ import annotations

import os

import numpy as np
import pytest

from workbench.envs import as_env_source
from workbench.envs.testing import SeeTheSide
from workbench.parallel import LocalRunner
from workbench.parallel._worker import shared_memory_available

pytestmark = pytest.mark.skipif(not shared_memory_available(), reason="no /dev/shm on this system")


def _frames():
    return SeeTheSide(size=8, length=3)


def _dict_frames():
    return SeeTheSide(size=8, length=3, dict_obs=True)


def _run(factory, shared: bool) -> tuple[list[np.ndarray], list[bool]]:
    runner = LocalRunner(as_env_source(factory), 2, 2, shared_memory=shared, seed=3)
    try:
        used = [w.shared for w in runner._workers]
        names = [w.shm.name for w in runner._workers if w.shm is not None]
        assert not any(os.path.exists(os.path.join("/dev/shm", n)) for n in names)  # removed once mapped
        out = [runner.reset()]
        actions = np.array([0, 1, 1, 0])
        for _ in range(5):  # episodes of 3 steps: ended envs' last observations come back too
            obs, rewards, terminated, truncated, final = runner.step(actions)
            out += [obs, final, rewards, truncated]
        return out, used
    finally:
        runner.close()


@pytest.mark.parametrize("factory", [_frames, _dict_frames], ids=["frame", "dict"])
def test_shared_memory_gives_the_observations_the_answers_give(factory):
    through_answers, used = _run(factory, shared=False)
    assert used == [False, False]
    through_memory, used = _run(factory, shared=True)
    assert used == [True, True]
    for a, b in zip(through_answers, through_memory, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
