"""The dashboard's edit panel: the agent's editable hyperparameters as fields, applied with one button.

Each hyperparameter its config declares ``live=True`` (``workbench.agents.live.editable``) is a text
field showing its current value as Python (``0.0003``, ``'auto'``, ``linear(0.001, 0.0)``,
``EpsilonGreedy(start=1.0, end=0.05, fraction=0.1)``), labelled with its name and with the config
field's docstring as its tooltip. **Apply** calls ``session.set(...)`` once with the fields that
changed, while the run is idle, running or paused; an error (a value the agent refuses, a typo) is
shown in the panel and changes nothing. Text is read with a small parser that accepts numbers,
strings, True/False/None, tuples and calls of the schedule and exploration classes, nothing else
(it never evaluates code). The panel does no work on the dashboard's timer.
"""

from __future__ import annotations

import ast
import html
import inspect
import itertools
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .. import exploration, schedules
from ..agents.live import editable

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["EditPanel", "field_docs", "format_value", "parse_value"]

_CALLABLES: dict[str, Any] = {
    "linear": schedules.linear,
    "Linear": schedules.Linear,
    "Exponential": schedules.Exponential,
    "Constant": schedules.Constant,
    "EpsilonGreedy": exploration.EpsilonGreedy,
    "GaussianNoise": exploration.GaussianNoise,
    "OrnsteinUhlenbeckNoise": exploration.OrnsteinUhlenbeckNoise,
    "TruncatedNormalNoise": exploration.TruncatedNormalNoise,
}
_WHAT = (
    "write a number, True, False, None, a string in quotes, or a call such as linear(1e-3, 0) or "
    "EpsilonGreedy(1.0, 0.05, 0.1)"
)


def field_docs(config_cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal under it) in a config dataclass and its bases;
    the nearest class's wins."""
    docs: dict[str, str] = {}
    for klass in config_cls.__mro__:
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip())
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs.setdefault(node.target.id, inspect.cleandoc(after.value.value))
    return docs


def format_value(value: Any) -> str:
    """A value as the text a field shows (and :func:`parse_value` reads back)."""
    if isinstance(value, schedules.Linear):
        tail = "" if value.fraction == 1.0 else f", {value.fraction!r}"
        return f"linear({value.start!r}, {value.end!r}{tail})"
    if isinstance(value, schedules.Constant):
        return repr(value.value)
    return repr(value)


def parse_value(text: str) -> Any:
    """The value a field's text stands for; ``ValueError`` saying what may be written."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {text!r}: {_WHAT}") from None
    return _value(tree.body, text)


def _value(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _value(node.operand, text)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_value(e, text) for e in node.elts)
    if isinstance(node, ast.Call):
        func = node.func
        name = None
        if isinstance(func, ast.Name):
            name = func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            name = func.attr if func.value.id in ("wb", "workbench") else None
        if name in _CALLABLES:
            args = [_value(a, text) for a in node.args]
            kwargs = {k.arg: _value(k.value, text) for k in node.keywords if k.arg is not None}
            try:
                return _CALLABLES[name](*args, **kwargs)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"cannot read {text!r}: {exc}") from None
    raise ValueError(f"cannot read {text!r}: {_WHAT}")


class EditPanel(widgets.VBox):
    """The editable hyperparameters of a session's agent, and an Apply button calling ``session.set``.

    Example::

        panel = EditPanel(session)     # the dashboard's Edit button shows one
        panel.fields["learning_rate"].value = "1e-4"
        panel.apply()                  # session.set(learning_rate=0.0001)
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        agent = session.agent
        docs = field_docs(type(agent.config))
        self.fields: dict[str, widgets.Text] = {}
        self._shown: dict[str, str] = {}
        for name in editable(agent):
            doc = (docs.get(name, "") + " Changes at the next update (session.set).").strip()
            field = widgets.Text(
                description=name,
                tooltip=doc,
                layout={"width": "420px"},
                style={"description_width": "170px"},
            )
            field.add_class(f"wb-edit-{name}")
            self.fields[name] = field
        self.apply_button = widgets.Button(
            description="Apply",
            icon="check",
            tooltip="session.set(...) with the fields you changed",
            layout={"width": "92px"},
        )
        self.apply_button.add_class("wb-apply")
        self.apply_button.on_click(lambda _b: self.apply())
        self.message = widgets.HTML()
        self.message.add_class("wb-edit-message")
        self.reload()
        grid = widgets.Box(
            list(self.fields.values()), layout={"display": "flex", "flex_flow": "row wrap", "width": "100%"}
        )
        super().__init__([grid, widgets.HBox([self.apply_button, self.message])])
        self.add_class("wb-edit-panel")

    def reload(self) -> None:
        """Show the agent's current values (after an edit made elsewhere)."""
        config = self.session.agent.config
        for name, field in self.fields.items():
            text = format_value(getattr(config, name))
            self._shown[name] = text
            field.value = text

    def changes(self) -> dict[str, Any]:
        """The fields whose text changed since they were shown, read as values (``ValueError`` for
        text that cannot be read, naming the field)."""
        out: dict[str, Any] = {}
        for name, field in self.fields.items():
            if field.value.strip() == self._shown[name].strip():
                continue
            try:
                out[name] = parse_value(field.value)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return out

    def apply(self) -> dict[str, Any]:
        """``session.set(...)`` with the changed fields; shows what changed or the error. Returns
        the values applied (empty when nothing changed or the edit was refused)."""
        try:
            values = self.changes()
            if not values:
                self.message.value = "<span style='color:#555'>nothing changed</span>"
                return {}
            self.session.set(**values)
        except Exception as exc:
            self.message.value = (
                f"<span class='wb-edit-error' style='color:#cf222e'>{html.escape(type(exc).__name__)}: "
                f"{html.escape(str(exc))}</span>"
            )
            return {}
        self.reload()
        names = ", ".join(values)
        self.message.value = (
            f"<span style='color:#1a7f37'>applied at step {self.session.steps}: {html.escape(names)}</span>"
        )
        return values
