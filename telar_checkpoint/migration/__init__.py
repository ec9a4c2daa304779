"""Moving threads into telar-checkpoint and between its stores, without losing a paused run.

`migrate(source, target)` copies every thread of any LangGraph saver into a
`TelarSaver`; `reencode` rewrites a saver's threads in the current format;
`export_thread` / `import_thread` move one thread as a `.jsonl` file;
`open_source(url)` opens a saver to migrate from. See docs/MIGRATION.md.
"""

from telar_checkpoint.migration._files import export_thread, import_thread
from telar_checkpoint.migration._migrate import MigrationConflictError, migrate, reencode
from telar_checkpoint.migration._report import LeftOut, MigrationReport
from telar_checkpoint.migration._sources import open_source
from telar_checkpoint.progress import Progress  # the one progress type of every tool, named here too

__all__ = [
    "LeftOut",
    "MigrationConflictError",
    "MigrationReport",
    "Progress",
    "export_thread",
    "import_thread",
    "migrate",
    "open_source",
    "reencode",
]
