"""How the command ends: its exit codes, the one each of our errors gives, and the program name
its messages begin with. The handlers (`_commands`, `_manage`, `_migrate`, `_schema`) and the
package's `main` import them from here, so no module of the command imports the package."""

from __future__ import annotations

from telar_checkpoint.errors import SerializationError, StoredDataError, StoreError, TelarError, UsageError

PROG = "telar-checkpoint"

EXIT_FAILED = 1  # verify found errors, the user said no, a migration had failures
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3  # also: a migration source without threads
EXIT_CORRUPT = 4
EXIT_STORE = 5


def exit_code(exc: TelarError) -> int:
    """The exit code for one of our errors."""
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, LookupError):  # a missing thread or checkpoint, or one that was dropped
        return EXIT_NOT_FOUND
    if isinstance(exc, (StoredDataError, SerializationError)):
        return EXIT_CORRUPT
    if isinstance(exc, StoreError):
        return EXIT_STORE
    return EXIT_FAILED
