"""A ready checkpointer for the LangGraph server (`langgraph dev`; see docs/SERVER.md).

Name it in `langgraph.json` and the server keeps its threads' checkpoints with
`TelarSaver` instead of its own::

    "checkpointer": {"path": "telar_checkpoint.server.checkpointer"}

Configured by the environment, read when the server starts:

- ``TELAR_CHECKPOINT_URL``: any URL `TelarSaver.from_conn_string` takes
  (``file:///dir`` or a path, ``sqlite:///x.db``, ``postgresql://...``,
  ``redis://...``); default ``.telar-checkpoint`` under the server's directory.
- ``TELAR_CHECKPOINT_MAX_HISTORY``: keep the last N checkpoints of each thread
  (unset or empty: keep them all).
- ``TELAR_CHECKPOINT_KEEP_SUBGRAPHS``: ``true`` keeps a finished subgraph call's
  checkpoints while the step it ran in is kept, so Studio can show the subgraph
  state of past steps (see `TelarSaver`'s ``keep_finished_subgraphs``).
- ``TELAR_CHECKPOINT_TTL``: a time-to-live, the JSON of langgraph.json's
  ``checkpointer.ttl`` as it is (``{"default_ttl": 43200, "sweep_interval_minutes": 60}``;
  see `TelarSaver`'s ``ttl``).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from telar_checkpoint.errors import UsageError
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.stores.opening import DEFAULT_DIRECTORY

__all__ = [
    "URL_VARIABLE", "MAX_HISTORY_VARIABLE", "KEEP_SUBGRAPHS_VARIABLE", "TTL_VARIABLE",
    "checkpointer", "keeps_subgraphs", "settings", "ttl_from_environment",
]

URL_VARIABLE = "TELAR_CHECKPOINT_URL"
MAX_HISTORY_VARIABLE = "TELAR_CHECKPOINT_MAX_HISTORY"
KEEP_SUBGRAPHS_VARIABLE = "TELAR_CHECKPOINT_KEEP_SUBGRAPHS"
TTL_VARIABLE = "TELAR_CHECKPOINT_TTL"
_YES, _NO = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def settings(environ: Mapping[str, str] = os.environ) -> tuple[str, int | None]:
    """The store URL and `max_history` that `environ` asks for.

    >>> settings({"TELAR_CHECKPOINT_URL": "sqlite:///c.db", "TELAR_CHECKPOINT_MAX_HISTORY": "20"})
    ('sqlite:///c.db', 20)
    >>> settings({})
    ('.telar-checkpoint', None)
    """
    url = environ.get(URL_VARIABLE, "").strip() or DEFAULT_DIRECTORY
    text = environ.get(MAX_HISTORY_VARIABLE, "").strip()
    if not text:
        return url, None
    try:
        max_history = int(text)
    except ValueError:
        max_history = 0
    if max_history < 1:
        raise UsageError(
            f"{MAX_HISTORY_VARIABLE}={text!r}: write a positive whole number, or unset it to keep every checkpoint"
        )
    return url, max_history


def keeps_subgraphs(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether `environ` asks to keep finished subgraph calls (``TELAR_CHECKPOINT_KEEP_SUBGRAPHS``).

    >>> keeps_subgraphs({"TELAR_CHECKPOINT_KEEP_SUBGRAPHS": "true"}), keeps_subgraphs({})
    (True, False)
    """
    text = environ.get(KEEP_SUBGRAPHS_VARIABLE, "").strip().lower()
    if text not in _YES + _NO:
        raise UsageError(f"{KEEP_SUBGRAPHS_VARIABLE}={text!r}: write true or false")
    return text in _YES


def ttl_from_environment(environ: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """The time-to-live `environ` asks for (``TELAR_CHECKPOINT_TTL``, JSON), None when unset;
    its keys are checked by the saver (`lifetime.ttl_settings`).

    >>> ttl_from_environment({"TELAR_CHECKPOINT_TTL": '{"default_ttl": 43200, "sweep_interval_minutes": 60}'})
    {'default_ttl': 43200, 'sweep_interval_minutes': 60}
    """
    text = environ.get(TTL_VARIABLE, "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{TTL_VARIABLE}={text!r} is not JSON ({exc}); write langgraph.json's checkpointer.ttl, "
                         'e.g. {"default_ttl": 43200, "sweep_interval_minutes": 60}') from None
    if not isinstance(value, dict):
        raise UsageError(f'{TTL_VARIABLE}={text!r}: write a JSON object, e.g. {{"default_ttl": 43200}}')
    return value


@asynccontextmanager
async def checkpointer() -> AsyncIterator[TelarSaver]:
    """A `TelarSaver` on the store the environment names, closed when the server stops."""
    url, max_history = settings()
    options: dict[str, Any] = {"max_history": max_history, "keep_finished_subgraphs": keeps_subgraphs()}
    if (ttl := ttl_from_environment()) is not None:
        options["ttl"] = ttl
    async with TelarSaver.from_conn_string(url, **options) as saver:
        yield saver
