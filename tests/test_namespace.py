"""The flat public namespace: everything as workbench.X, sorted __all__, light import."""

import subprocess
import sys

import pytest

import workbench as wb


def test_all_is_sorted_and_unique():
    assert wb.__all__ == sorted(wb.__all__)
    assert len(set(wb.__all__)) == len(wb.__all__)


def test_every_public_name_is_importable_and_documented():
    for name in wb.__all__:
        obj = getattr(wb, name)
        if callable(obj) and not name.startswith("_"):
            assert obj.__doc__, f"workbench.{name} has no docstring"


def test_contract_names_are_exported():
    for name in [
        "DQN",
        "PPO",
        "Session",
        "Signal",
        "EpsilonGreedy",
        "GaussianNoise",
        "OrnsteinUhlenbeckNoise",
        "TruncatedNormalNoise",
        "load",
        "check_env",
        "linear",
        "sessions",
        "BC",
        "BCQ",
        "CQL",
        "IQL",
        "Dataset",
        "evaluate_offline",
    ]:
        assert name in wb.__all__


def test_all_lists_exactly_the_public_module_attributes():
    public = {n for n in vars(wb) if not n.startswith("_")}
    submodules = {n for n in public if type(getattr(wb, n)).__name__ == "module"}
    missing = public - submodules - set(wb.__all__) - {"annotations", "importlib", "sys", "Any", "TYPE_CHECKING"}
    assert not missing, f"public but not in __all__: {sorted(missing)}"


def test_import_loads_no_ipywidgets_plotly_or_ray():
    code = (
        "import sys, workbench\n"
        "heavy = [m for m in ('ipywidgets', 'plotly', 'ray', 'IPython', 'optuna', 'tensorboard', 'mlflow', 'wandb',\n"
        "                     'workbench.tracking', 'workbench.sweeps', 'starlette', 'uvicorn', 'websockets',\n"
        "                     'workbench.serve') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_tracking_and_sweep_names_load_on_first_use():
    for name in ["TensorBoard", "MLflow", "WandB", "Sink", "sweep", "Sweep"]:
        assert name in wb.__all__
    assert callable(wb.sweep) and wb.sweep.__module__ == "workbench.sweeps.sweep"
    assert issubclass(wb.TensorBoard, wb.Sink) and issubclass(wb.MLflow, wb.Sink) and issubclass(wb.WandB, wb.Sink)


def test_unknown_attribute_error():
    try:
        wb.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_the_old_testing_envs_spelling_still_imports_with_a_warning():
    import importlib

    import workbench.envs.testing as testing

    sys.modules.pop("workbench.testing_envs", None)
    with pytest.warns(DeprecationWarning, match="workbench.envs.testing"):
        old = importlib.import_module("workbench.testing_envs")
    assert old.MaskedTarget is testing.MaskedTarget and set(old.__all__) == set(testing.__all__)


def test_the_old_testing_envs_attribute_still_works_with_a_warning():
    import importlib

    sys.modules.pop("workbench.testing_envs", None)
    vars(wb).pop("testing_envs", None)
    with pytest.warns(DeprecationWarning, match="workbench.envs.testing"):
        old = wb.testing_envs
    assert old.MaskedTarget is importlib.import_module("workbench.envs.testing").MaskedTarget


# -- the lazy face: `import workbench` imports no torch until a name needs it ------------------------------


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_import_workbench_imports_no_torch_and_a_name_loads_it_on_first_use():
    assert "torch" not in _modules_after("import workbench")
    loaded = _modules_after("import workbench; workbench.PPO")
    assert {"torch", "workbench.agents.ppo"} <= loaded


def test_every_name_of_all_is_served_by_the_face_and_typed_for_the_checker():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(wb.__file__).read_text())
    checked = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    assert checked == set(wb.__all__) - {"__version__"}
    assert set(wb._NAMES) | set(wb._EXTRAS) == checked
    assert set(dir(wb)) >= set(wb.__all__)


def test_a_subpackage_reads_as_an_attribute_and_an_unknown_name_still_fails():
    assert wb.envs.core.VecEnv is wb.envs.VecEnv
    with pytest.raises(AttributeError, match="no_such_module"):
        wb.no_such_module  # noqa: B018


def test_workbench_help_imports_no_torch():
    # One process for every help: none of them imports torch if, after all of them, torch is not imported.
    code = "import runpy, sys\n"
    for argv in (["--help"], ["train", "--help"], ["sweep", "--help"], ["pbt", "--help"], ["serve", "--help"]):
        code += (
            f"sys.argv = ['workbench', *{argv!r}]\n"
            "try:\n    runpy.run_module('workbench', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        )
    loaded = _modules_after(code)
    assert "workbench.cli" in loaded and "workbench.sweeps.cli" in loaded and "torch" not in loaded


def test_the_cli_agent_names_are_the_registry():
    from workbench.agents import AGENTS
    from workbench.cli import AGENT_NAMES

    assert list(AGENT_NAMES) == sorted(AGENTS)


def test_a_worker_imports_workbench_envs_normally_without_torch():
    import os

    import workbench.parallel as parallel

    script = os.path.join(os.path.dirname(parallel.__file__), "_worker.py")
    code = (
        "import runpy\n"
        f"worker = runpy.run_path({script!r})\n"
        "core = worker['_load_envs_module']()\n"
        "import workbench.envs.core\n"
        "assert core is workbench.envs.core and core.__name__ == 'workbench.envs.core'\n"
        f"assert core.__file__.startswith({os.path.dirname(wb.__file__)!r}), core.__file__\n"
    )
    loaded = _modules_after(code)
    assert "workbench.envs.core" in loaded and "torch" not in loaded


def test_a_worker_makes_the_masked_test_tasks_by_id_without_importing_them_first():
    # A Ray actor or a worker process imports only workbench.envs; the partially observed ids RecurrentPPO
    # trains on must resolve there too (they did only where workbench.envs.testing had been imported).
    code = (
        "import gymnasium as gym\n"
        "import workbench.envs.core\n"
        "assert gym.make('CartPoleNoVel-v1').observation_space.shape == (2,)\n"
        "assert gym.make('PendulumNoVel-v1').observation_space.shape == (2,)\n"
    )
    loaded = _modules_after(code)
    assert "workbench.envs.testing" in loaded and "torch" not in loaded
