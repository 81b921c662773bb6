"""A light live plot for the dashboard: plotly.js loaded once per page, points appended, not resent.

plotly's own ``FigureWidget`` ships its 5 MB bundle once per figure, resends whole arrays that the
page then diffs deeply, and throws when a full update reaches a view that has not drawn yet. A
:class:`LivePlot` is a small anywidget instead:

* plotly.js comes from the installed ``plotly`` package (never a CDN) inside one
  :class:`PlotlyLibrary` model per kernel; every plot on the page refers to it, and the page
  evaluates it once (a promise on ``window``), however many plots and dashboards it shows.
* The kernel sends each trace's points with :meth:`LivePlot.reset` (whole, downsampled) or
  :meth:`LivePlot.extend` (only the points added since, appended with ``Plotly.extendTraces``),
  as binary float64 buffers. The page keeps the data per model, so a view that appears later (a
  re-rendered output, a reload) draws from it, and no update ever goes to a plot not drawn yet.
* The page acknowledges every message; :meth:`LivePlot.ready` holds the next update while one is
  unacknowledged, so a slow page gets fewer, larger updates instead of a queue. A page whose model is
  new (a reload) or that missed a message asks for a full resend, which :attr:`LivePlot.wants_reset`
  reports.

The Python side imports neither plotly nor nbformat, which keeps a dashboard's first paint fast.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import anywidget
import numpy as np
import traitlets

from .comm_route import route_as_sent

__all__ = ["LivePlot", "PlotlyLibrary", "plotly_library", "plotly_js_path"]

_ACK_TIMEOUT_S = 3.0  # an unanswered update is given up after this long (kernel busy, page closed)


def plotly_js_path() -> str:
    """The ``plotly.min.js`` the installed plotly package ships (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the dashboard's plots need plotly: pip install 'rl-workbench[notebook]'")
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "package_data", "plotly.min.js")
        if os.path.isfile(path):
            return path
    raise ImportError("the installed plotly package has no package_data/plotly.min.js; reinstall plotly")


_LIBRARY_ESM = "export default { render() {} };"


class PlotlyLibrary(anywidget.AnyWidget):
    """plotly.js as one widget model per kernel: the page evaluates its ``source`` once."""

    _esm = traitlets.Unicode(_LIBRARY_ESM).tag(sync=True)
    source = traitlets.Bytes(b"").tag(sync=True)  # binary: no JSON escaping of 4.8 MB either way
    version = traitlets.Unicode("").tag(sync=True)


_library_lock = threading.Lock()
_library: weakref.ref[PlotlyLibrary] | None = None


def plotly_library() -> PlotlyLibrary:
    """The kernel's :class:`PlotlyLibrary` (built on first use, and again if it was closed)."""
    global _library
    with _library_lock:
        lib = _library() if _library is not None else None
        if lib is None or lib.comm is None:
            path = plotly_js_path()
            with open(path, "rb") as f:
                source = f.read()
            lib = PlotlyLibrary(source=source, version=f"{os.path.getsize(path)}")
            _library_keep.append(lib)
            del _library_keep[:-1]  # keep the newest alive for the kernel's life; older ones may go
            _library = weakref.ref(lib)
        return lib


_library_keep: list[PlotlyLibrary] = []

