"""The serde allowlist: what LangGraph's serializers write round-trips through the saver exactly,
a class of the program's loads once listed (by the serializer, or by LangGraph from the state
schema) and is refused, naming it, until then. Hostile payloads: tests/test_hostile.py."""

from __future__ import annotations

import dataclasses
import enum
import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Send
from pydantic import BaseModel

from telar_checkpoint import MemoryStore, RefusedTypeError, TelarSaver
from telar_checkpoint.serde_allowlist import SHIPPED, guarded
from telar_checkpoint.stores import Store

AES_KEY = b"0123456789abcdef"


class Order(BaseModel):
    item: str
    quantity: int = 1
    placed: datetime | None = None


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Cart:
    orders: list[str]
    total: Decimal = Decimal("0")


OURS = [Order, Colour, Cart]


def serializers(listed: list[type]) -> dict[str, Any]:
    plus = JsonPlusSerializer(allowed_msgpack_modules=listed)
    return {"jsonplus": plus, "encrypted": EncryptedSerializer.from_pycryptodome_aes(plus, key=AES_KEY)}


def state() -> dict[str, Any]:
    when = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    return {
        "messages": [
            HumanMessage("weather in Paris?", id="h1"),
            AIMessage("", id="a1", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}]),
            ToolMessage("sunny", tool_call_id="c1", id="t1"),
        ],
        "order": Order(item="tea", quantity=2, placed=when),
        "colour": Colour.RED,
        "cart": Cart(["tea"], Decimal("3.50")),
        "when": when,
        "zoned": datetime(2024, 5, 1, 12, 30, tzinfo=ZoneInfo("Europe/Paris")),
        "day": date(2024, 5, 1),
        "wait": timedelta(seconds=90),
        "id": UUID("12345678-1234-5678-1234-567812345678"),
        "tags": {"a", "b"},
        "path": Path("/tmp/x"),
        "send": Send("node", {"arg": 1}),
    }


def put(saver: TelarSaver, thread: str, values: dict[str, Any]) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, checkpoint, {"source": "loop", "step": 1, "parents": {}}, {})


@pytest.mark.parametrize("kind", ["jsonplus", "encrypted"])
def test_values_written_by_langgraph_serializers_read_back_exactly(store: Store, kind: str) -> None:
    saver = TelarSaver(store, serde=serializers(OURS)[kind])
    values = state()
    saver.put_writes(put(saver, "t", values), [("order", Order(item="jam"))], "task")
    assert '"$serde"' in (store.read("t") or "")
    got = TelarSaver(store, serde=serializers(OURS)[kind]).get_tuple({"configurable": {"thread_id": "t"}})
    assert got is not None
    assert got.checkpoint["channel_values"] == values
    assert {k: type(v) for k, v in got.checkpoint["channel_values"].items()} == {k: type(v) for k, v in values.items()}
    assert got.pending_writes == [("task", "order", Order(item="jam"))]


@pytest.mark.parametrize("kind", ["jsonplus", "encrypted"])
def test_a_class_of_the_program_is_refused_until_listed(kind: str) -> None:
    """LangGraph's default serializer (not strict) would build it; unlisted, it is refused with
    our error naming it; listed by the serializer, it loads."""
    store = MemoryStore()
    put(TelarSaver(store, serde=serializers([])[kind]), "t", {"order": Order(item="tea")})
    config = {"configurable": {"thread_id": "t"}}
    unlisted = JsonPlusSerializer()  # LangGraph's default: allowed_msgpack_modules=True lists nothing
    reader = unlisted if kind == "jsonplus" else EncryptedSerializer.from_pycryptodome_aes(unlisted, key=AES_KEY)
    with pytest.raises(RefusedTypeError, match=f"{__name__}.Order") as caught:
        TelarSaver(store, serde=reader).get_tuple(config)
    assert caught.value.refused == f"{__name__}.Order" and "allowed_msgpack_modules" in str(caught.value)
    got = TelarSaver(store, serde=serializers([Order])[kind]).get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"] == {"order": Order(item="tea")}


@pytest.mark.parametrize("kind", ["jsonplus", "encrypted"])
def test_the_state_schema_classes_langgraph_passes_are_allowed(kind: str) -> None:
    """Strict, LangGraph lists the state schema's classes through `with_allowlist`; the clone
    loads them, the saver it came from still refuses them."""
    store = MemoryStore()
    put(TelarSaver(store, serde=serializers([])[kind]), "t", {"cart": Cart(["tea"])})
    config = {"configurable": {"thread_id": "t"}}
    reader = serializers([])[kind]
    saver = TelarSaver(store, serde=reader)
    clone = saver.with_allowlist({(Cart.__module__, Cart.__name__)})
    got = clone.get_tuple(config)
    assert got is not None and got.checkpoint["channel_values"] == {"cart": Cart(["tea"])}
    with pytest.raises(RefusedTypeError, match="Cart"):
        saver.get_tuple(config)


def test_langgraph_older_json_type_loads_shipped_langchain_objects() -> None:
    """LangGraph's serializer once stored values as LangChain's "lc" JSON: a shipped class loads."""
    message = AIMessage("hi", id="a1")
    typed = ("json", dumps({"m": message}).encode())
    assert guarded(JsonPlusSerializer()).loads_typed(typed) == {"m": message}
    lc2 = {"lc": 2, "type": "constructor", "id": [Order.__module__, "Order"], "kwargs": {"item": "tea"}}
    with pytest.raises(RefusedTypeError, match="Order"):
        guarded(JsonPlusSerializer()).loads_typed(("json", json.dumps(lc2).encode()))


def test_pickle_loads_only_when_the_serializer_was_made_with_pickle_fallback() -> None:
    plain = JsonPlusSerializer(pickle_fallback=True).dumps_typed({1, 2j})  # msgpack cannot write a complex
    assert plain[0] == "pickle"
    assert guarded(JsonPlusSerializer(pickle_fallback=True)).loads_typed(plain) == {1, 2j}
    with pytest.raises(RefusedTypeError, match="pickle"):
        guarded(JsonPlusSerializer()).loads_typed(plain)


def test_the_shipped_types_include_langgraph_safe_types_and_ours() -> None:
    assert ("datetime", "datetime") in SHIPPED and ("langchain_core.messages.ai", "AIMessage") in SHIPPED
    assert ("langgraph.types", "RetryPolicy") in SHIPPED  # one of ours that LangGraph does not list
    assert not any(module in ("os", "subprocess", "builtins") and name in ("system", "Popen", "eval", "exec") for module, name in SHIPPED)
