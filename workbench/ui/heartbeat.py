"""The heartbeat at the end of the dashboard's status line, kept by the page.

The kernel bumps :attr:`Heartbeat.beat` on every refresh; the page counts the seconds since the last
beat itself, so it can say "live · updated 1 s ago", and say so honestly when the kernel side stopped
answering (busy, restarted or gone) and how to get a live dashboard back. The status text itself is a
plain ``ipywidgets.HTML`` beside it: it paints without waiting for anywidget's code to load.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anywidget
import traitlets

from .comm_route import route_as_sent

__all__ = ["STALE_S", "Heartbeat"]

STALE_S = 10
"""Seconds without a beat, while the run is live, after which the page says the kernel is not answering."""

_ESM = (
    r"""
function render({ model, el }) {
  const beat = document.createElement("span");
  beat.className = "wb-heartbeat";
  beat.style.color = "#57606a";
  beat.style.fontFamily = "monospace";
  beat.style.whiteSpace = "pre";
  el.appendChild(beat);
  let last = Date.now();
  const tick = () => {
    if (!model.get("active")) { beat.textContent = ""; beat.title = ""; return; }
    const secs = Math.floor((Date.now() - last) / 1000);
    if (secs > STALE) {
      beat.textContent = " · no update from the kernel for " + secs + " s (re-run the cell if it restarted)";
      beat.title = "The kernel may be busy running another cell, or gone (restarted or shut down). " +
        "If it restarted, re-run this cell to get a live dashboard.";
      beat.style.color = "#b35900";
    } else {
      beat.textContent = " · live · updated " + secs + " s ago";
      beat.title = "";
      beat.style.color = "#57606a";
    }
  };
  const onBeat = () => { last = Date.now(); tick(); model.send({ kind: "ack", beat: model.get("beat") }); };
  tick();
  model.on("change:beat", onBeat);
  model.on("change:active", tick);
  const timer = setInterval(tick, 1000);
  return () => {
    clearInterval(timer);
    model.off("change:beat", onBeat);
    model.off("change:active", tick);
  };
}
function initialize({ model }) {
  model.send({ kind: "hello" });  // the kernel learns that a page listens (see Heartbeat.deaf)
}
export default { initialize, render };
"""
).replace("STALE", str(STALE_S))


class Heartbeat(anywidget.AnyWidget):
    """ "live · updated 1 s ago", counted by the page from the kernel's beats (see the module docstring)."""

    _esm = traitlets.Unicode(_ESM).tag(sync=True)
    beat = traitlets.Int(0).tag(sync=True)
    active = traitlets.Bool(False).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()
        self._page_seen = False
        self.page_opened = threading.Event()  # set when a page opened the heartbeat (its hello)
        self.on_page: Callable[[Heartbeat], None] | None = None  # called (on the kernel's thread) at each hello
        self._answered = False
        self._unanswered_since: float | None = None
        self.on_msg(self._on_page_msg)
        self.observe(self._on_beat, names="beat")
        route_as_sent(self)  # beaten from a timer thread: see comm_route

    def _on_beat(self, _change: dict[str, Any]) -> None:
        with self._lock:
            if self._page_seen and self._unanswered_since is None and not self._answered:
                self._unanswered_since = time.monotonic()

    def _on_page_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        kind = content.get("kind") if isinstance(content, dict) else None
        with self._lock:
            if kind == "hello":
                self._page_seen, self._answered, self._unanswered_since = True, False, None
                self.page_opened.set()
            elif kind == "ack":
                self._answered, self._unanswered_since = True, None
        if kind == "hello" and self.on_page is not None:
            self.on_page(self)

    def deaf(self, after_s: float, now: float | None = None) -> bool:
        """True when a page opened the heartbeat but answered none of the beats of the last ``after_s`` seconds.

        anywidget drops every update to a model whose JavaScript took over 2 s to start (a busy page);
        the dashboard then puts a fresh heartbeat in its place.
        """
        with self._lock:
            if not self._page_seen or self._answered or self._unanswered_since is None:
                return False
            now = time.monotonic() if now is None else now
            return now - self._unanswered_since > after_s
