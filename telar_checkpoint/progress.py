"""The one progress callback every tool that walks a store's threads calls.

`list_threads`, `verify_store`, `upgrade_format`, the state schema's `upgrade`, `aupgrade` and
`status`, `migrate` and `reencode` call `progress(done, total, thread_id)` after each thread:
`done` threads of `total` so far, the last one `thread_id`. What it returns is ignored. The
command line's progress bar is one (`cli/_output.py`, `ProgressBar`). Imports nothing of ours,
so any tool may use it.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int, str], object]
"""Called after each thread as `progress(done_threads, total_threads, thread_id)`."""

__all__ = ["Progress"]
