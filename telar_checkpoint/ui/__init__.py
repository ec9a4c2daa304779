"""`telar-checkpoint ui URL`: a local, read-only web page of a store's threads.

`make_app` builds the pages of a store (an ASGI app, `telar_checkpoint.ui.app`) from what
`telar_checkpoint.ui.views` makes of each thread; `serve` runs it with uvicorn. It needs the
``ui`` extra (``pip install 'telar-checkpoint[ui]'``).
"""

from __future__ import annotations

import secrets
import threading
import webbrowser
from typing import TextIO

from telar_checkpoint.stores.base import Store

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def serve(store: Store, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, open_browser: bool = False,
          out: TextIO | None = None, label: str = "") -> None:
    """Serve the viewer of `store` on host:port until interrupted. On a host other than a
    loopback address it makes a token and prints the address that carries it."""
    import uvicorn

    from telar_checkpoint.ui.app import LOOPBACK, make_app

    token = None if host in LOOPBACK else secrets.token_urlsafe(24)
    app = make_app(store, host=host, token=token)
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    if out is not None:
        print(f"telar-checkpoint ui: {label or 'the store'} at {address}  (read-only; Ctrl-C stops)", file=out, flush=True)
        if token:
            print("  bound beyond this machine: the page asks for the token in that address", file=out, flush=True)
    if open_browser:
        threading.Timer(1.0, webbrowser.open, (address,)).start()
    uvicorn.run(app, host=host, port=port, log_level="warning")


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "serve"]
