"""One thread as a `.jsonl` file: `export_thread` and `import_thread`.

The exported text is the thread's own history string (already JSON lines, one
checkpoint per line); importing validates it with the codec before storing it.
"""

from __future__ import annotations

from telar_checkpoint._arguments import check
from telar_checkpoint.errors import UsageError
from telar_checkpoint.migration._migrate import _Built, _keys_of, _left_out, _parents_of
from telar_checkpoint.migration._report import ALREADY, MigrationReport
from telar_checkpoint.migration._sources import describe
from telar_checkpoint.saver import TelarSaver


def export_thread(saver: TelarSaver, thread_id: str, *, raw: bool = False) -> str:
    """The stored history of `thread_id` as JSON lines (a torn, unterminated last line left out).

    With `raw`, the text exactly as stored, whatever its state (to keep or look at a damaged thread).
    """
    check(export_thread, locals())
    text = saver.store.read(str(thread_id))
    if text is None:
        from telar_checkpoint.inspection import closest_threads

        close = closest_threads(saver.store, str(thread_id))
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise UsageError(f"thread {thread_id!r} is not in the {saver.store.kind} store{hint}; nothing to export")
    if raw:
        return text
    history = saver.codec.parse(str(thread_id), text)
    return text if history.torn is None else text[: len(text) - len(history.torn)]


def import_thread(saver: TelarSaver, thread_id: str, text: str, *, replace: bool = False) -> MigrationReport:
    """Store `text` (from `export_thread`) as `thread_id`, after checking every line and value reads back.

    A thread already holding a different history is refused unless `replace`;
    importing the same text again changes nothing. The saver's `max_history` applies.
    """
    check(import_thread, locals())
    thread_id = str(thread_id)
    if not text.strip():
        raise UsageError(f"nothing to import into thread {thread_id!r}: the text holds no lines")
    if not text.endswith("\n"):
        text += "\n"  # a file saved without its final newline; a truly cut line still fails to parse
    history = saver.codec.parse(thread_id, text)
    if not history.entries:
        raise UsageError(f"nothing to import into thread {thread_id!r}: the text holds no checkpoint")
    saver.codec.decode_history(thread_id, text)  # every value readable by this saver's serializer
    text = history.in_current_versions(text)  # a development build's lines written as 1 and 2 (the same records)
    new = saver.codec.trim(text, saver.max_history) if saver.max_history is not None else text
    report = MigrationReport(".jsonl text", describe(saver))

    def change(old: str | None) -> str:
        report.skipped.pop(thread_id, None)
        if old == new:
            report.skipped[thread_id] = ALREADY
        elif old is not None and not replace:
            raise UsageError(
                f"thread {thread_id!r} already holds a different history in the {saver.store.kind} store; "
                "pass replace=True (telar-checkpoint import --replace) to overwrite it"
            )
        return new

    saver.rewrite(thread_id, change, text=new)
    if thread_id not in report.skipped:
        kept = saver.codec.parse(thread_id, new)
        report.threads = 1
        report.checkpoints = len(kept.entries)
        report.writes = sum(len(e.writes) for e in kept.entries.values())
        left_out = _left_out(kept, _Built(new, _keys_of(history), _parents_of(history)))
        if left_out:
            report.left_out[thread_id] = left_out
    return report
