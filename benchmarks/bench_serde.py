"""Benchmark: JsonSerializer against LangGraph's JsonPlusSerializer on a realistic agent state.

The state holds 100 messages: human questions, AI messages with tool calls and
usage metadata, tool results, and AI answers of about 500 bytes. Each round
times dumps_typed + loads_typed of the whole state for both serializers,
interleaved (A B A B ...) in one process so drift hits both alike. Prints the
medians and their ratio (and the fastest rounds, less disturbed on a busy
machine) and writes them to benchmarks/results/serde.json; and the encoding alone, per
message (`to_jsonable` + `orjson.dumps` of a message list, as a put does on the list channel).

    python benchmarks/bench_serde.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from telar_checkpoint.serializer import JsonSerializer

RESULTS = Path(__file__).parent / "results" / "serde.json"
ANSWER = (
    "Here is what I found. The forecast for Lisbon shows clear skies through the weekend, "
    "with highs around 24°C and lows near 15°C. Winds stay light from the northwest, and "
    "there is no rain expected until Tuesday, when a weak front may bring scattered showers "
    "in the afternoon. If you are planning time outdoors, Saturday morning looks best: the "
    "UV index peaks at 7 around midday, so sunscreen is a good idea. Evenings will be mild "
    "enough for dinner on a terrace. I can also check sea temperature or surf conditions."
)


def agent_state(n_messages: int = 100) -> dict[str, Any]:
    messages: list[Any] = []
    turn = 0
    while len(messages) < n_messages:
        call_id = f"call_{turn:04d}"
        messages.append(HumanMessage(f"What's the weather like in city #{turn}?", id=f"h{turn}"))
        messages.append(
            AIMessage(
                "",
                id=f"a{turn}",
                tool_calls=[{"name": "get_weather", "args": {"city": f"city #{turn}", "days": 3}, "id": call_id}],
                usage_metadata={"input_tokens": 812 + turn, "output_tokens": 24, "total_tokens": 836 + turn},
                response_metadata={"model_name": "gpt-4o-2024-08-06", "finish_reason": "tool_calls"},
            )
        )
        messages.append(
            ToolMessage(
                json.dumps({"temp_c": [24, 23, 25], "conditions": "clear", "wind_kph": 9}),
                tool_call_id=call_id,
                name="get_weather",
                id=f"t{turn}",
            )
        )
        messages.append(
            AIMessage(
                ANSWER,
                id=f"r{turn}",
                usage_metadata={"input_tokens": 901 + turn, "output_tokens": 130, "total_tokens": 1031 + turn},
                response_metadata={"model_name": "gpt-4o-2024-08-06", "finish_reason": "stop"},
            )
        )
        turn += 1
    return {"messages": messages[:n_messages], "user_id": "u-42", "step_count": turn}


def time_round_trip(serde: Any, state: dict[str, Any]) -> tuple[float, float, int]:
    """Seconds for dumps_typed and for loads_typed, and the stored size in bytes."""
    start = time.perf_counter()
    typed = serde.dumps_typed(state)
    middle = time.perf_counter()
    out = serde.loads_typed(typed)
    end = time.perf_counter()
    assert out == state  # checked outside the timed part
    return middle - start, end - middle, len(typed[1])


def plain_chat(n_messages: int = 1000) -> list[Any]:
    """The long chat of the micro benchmarks (`benchmarks.workloads.chat_message`): content and id only."""
    return [
        (HumanMessage if i % 2 == 0 else AIMessage)(
            content=f"Message {i}: a sentence of ordinary length, about the weather and the trains.", id=f"chat-{i:06d}"
        )
        for i in range(n_messages)
    ]


def encode_per_message(rounds: int) -> dict[str, float]:
    """Median µs per message of JsonSerializer.to_jsonable + orjson.dumps of a message list, the
    work of a put on the list channel: the plain chat, and the agent state's messages (as given,
    and with every field set)."""
    serde = JsonSerializer()
    messages = agent_state()["messages"]
    lists = {
        "plain chat": plain_chat(),
        "agent messages": messages,
        # as a real run leaves them (add_messages and a checkpoint's round trip set every field)
        "agent messages, every field set": [type(m)(**m.__dict__) for m in messages],
    }
    samples: dict[str, list[float]] = {name: [] for name in lists}
    for _ in range(rounds):
        for name, messages in lists.items():  # interleaved
            start = time.perf_counter()
            orjson.dumps(serde.to_jsonable(messages))
            samples[name].append((time.perf_counter() - start) / len(messages))
    return {name: round(statistics.median(v) * 1e6, 3) for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()

    state = agent_state()
    contenders = {"JsonSerializer": JsonSerializer(), "JsonPlusSerializer": JsonPlusSerializer()}
    for serde in contenders.values():  # warm caches and imports
        for _ in range(5):
            time_round_trip(serde, state)
    phases = ("dumps+loads", "dumps", "loads")
    times: dict[str, dict[str, list[float]]] = {n: {p: [] for p in phases} for n in contenders}
    sizes: dict[str, int] = {}
    gc.collect()
    for _ in range(args.rounds):
        for name, serde in contenders.items():  # interleaved: A B A B ...
            dumps, loads, sizes[name] = time_round_trip(serde, state)
            times[name]["dumps+loads"].append(dumps + loads)
            times[name]["dumps"].append(dumps)
            times[name]["loads"].append(loads)

    medians = {n: {p: statistics.median(v) for p, v in by_phase.items()} for n, by_phase in times.items()}
    ratios = {p: medians["JsonSerializer"][p] / medians["JsonPlusSerializer"][p] for p in phases}
    ratio = ratios["dumps+loads"]
    result = {
        "benchmark": "dumps_typed + loads_typed of a 100-message agent state, interleaved",
        "rounds": args.rounds,
        "median_ms": {n: {p: round(v * 1000, 3) for p, v in m.items()} for n, m in medians.items()},
        "ratio_json_to_jsonplus": {p: round(r, 3) for p, r in ratios.items()},
        # the fastest round: the least disturbed by other processes on a busy machine
        "min_ms": {n: {p: round(min(v) * 1000, 3) for p, v in by_phase.items()} for n, by_phase in times.items()},
        "ratio_of_mins": {
            p: round(min(times["JsonSerializer"][p]) / min(times["JsonPlusSerializer"][p]), 3) for p in phases
        },
        "bytes": sizes,
        # to_jsonable + orjson.dumps of a message list, median µs per message
        "encode_us_per_message": encode_per_message(max(args.rounds // 4, 10)),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for name, by_phase in medians.items():
        cells = "  ".join(f"{p} {v * 1000:7.3f} ms" for p, v in by_phase.items())
        print(f"{name:20} median  {cells}  {sizes[name]:6d} bytes")
    print(f"fastest rounds: {result['min_ms']}; ratio of mins {result['ratio_of_mins']}")
    print(f"ratio JsonSerializer / JsonPlusSerializer = {ratio:.3f} (below 1 is faster; "
          f"dumps {ratios['dumps']:.3f}, loads {ratios['loads']:.3f})")
    print(f"JsonSerializer.to_jsonable + orjson.dumps, µs per message: {result['encode_us_per_message']}")


if __name__ == "__main__":
    main()
