"""Frames played in the page: every PNG frame sent once, the shown one picked by the page itself.

The play viewer's ``ipywidgets.Play`` ticks in the browser; linked (``jslink``) to
:attr:`FrameView.index`, the page swaps the image without asking the kernel, so playback keeps its
nominal rate however busy the kernel or the machine is (a kernel round trip per frame managed about
12 of 30 frames a second on a loaded machine).
"""

from __future__ import annotations

import anywidget
import traitlets

__all__ = ["FrameView"]

_ESM = r"""
function render({ model, el }) {
  const img = document.createElement("img");
  img.className = "wb-frame";
  img.style.maxWidth = "100%";
  el.appendChild(img);
  let urls = [];
  const build = () => {
    urls.forEach((u) => URL.revokeObjectURL(u));
    urls = (model.get("frames") || []).map((f) => URL.createObjectURL(new Blob([f], { type: "image/png" })));
  };
  const show = () => {
    const i = Math.max(0, Math.min(urls.length - 1, model.get("index") | 0));
    if (urls.length) img.src = urls[i];
  };
  build();
  show();
  const onFrames = () => { build(); show(); };
  model.on("change:frames", onFrames);
  model.on("change:index", show);
  return () => {
    model.off("change:frames", onFrames);
    model.off("change:index", show);
    urls.forEach((u) => URL.revokeObjectURL(u));
  };
}
export default { render };
"""


class FrameView(anywidget.AnyWidget):
    """PNG ``frames`` (bytes each, sent once as binary buffers) and the ``index`` of the one shown."""

    _esm = traitlets.Unicode(_ESM).tag(sync=True)
    _css = traitlets.Unicode(".wb-play-image img { max-width: 600px; width: 100%; }").tag(sync=True)
    frames = traitlets.List(traitlets.Bytes()).tag(sync=True)
    index = traitlets.Int(0).tag(sync=True)

    @property
    def value(self) -> bytes:
        """The PNG bytes of the frame shown now."""
        return self.frames[self.index] if self.frames else b""