_ESM = r"""
const STORES = (globalThis.__workbenchStores = globalThis.__workbenchStores || new Map());

function loadPlotly(ref) {
  // One evaluation of plotly.js per page, whichever plot names the library first.
  if (globalThis.__workbenchPlotly) return globalThis.__workbenchPlotly;
  if (!ref || !globalThis.__workbenchManager) return null;
  const manager = globalThis.__workbenchManager;
  const p = (async () => {
    if (globalThis.Plotly && globalThis.Plotly.extendTraces) return globalThis.Plotly;
    // Let the page paint what it has (the status line, the buttons) before compiling 4.8 MB of script.
    await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 50)));
    const lib = await manager.get_model(ref.startsWith("IPY_MODEL_") ? ref.slice(10) : ref);
    const raw = lib.get("source");
    const src = typeof raw === "string" ? raw : new TextDecoder().decode(raw.buffer ? raw : new Uint8Array(raw));
    globalThis.__workbenchPlotlyLoads = (globalThis.__workbenchPlotlyLoads || 0) + 1;
    const module = { exports: {} };
    // plotly.min.js is UMD: with a CommonJS-like module it fills module.exports and touches no globals.
    new Function("module", "exports", "define", src)(module, module.exports, undefined);
    return module.exports;
  })();
  globalThis.__workbenchPlotly = p;
  p.catch((e) => { console.warn("workbench: plotly.js did not load", e); globalThis.__workbenchPlotly = null; });
  return p;
}

function floats(buf) {
  if (!buf) return [];
  const view = buf.buffer ? buf : new DataView(buf);
  const copy = view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength);
  return Array.from(new Float64Array(copy));
}

function storeOf(model) {
  const key = model.get("key");
  let store = STORES.get(key);
  if (!store) {
    store = { seq: -1, data: null, views: new Set() };
    STORES.set(key, store);
  }
  return store;
}

function traces(model, store) {
  const specs = model.get("traces") || [];
  return specs.map((spec, i) => {
    const d = (store.data && store.data[i]) || { x: [], y: [] };
    return Object.assign({}, spec, { x: d.x.slice(), y: d.y.slice() });
  });
}

function layoutOf(model) {
  return Object.assign({ autosize: true }, model.get("plot_layout") || {});
}

const CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

async function draw(model, store, view) {
  const loading = loadPlotly(store.library || model.get("library"));
  if (!loading) return;  // drawn once the kernel names the library (with the first data)
  const Plotly = await loading;
  if (!view.el.isConnected && view.drawn) return;
  globalThis.__workbenchPlotlyReady = Plotly;
  await Plotly.react(view.div, traces(model, store), layoutOf(model), CONFIG);
  view.drawn = true;
}

function initialize({ model }) {
  globalThis.__workbenchManager = globalThis.__workbenchManager || model.widget_manager;
  const store = storeOf(model);
  const onMsg = (msg, buffers) => {
    if (!msg || msg.kind === undefined) return;
    if (msg.kind === "reset" || (msg.kind === "replace" && store.data !== null && msg.base === store.seq)) {
      if (msg.kind === "reset") store.data = [];
      msg.traces.forEach((t) => { store.data[t.i] = { x: floats(buffers[t.x]), y: floats(buffers[t.y]) }; });
      store.seq = msg.seq;
      if (msg.library) store.library = msg.library;
      model.send({ kind: "ack", seq: msg.seq });  // stored: drawing follows on its own
      for (const view of store.views) draw(model, store, view).catch((e) => console.warn("workbench plot:", e));
      return;
    } else if (msg.kind === "extend" || msg.kind === "replace") {
      if (store.data === null || msg.base !== store.seq) {
        model.send({ kind: "need_reset", have: store.seq });
        return;
      }
      const idx = [], xs = [], ys = [];
      msg.traces.forEach((t) => {
        const x = floats(buffers[t.x]), y = floats(buffers[t.y]);
        const d = store.data[t.i];
        for (let k = 0; k < x.length; k++) { d.x.push(x[k]); d.y.push(y[k]); }
        idx.push(t.i); xs.push(x); ys.push(y);
      });
      store.seq = msg.seq;
      const Plotly = globalThis.__workbenchPlotlyReady;
      for (const view of store.views) {
        if (!view.drawn || !Plotly) continue;  // it draws the whole store once it is ready
        try {
          Plotly.extendTraces(view.div, { x: xs, y: ys }, idx);
        } catch (e) {
          draw(model, store, view).catch(() => {});
        }
      }
      model.send({ kind: "ack", seq: msg.seq });
    }
  };
  model.on("msg:custom", onMsg);
  const onSpec = async () => {
    for (const view of store.views) {
      try { await draw(model, store, view); } catch (e) { console.warn("workbench plot:", e); }
    }
  };
  model.on("change:plot_layout", onSpec);
  model.on("change:traces", onSpec);
  // A model the page builds afresh (a reload, a reopened tab) starts without data: ask for it.
  model.send({ kind: "hello", have: store.seq });
  return () => {
    model.off("msg:custom", onMsg);
    model.off("change:plot_layout", onSpec);
    model.off("change:traces", onSpec);
  };
}

function render({ model, el }) {
  const store = storeOf(model);
  const div = document.createElement("div");
  div.className = "wb-plot-area";
  div.style.width = "100%";
  div.style.height = (model.get("height") || 260) + "px";
  el.appendChild(div);
  const view = { el, div, drawn: false };
  store.views.add(view);
  draw(model, store, view).catch((e) => console.warn("workbench plot:", e));
  let ro = null;
  if (globalThis.ResizeObserver) {
    let last = 0;
    ro = new ResizeObserver(() => {
      const w = div.clientWidth;
      if (!view.drawn || Math.abs(w - last) < 2 || !globalThis.__workbenchPlotly) return;
      last = w;
      globalThis.__workbenchPlotly.then((Plotly) => Plotly.Plots.resize(div)).catch(() => {});
    });
    ro.observe(div);
  }
  return () => {
    store.views.delete(view);
    if (ro) ro.disconnect();
    if (globalThis.__workbenchPlotly) globalThis.__workbenchPlotly.then((P) => P.purge(div)).catch(() => {});
  };
}

export default { initialize, render };
"""


