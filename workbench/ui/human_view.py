"""The notebook face of :class:`~workbench.HumanPlay`: the env's frames in a box that takes the keyboard.

Click the frame (it takes the focus; a coloured border says so), then hold keys: each key going
down or up is one message to the kernel (:meth:`HumanPlay.key_down` / ``key_up``), so the kernel
always knows which keys are held; arrows and space do not scroll the page meanwhile. The frames
come back as PNG bytes (as the play viewer's), updated from HumanPlay's clock thread, at most once
per env step.
"""

from __future__ import annotations

import html
from typing import Any

import anywidget
import ipywidgets as widgets
import traitlets

from .play_viewer import encode_png

__all__ = ["HumanPlayView"]

_ESM = r"""
function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "wb-human-frame";
  box.tabIndex = 0;
  box.setAttribute("data-lm-suppress-shortcuts", "true");  // JupyterLab's shortcuts leave the game's keys alone
  box.style.cssText =
    "display:inline-block;outline:none;border:3px solid #ccc;border-radius:4px;padding:2px;cursor:pointer";
  const img = document.createElement("img");
  img.style.cssText = "display:block;max-width:600px;width:100%;image-rendering:pixelated";
  box.appendChild(img);
  const hint = document.createElement("div");
  hint.className = "wb-human-hint";
  hint.style.cssText = "font-family:monospace;font-size:12px;color:#555";
  hint.textContent = "click here, then play with the keys";
  el.appendChild(box);
  el.appendChild(hint);
  let url = null;
  const show = () => {
    const bytes = model.get("frame");
    if (!bytes || !bytes.byteLength) return;
    if (url) URL.revokeObjectURL(url);
    url = URL.createObjectURL(new Blob([bytes], { type: "image/png" }));
    img.src = url;
  };
  show();
  model.on("change:frame", show);
  const held = new Set();
  const grab = ["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", " "];
  box.addEventListener("keydown", (e) => {
    if (grab.includes(e.key)) e.preventDefault();
    e.stopPropagation();  // JupyterLab's own shortcuts (a, b, d d...) stay out of the game
    if (e.repeat || held.has(e.key)) return;
    held.add(e.key);
    model.send({ event: "down", key: e.key });
  });
  box.addEventListener("keyup", (e) => {
    if (grab.includes(e.key)) e.preventDefault();
    e.stopPropagation();
    held.delete(e.key);
    model.send({ event: "up", key: e.key });
  });
  const release = () => { held.forEach((k) => model.send({ event: "up", key: k })); held.clear(); };
  box.addEventListener("focus", () => {
    box.style.borderColor = "#1a7f37";
    hint.textContent = model.get("help_text");
  });
  box.addEventListener("blur", () => {
    box.style.borderColor = "#ccc";
    release();
    hint.textContent = "click here, then play with the keys";
  });
  box.addEventListener("click", () => box.focus());
  return () => { model.off("change:frame", show); if (url) URL.revokeObjectURL(url); };
}
export default { render };
"""


class _Frame(anywidget.AnyWidget):
    _esm = traitlets.Unicode(_ESM).tag(sync=True)
    frame = traitlets.Bytes(b"").tag(sync=True)
    help_text = traitlets.Unicode("").tag(sync=True)


class HumanPlayView(widgets.VBox):
    """The widget of ``play`` (a :class:`~workbench.HumanPlay`): its frames, its keys, its counters."""

    def __init__(self, play: Any) -> None:
        self.play = play
        self.frame_view = _Frame(help_text=f"keys: {play.keys.describe()}")
        self.frame_view.add_class("wb-human")
        self.status = widgets.HTML()
        self.status.add_class("wb-human-status")
        self._last: Any = None
        self.frame_view.on_msg(self._on_msg)
        super().__init__([self.frame_view, self.status])
        self.add_class("wb-human-play")
        play._listeners.append(self.draw)
        self.draw()

    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        key = content.get("key")
        if not isinstance(key, str) or not key:
            return
        if content.get("event") == "down":
            self.play.key_down(key)
        elif content.get("event") == "up":
            self.play.key_up(key)

    def draw(self) -> None:
        """Send the latest frame (when it changed) and the counters (HumanPlay's clock thread calls this)."""
        play = self.play
        current = play.frame
        if current is not None and current is not self._last:
            self._last = current
            self.frame_view.frame = encode_png(current, compression=1)
        self.status.value = (
            f"<span style='font-family:monospace'>{html.escape(play.env_name)}: episode {play.episodes + 1}, "
            f"return {play.episode_return:g}, recorded {play.episodes} episodes ({play.steps} steps)</span>"
        )
