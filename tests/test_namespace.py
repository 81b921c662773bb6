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
    missing = public - submodules - set(wb.__all__) - {"annotations", "importlib", "Any"}
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
