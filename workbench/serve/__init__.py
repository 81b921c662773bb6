"""A session served over the network: ``session.serve()`` (HTTP JSON and WebSocket, on Starlette and
uvicorn) and its client, ``wb.RemoteSession``.

``workbench.serve.protocol`` holds the wire format and its checks, shared by both sides;
``workbench.serve.server`` the server (imported only when a session is served, so that a client needs
no server stack); ``workbench.serve.client`` the client. See docs/serve.md.
"""

from __future__ import annotations

from .client import RemoteError, RemoteSession

__all__ = ["RemoteError", "RemoteSession"]
