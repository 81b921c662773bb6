"""A static SVG picture of the dashboard's plots, left in the notebook's output when a run ends.

A saved notebook, nbviewer and GitHub do not run widgets; they show the richest static format of an
output. The dashboard adds this picture (plain SVG written here, no plotly, no browser) to its output
when the run ends, so the curves stay visible wherever the notebook is read.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["svg_picture"]

_W, _H = 420, 240  # one chart
_L, _R, _T, _B = 58, 12, 30, 34  # margins


def _ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(count + 2) if first + i * step <= hi + 1e-9 * abs(hi)]


def _fmt(v: float) -> str:
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.2g}"
    return f"{v:,.6g}"


def _chart(
    title: str, series: Sequence[tuple[str, np.ndarray, np.ndarray, str]], x_title: str, ox: int, oy: int
) -> str:
    parts = [f"<g transform='translate({ox},{oy})'>"]
    parts.append(f"<text x='{_L}' y='18' font-size='13' font-weight='bold'>{html.escape(title)}</text>")
    finite = [(x[np.isfinite(y)], y[np.isfinite(y)]) for _, x, y, _ in series]
    xs = np.concatenate([x for x, _ in finite]) if finite else np.zeros(0)
    ys = np.concatenate([y for _, y in finite]) if finite else np.zeros(0)
    pw, ph = _W - _L - _R, _H - _T - _B
    parts.append(f"<rect x='{_L}' y='{_T}' width='{pw}' height='{ph}' fill='none' stroke='#ccc'/>")
    if xs.size == 0:
        parts.append(f"<text x='{_L + 10}' y='{_T + ph / 2}' fill='#888' font-size='12'>no points</text></g>")
        return "".join(parts)
    x0, x1 = float(xs.min()), float(xs.max())
    y0, y1 = float(ys.min()), float(ys.max())
    if x1 == x0:
        x1 = x0 + 1.0
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def px(v: np.ndarray | float) -> np.ndarray | float:
        return _L + (np.asarray(v) - x0) / (x1 - x0) * pw

    def py(v: np.ndarray | float) -> np.ndarray | float:
        return _T + ph - (np.asarray(v) - y0) / (y1 - y0) * ph

    for t in _ticks(y0, y1):
        y = float(py(t))
        parts.append(f"<line x1='{_L}' x2='{_L + pw}' y1='{y:.1f}' y2='{y:.1f}' stroke='#eee'/>")
        parts.append(f"<text x='{_L - 4}' y='{y + 4:.1f}' font-size='10' text-anchor='end'>{_fmt(t)}</text>")
    for t in _ticks(x0, x1):
        x = float(px(t))
        parts.append(f"<text x='{x:.1f}' y='{_T + ph + 14}' font-size='10' text-anchor='middle'>{_fmt(t)}</text>")
    parts.append(
        f"<text x='{_L + pw / 2}' y='{_H - 4}' font-size='11' text-anchor='middle' fill='#444'>"
        f"{html.escape(x_title)}</text>"
    )
    for k, ((label, _, _, color), (x, y)) in enumerate(zip(series, finite)):
        if x.size == 0:
            continue
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px(x), py(y)))
        parts.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.3' points='{points}'/>")
        if len(series) > 1:
            lx = _L + pw - 110
            ly = _T + 12 + 13 * k
            parts.append(
                f"<line x1='{lx}' x2='{lx + 14}' y1='{ly - 4}' y2='{ly - 4}' stroke='{color}' stroke-width='2'/>"
            )
            parts.append(f"<text x='{lx + 18}' y='{ly}' font-size='10'>{html.escape(label)}</text>")
    parts.append("</g>")
    return "".join(parts)


def svg_picture(
    charts: Sequence[tuple[str, Sequence[tuple[str, np.ndarray, np.ndarray, str]]]],
    *,
    x_title: str = "env steps",
    caption: str = "",
    columns: int = 2,
) -> str:
    """An SVG image of ``charts``: each ``(title, [(label, x, y, color), ...])``, laid out in a grid."""
    n = max(len(charts), 1)
    cols = max(1, min(columns, n))
    rows = -(-n // cols)
    cap = 20 if caption else 0
    width, height = cols * _W, rows * _H + cap
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' font-family='sans-serif' class='wb-picture'>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
    ]
    if caption:
        parts.append(f"<text x='8' y='14' font-size='12' fill='#333'>{html.escape(caption)}</text>")
    for i, (title, series) in enumerate(charts):
        parts.append(_chart(title, series, x_title, (i % cols) * _W, cap + (i // cols) * _H))
    parts.append("</svg>")
    return "".join(parts)
