"""Names that older releases of our dependencies lack, defined once here.

Each fallback matches the newer release's definition, so stored data and order
are the same on every supported version.
"""

from __future__ import annotations

try:  # langgraph-checkpoint>=4.3
    from langgraph.checkpoint.base import writes_sort_key
except ImportError:  # langgraph-checkpoint 4.2: the same order, not yet named

    def writes_sort_key(task_path: str, task_id: str = "", idx: int = 0) -> tuple[str, str, int]:  # type: ignore[misc]
        """The order in which live execution applies one super-step's writes."""
        return (task_path, task_id, idx)


__all__ = ["writes_sort_key"]
