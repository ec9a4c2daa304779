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
``$error``        exception (older lines only:    ``{"class", "args"}``; read back as the
                  now written as ``repr`` text)   text ``repr`` gives, never built
``$send``         langgraph.types.Send            ``{"node", "arg", "timeout"?}``
================  ==============================  ========================================

Every other object, whatever its keys, is a plain dict. A ``"class"`` is a short
alias for the types loaded by default (``AIMessage``, ``Document``, ``Send``,
``Interrupt``, ``Command``, ``Overwrite``, ``DeltaSnapshot``...) or
``"module:qualname"`` for anything else.

Values come back as LangGraph's own serializer gives them, so a program sees
what ``InMemorySaver`` gives it:

- An exception is stored as its ``repr`` text (``"ValueError('boom')"``): LangGraph
  gives a failed task's error as that text, and reads it back as the error.
- A subclass of ``str``, ``int``, ``float``, ``list`` or ``dict`` with no tag of its
  own (``message.text``, a ``TextAccessor``) is stored as the base type's value.
- Loading never fails because of a value's type. A stored object naming a class is
  rebuilt through that class when it is on the allowlist (the types above,
  ``allowed_classes``, the pairs given to ``with_msgpack_allowlist``: LangGraph
  passes the state schema's classes in strict mode) or, unless strict, when it is a
  data class of the tag's kind (pydantic model, pydantic.v1 model, dataclass, Enum,
  NamedTuple, but no LangChain runnable) in a module the program has already
  imported, found through namespace dicts by its exact ``module:qualname``; that
  is logged once per class, as LangGraph logs it. Otherwise (strict and not listed,
  module not imported, a class defined inside a function, a name of something
  else, a program's class refusing the stored fields, after a pydantic model was
  also tried without validation as LangGraph does) it loads as its plain data (the
  decoded fields, or the enum's value), logged once per class. Strict is
  ``LANGGRAPH_STRICT_MSGPACK=true``, or ``JsonSerializer(strict=True)``.
- No pickle, no import, no call of a function named by the data; the only code a
  stored value can reach is a data class's own construction. A payload of the
  wrong shape, an unknown tag, or one of our own types refusing its fields is
  damaged data: `SerializationError`.
"""

from telar_checkpoint.serializer._serializer import JsonSerializer

__all__ = ["JsonSerializer"]
