"""Rewriting a store's threads in format versions 1 and 2: what `telar-checkpoint upgrade` runs.

Development builds wrote a line that uses `appended`, `$same` or `deleted` as version 3
(docs/FORMAT.md, "Lines of development builds"). Such a thread reads, and its next write
rewrites it; `upgrade_format` rewrites every such thread of a store now. Each thread is one
`TelarSaver.rewrite`: atomic, in turn with the saver's writers, from the text stored at that
moment. An interrupted upgrade leaves each thread either as it was or rewritten, and running it
again finishes the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

from telar_checkpoint.errors import StoredDataError
from telar_checkpoint.history import History
from telar_checkpoint.progress import Progress
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.stores.base import Store


@dataclass(slots=True)
class FormatUpgrade:
    """What `upgrade_format` did (or, in a dry run, would do)."""

    upgraded: dict[str, int] = field(default_factory=dict)  # thread -> its development-build lines, written as 1 or 2
    current: list[str] = field(default_factory=list)  # threads already in versions 1 and 2
    corrupt: list[StoredDataError] = field(default_factory=list)  # threads that do not read: left as they are


def upgrade_format(
    store: Store, thread_ids: Iterable[str] | None = None, *, dry_run: bool = False, progress: Progress | None = None
) -> FormatUpgrade:
    """Rewrite every thread (or those of `thread_ids`) that holds lines of a development build in
    format versions 1 and 2, one atomic rewrite per thread; `dry_run`: count them, write nothing.
    `progress(done, total, thread_id)`: called after each thread (telar_checkpoint/progress.py)."""
    report = FormatUpgrade()
    saver = TelarSaver(store)
    chosen = store.thread_keys() if thread_ids is None else list(thread_ids)
    for done, thread_id in enumerate(chosen, 1):
        text = store.read(thread_id)
        try:
            history = History.parse(thread_id, text)
        except StoredDataError as exc:
            report.corrupt.append(exc)
        else:
            if text is None:
                pass  # deleted meanwhile
            elif not history.development_lines:
                report.current.append(thread_id)
            else:
                if not dry_run:
                    saver.rewrite(thread_id, partial(_in_versions_1_and_2, thread_id))
                report.upgraded[thread_id] = history.development_lines
        if progress is not None:
            progress(done, len(chosen), thread_id)
    return report


def _in_versions_1_and_2(thread_id: str, old: str | None) -> str | None:
    """The thread's text with every line in version 1 or 2: rendered again if it holds lines of a
    development build (the same records), else as it is."""
    return None if old is None else History.parse(thread_id, old).in_current_versions(old)
