"""The dashboard's video panel: the latest evaluation video plays beside the plots, with its step.

The panel reads ``session.videos`` on each dashboard refresh; when a new video is listed it shows
that one (unless the user picked an earlier one from the list, which then stays until they pick
"latest" again). The file's bytes go to the page once per video shown, as a binary buffer, and play
in a ``<video muted autoplay loop>`` element (a GIF, the fallback format, in an ``<img>``). The
bytes live in the widget's state, so a reloaded page plays the same video again.
"""

from __future__ import annotations

import html
import threading
from typing import Any

import ipywidgets as widgets

__all__ = ["VideoPanel"]

_ESM = r"""
function render({ model, el }) {
  let url = null, node = null;
  const show = () => {
    const bytes = model.get("data");
    const mime = model.get("mime");
    if (url) URL.revokeObjectURL(url);
    url = null;
    if (node) node.remove();
    node = null;
    if (!bytes || !bytes.byteLength) return;
    url = URL.createObjectURL(new Blob([bytes], { type: mime }));
    if (mime.startsWith("video/")) {
      node = document.createElement("video");
      node.muted = true;  // a muted video may autoplay in every browser
      node.autoplay = true;
      node.loop = true;
      node.controls = true;
      node.playsInline = true;
      node.setAttribute("muted", "");
      node.className = "wb-video";
    } else {
      node = document.createElement("img");
      node.className = "wb-video-gif";
    }
    node.style.cssText = "width:100%;max-width:480px;display:block;image-rendering:pixelated";
    node.src = url;
    el.appendChild(node);
    if (node.play) node.play().catch(() => {});
  };
  show();
  model.on("change:data", show);
  return () => { model.off("change:data", show); if (url) URL.revokeObjectURL(url); };
}
export default { render };
"""

_LATEST = -1


def _player() -> Any:
    import anywidget
    import traitlets

    class VideoPlayer(anywidget.AnyWidget):
        """One video's bytes (``data``) and media type (``mime``), played in the page."""

        _esm = traitlets.Unicode(_ESM).tag(sync=True)
        data = traitlets.Bytes(b"").tag(sync=True)
        mime = traitlets.Unicode("video/mp4").tag(sync=True)
        step = traitlets.Int(-1).tag(sync=True)

    return VideoPlayer()


class VideoPanel(widgets.VBox):
    """The evaluation videos of ``session`` (``session.videos``): the latest plays, earlier ones
    are picked from the list. Hidden until the session has a video; :meth:`refresh` reads the list."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.caption = widgets.HTML()
        self.caption.add_class("wb-video-caption")
        self.select = widgets.Dropdown(
            options=[("latest", _LATEST)],
            value=_LATEST,
            description="video",
            layout={"width": "240px"},
            style={"description_width": "40px"},
        )
        self.select.add_class("wb-video-select")
        self.select.observe(self._on_select, names="value")
        self.player: Any = None  # the anywidget, built with the first video (the dashboard's first paint needs none)
        self._version = -1
        self._listing = False
        self._lock = threading.RLock()  # the dashboard's timer refreshes, a pick in the list shows
        self._shown_path: str | None = None
        super().__init__(
            [self.caption, self.select],
            layout={"width": "360px", "display": "none", "padding": "4px", "flex": "0 0 auto"},
        )
        self.add_class("wb-video-panel")

    @property
    def shown(self) -> Any:
        """The :class:`~workbench.video.Video` playing now, or None."""
        videos = list(self.session.videos)
        if not videos:
            return None
        pick = self.select.value
        return videos[-1] if pick == _LATEST or pick >= len(videos) else videos[pick]

    def refresh(self) -> None:
        """Follow ``session.videos``: list them, and show the latest unless an earlier one was picked."""
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        videos = self.session.videos
        if videos.version == self._version:
            return
        self._version = videos.version
        listed = list(videos)
        if not listed:
            return
        options = [("latest", _LATEST)] + [(f"step {v.step:,}", i) for i, v in enumerate(listed)]
        if list(self.select.options) != options:
            value = self.select.value
            self._listing = True  # new options reset the pick: put it back, then show once
            try:
                self.select.options = options
                self.select.value = value if value == _LATEST or value < len(listed) else _LATEST
            finally:
                self._listing = False
        self.layout.display = "flex"
        self._show()

    def _on_select(self, _change: dict[str, Any]) -> None:
        if not self._listing:
            with self._lock:
                self._show()

    def _show(self) -> None:
        video = self.shown
        if video is None or video.path == self._shown_path:
            return
        try:
            data = video.data()
        except OSError:  # removed meanwhile (video_options keep=): the next refresh lists what is there
            return
        if self.player is None:
            self.player = _player()
            self.player.add_class("wb-video-player")
            self.children = (self.caption, self.player, self.select)
        self._shown_path = video.path
        ret = "" if video.episode_return != video.episode_return else f", return {video.episode_return:g}"
        self.caption.value = (
            f"<span class='wb-video-step' style='font-family:monospace;font-size:12px'>"
            f"evaluation at step {video.step:,}{html.escape(ret)}</span>"
        )
        with self.player.hold_sync():
            self.player.mime = video.mime
            self.player.step = video.step
            self.player.data = data

    def close(self) -> None:
        """Close the panel and its player."""
        if self.player is not None:
            self.player.close()
        super().close()
