"""The command that serves the viewer: ui (telar_checkpoint/ui)."""

from __future__ import annotations

import sys
import types

from telar_checkpoint.cli._commands import opened
from telar_checkpoint.errors import UsageError


def cmd_ui(args: types.SimpleNamespace) -> int:
    try:
        from telar_checkpoint.ui import serve
    except ImportError as exc:
        raise UsageError(f"the viewer needs the {exc.name} package: pip install 'telar-checkpoint[ui]'") from None
    with opened(args.url) as store:  # as the read-only commands open it: nothing is created
        serve(store, host=args.host, port=args.port, open_browser=args.open, out=sys.stdout, label=args.url)
    return 0
