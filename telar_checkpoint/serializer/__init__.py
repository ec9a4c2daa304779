"""Readable, safe JSON for graph state.

`JsonSerializer` implements LangGraph's ``SerializerProtocol``. A value that JSON
has (a dict with string keys, list, string, integer of 64 bits, finite float,
bool, null) is stored as itself. Anything else is a *tag*: a JSON object with
exactly one key, starting with ``"$"``, whose value (the payload) describes it::

    {"$datetime": "2024-01-01T00:00:00+00:00"}
    {"$model": {"class": "HumanMessage", "fields": {"content": "hi", "id": "m1"}}}

So a message's text is plain JSON, and ``jq '.. | .content? // empty'`` finds it.

Tags (payloads hold encoded values unless they say "text"):

================  ==============================  ========================================
tag               Python value                    payload
================  ==============================  ========================================
``$dict``         dict whose only key starts      the dict, its keys taken literally
                  with ``$`` (escaped user data)
``$map``          dict with a key that is not a   ``[[key, value], ...]``
                  plain string
``$str``          str holding NUL or a lone       list of text runs and code points:
                  surrogate                       ``["a", 0, "b"]``
``$int``          int beyond 64 bits              decimal text (hex ``0x..`` if huge)
``$float``        NaN, Infinity                   ``"nan"``, ``"inf"``, ``"-inf"``
``$tuple``        tuple                           list
``$set``          set                             list (sorted when the members sort)
``$frozenset``    frozenset                       list (sorted when the members sort)
``$bytes``        bytes                           base64 text
``$bytearray``    bytearray                       base64 text
``$deque``        collections.deque               ``{"items": [...], "maxlen": n|null}``
``$odict``        OrderedDict                     the items as an encoded dict
``$counter``      Counter                         the items as an encoded dict
``$defaultdict``  defaultdict                     ``{"factory": "list"|..|null, "items": dict}``
``$datetime``     datetime                        isoformat text; or, for a named zone or
                                                  fold=1, ``{"local", "tz", "fold"}``
``$date``         date                            isoformat text
``$time``         time                            as ``$datetime``
``$timedelta``    timedelta                       ``[days, seconds, microseconds]``
``$timezone``     datetime.timezone               ``{"offset": [d, s, us], "name": text|null}``
``$zoneinfo``     ZoneInfo                        its key, e.g. ``"Europe/Paris"``
``$uuid``         UUID                            canonical text
``$decimal``      Decimal                         text
``$path``         pathlib.Path                    text
``$regex``        re.Pattern                      ``{"pattern", "flags"}``
``$model``        pydantic model (LangChain       ``{"class", "fields"}``; fields still at
                  messages, Document, ...)        their default are left out
``$model_v1``     pydantic.v1 model               ``{"class", "fields"}``
``$dataclass``    dataclass (Interrupt, Command,  ``{"class", "fields"}`` (all fields,
                  Overwrite, ...)                 ``init=False`` ones included)
``$namedtuple``   NamedTuple (``_DeltaSnapshot``)  ``{"class", "fields"}``
``$enum``         Enum member                     ``{"class", "value"}``
``$error``        exception                       ``{"class", "args"}``
``$send``         langgraph.types.Send            ``{"node", "arg", "timeout"?}``
================  ==============================  ========================================

Every other object, whatever its keys, is a plain dict. A ``"class"`` is a short
alias for the types loaded by default (``AIMessage``, ``Document``, ``Send``,
``Interrupt``, ``Command``, ``Overwrite``, ``DeltaSnapshot``, ``ValueError``...)
or ``"module:qualname"`` for anything else. Loading resolves it only against
the allowlist: the default types plus ``allowed_classes`` and the pairs given
to ``with_msgpack_allowlist``; anything else raises `SerializationError`. No
pickle, no import, no call of a name found in the data.
"""

from telar_checkpoint.serializer._serializer import JsonSerializer

__all__ = ["JsonSerializer"]