class LivePlot(anywidget.AnyWidget):
    """One live plot: trace styles and layout as traits, points sent as appends (see the module docstring).

    Parameters:
        traces: one dict of plotly trace properties per trace (no ``x``/``y``: points go by
            :meth:`reset` and :meth:`extend`).
        layout: plotly layout properties.
        height: the plot's height in pixels (its width follows the page).
    """

    _esm = traitlets.Unicode(_ESM).tag(sync=True)
    _css = traitlets.Unicode(".wb-plot { flex: 1 1 420px; min-width: 300px; max-width: 100%; }").tag(sync=True)
    library = traitlets.Unicode("").tag(sync=True)  # "IPY_MODEL_<id>" of the PlotlyLibrary, set on first use
    key = traitlets.Unicode("").tag(sync=True)
    traces = traitlets.List().tag(sync=True)
    plot_layout = traitlets.Dict().tag(sync=True)
    height = traitlets.Int(260).tag(sync=True)

    def __init__(
        self,
        traces: list[dict[str, Any]],
        layout: dict[str, Any] | None = None,
        *,
        height: int = 260,
        classes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(
            key=uuid.uuid4().hex,
            traces=list(traces),
            plot_layout=dict(layout or {}),
            height=height,
        )
        for name in ("wb-plot", *classes):
            self.add_class(name)
        self._lock = threading.RLock()
        self._seq = 0  # the number of the last message sent
        self._acked = 0
        self._sent_at: float | None = None  # when the unacknowledged message went out
        self._rtt: float | None = None  # smoothed seconds from send to acknowledgement
        self._wants_reset = True
        self._page_seen = False  # no page has said hello: nobody to wait for
        self._unanswered_since: float | None = None  # first update the page has not answered yet
        self.points = [0] * len(traces)  # points the page holds per trace
        self.data: list[tuple[np.ndarray, np.ndarray]] = []  # the points sent, per trace (x, y)
        self.whole: tuple[list[dict[str, Any]], list[tuple[np.ndarray, np.ndarray]], dict[str, Any] | None] = (
            list(traces),
            [],
            None,
        )  # what set_whole last set: traces, points, layout
        self._whole_sent = True
        self.sent_bytes: list[int] = []  # bytes of every data message sent, in order
        self.sent_kinds: list[str] = []  # the kind of each ("reset", "extend", "replace"), in the same order
        self.acks = 0
        self.hellos = 0  # times a page built this model (more than one: a reload or a reopened tab)
        self.created_at = time.monotonic()
        self.heard_at: float | None = None  # when a page last said anything to this plot
        self.on_page: Callable[[LivePlot], None] | None = None  # called when a page asks for the data
        self.on_msg(self._on_page_msg)
        route_as_sent(self)  # written to from a timer thread: see comm_route

    # -- what the page says ---------------------------------------------------------------------

    def _on_page_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        kind = content.get("kind") if isinstance(content, dict) else None
        with self._lock:
            self.heard_at = time.monotonic()
            if kind == "ack":
                seq = int(content.get("seq", 0))
                self._unanswered_since = None
                if seq >= self._acked:
                    self._acked = seq
                    self.acks += 1
                    if self._sent_at is not None and seq == self._seq:
                        rtt = time.monotonic() - self._sent_at
                        self._rtt = rtt if self._rtt is None else 0.7 * self._rtt + 0.3 * rtt
                        self._sent_at = None
            elif kind in ("hello", "need_reset"):
                if kind == "hello":
                    self.hellos += 1
                    self._unanswered_since = None
                self._page_seen = True
                self._wants_reset = True
                self._sent_at = None  # the page is listening now: do not wait on older messages
            else:
                return
        if kind != "ack" and self.on_page is not None:
            self.on_page(self)

    @property
    def wants_reset(self) -> bool:
        """True when the page needs the whole data (a new model on the page, or one that missed an update)."""
        return self._wants_reset

    @property
    def page_seen(self) -> bool:
        """True once a page has opened this plot (its model said hello)."""
        return self._page_seen

    def deaf(self, after_s: float, now: float | None = None) -> bool:
        """True when a page opened the plot and no page has answered the updates sent for ``after_s`` seconds.

        anywidget drops every message to a model whose JavaScript took over 2 s to start (a busy
        page), for the model's whole life; such a plot never draws. Its owner replaces it. Judged by
        the unanswered time alone, not by whether the page answered since its hello: after a reload
        on a busy page the new model's hello can be lost with everything else, and the kernel then
        hears only the silence after the old page's answers (the plots stayed empty until a second
        reload). A page that left is judged the same way: its plot is rebuilt once, and the fresh
        one waits for a page to open it (a plot no page has opened is never deaf).
        """
        with self._lock:
            if not self._page_seen or self._unanswered_since is None:
                return False
            now = time.monotonic() if now is None else now
            return now - self._unanswered_since > after_s

    @property
    def round_trip(self) -> float | None:
        """Smoothed seconds between sending an update and the page acknowledging it (None: none yet)."""
        return self._rtt

    def ready(self, now: float | None = None) -> bool:
        """True when the page has acknowledged the last update (or gave no answer for a few seconds).

        Also True while no page has opened the plot yet: there is nobody to wait for.
        """
        with self._lock:
            if self._sent_at is None or not self._page_seen:
                return True
            now = time.monotonic() if now is None else now
            return now - self._sent_at > _ACK_TIMEOUT_S

    # -- sending points -------------------------------------------------------------------------

    def _send_points(self, kind: str, traces: list[tuple[int, np.ndarray, np.ndarray]], **extra: Any) -> int:
        buffers: list[bytes] = []
        specs = []
        for i, x, y in traces:
            specs.append({"i": i, "x": len(buffers), "y": len(buffers) + 1})
            buffers.append(np.ascontiguousarray(x, dtype=np.float64).tobytes())
            buffers.append(np.ascontiguousarray(y, dtype=np.float64).tobytes())
        with self._lock:
            base = self._seq
            self._seq += 1
            content = {"kind": kind, "seq": self._seq, "base": base, "traces": specs, **extra}
            self._sent_at = time.monotonic()  # before sending: the answer may come at once
            if self._unanswered_since is None:
                self._unanswered_since = self._sent_at
            self.send(content, buffers)
            size = len(json.dumps(content)) + sum(len(b) for b in buffers)
            self.sent_bytes.append(size)
            self.sent_kinds.append(kind)
        return size

    def use_library(self) -> None:
        """Name the kernel's :class:`PlotlyLibrary` to the page (first data sent; after the first paint)."""
        if not self.library:
            self.library = f"IPY_MODEL_{plotly_library().model_id}"

    def reset(self, data: list[tuple[np.ndarray, np.ndarray]]) -> int:
        """Replace every trace's points (one ``(x, y)`` per trace); returns the bytes sent."""
        self.use_library()
        with self._lock:
            self._wants_reset = False
            self.points = [int(np.size(x)) for x, _ in data]
            self.data = [(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)) for x, y in data]
            return self._send_points("reset", [(i, x, y) for i, (x, y) in enumerate(data)], library=self.library)

    def replace(self, data: dict[int, tuple[np.ndarray, np.ndarray]]) -> int:
        """Replace some traces' points (trace index to ``(x, y)``), keeping the others; returns the bytes sent."""
        with self._lock:
            for i, (x, y) in data.items():
                self.points[i] = int(np.size(x))
                self._keep(i, x, y, append=False)
            return self._send_points("replace", [(i, x, y) for i, (x, y) in sorted(data.items())])

    def extend(self, data: dict[int, tuple[np.ndarray, np.ndarray]]) -> int:
        """Append points to some traces (trace index to ``(x, y)``); returns the bytes sent (0: nothing new)."""
        data = {i: xy for i, xy in data.items() if np.size(xy[0])}
        if not data:
            return 0
        with self._lock:
            for i, (x, y) in data.items():
                self.points[i] += int(np.size(x))
                self._keep(i, x, y, append=True)
            return self._send_points("extend", [(i, x, y) for i, (x, y) in sorted(data.items())])

    def _keep(self, i: int, x: np.ndarray, y: np.ndarray, append: bool) -> None:
        """Record trace ``i``'s points as the page will hold them (see :attr:`data`)."""
        while len(self.data) <= i:
            self.data.append((np.zeros(0), np.zeros(0)))
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if append:
            x, y = np.concatenate([self.data[i][0], x]), np.concatenate([self.data[i][1], y])
        self.data[i] = (x, y)

    # -- plots sent whole -----------------------------------------------------------------------

    def set_whole(
        self,
        traces: list[dict[str, Any]],
        data: list[tuple[np.ndarray, np.ndarray]],
        layout: dict[str, Any] | None = None,
    ) -> None:
        """What the plot shows now, sent whole by :meth:`send_whole`: trace styles, each trace's points and,
        if given, a new layout (for plots whose traces come and go, such as a sweep's trials)."""
        with self._lock:
            self.whole = (list(traces), list(data), layout)
            self._whole_sent = False

    def send_whole(self) -> int:
        """Send what :meth:`set_whole` set, when it changed since it was sent or a page asked for the data
        (a reload, a new view); returns the bytes sent (0: nothing to send)."""
        with self._lock:
            traces, data, layout = self.whole
            if self._whole_sent and not self._wants_reset:
                return 0
            with self.hold_sync():
                if traces != self.traces:
                    self.traces = traces
                if layout is not None and layout != self.plot_layout:
                    self.plot_layout = layout
            self._whole_sent = True
            return self.reset(data)
