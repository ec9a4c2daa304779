"""The targets of issue 5, checked against one run's results, and the Markdown report.

Every target is a ratio of two contenders measured in the same run (never of
absolute times, which mean little on a noisy machine). Agent-loop ratios compare
medians over the turns both contenders completed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.contenders import FLOOR
from benchmarks.workloads import MICRO_OPS, SCALE_OPS


@dataclass
class Target:
    goal: str
    value: float | None  # the measured ratio
    limit: float
    direction: str  # "<=" or ">="
    detail: str = ""

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value <= self.limit if self.direction == "<=" else self.value >= self.limit

    def as_dict(self) -> dict[str, Any]:
        return {
            "goal": self.goal, "ratio": self.value, "limit": f"{self.direction} {self.limit}",
            "met": self.met, "detail": self.detail,
        }  # fmt: skip


def _overhead_ratio(results: dict[str, Any], a: str, b: str) -> tuple[float | None, str]:
    loop = results.get("agent_loop", {})
    if a not in loop or b not in loop:
        return None, "not measured"
    sa, sb = loop[a]["overhead_samples_ms"], loop[b]["overhead_samples_ms"]
    n = min(len(sa), len(sb))
    if n == 0:
        return None, "no turns"
    ma, mb = statistics.median(sa[:n]), statistics.median(sb[:n])
    note = f"median overhead over turns 1-{n}: {ma:.2f} ms vs {mb:.2f} ms"
    if mb <= 0:
        return None, note + " (baseline not positive)"
    return ma / mb, note


def _ratio_of(value: Callable[[str], float | None], a: str, b: str, unit: str) -> tuple[float | None, str]:
    va, vb = value(a), value(b)
    if va is None or vb is None:
        return None, "not measured"
    return (va / vb if vb else None), f"{va:,.1f} vs {vb:,.1f} {unit}"


def _micro_put_ratio(results: dict[str, Any], workload: str, a: str, b: str) -> tuple[float | None, str]:
    """Median put time of `a` over `b`'s, in the micro or the long-chat workload."""
    found = results.get(workload, {})

    def median(name: str) -> float | None:
        entry = found.get(name, {})
        return (entry.get("put") or entry.get("put_us") or {}).get("median")

    return _ratio_of(median, a, b, "µs median per put")


def floor(results: dict[str, Any]) -> tuple[float | None, str]:
    """LangGraph's own floor: the no-serde InMemorySaver's per-invoke overhead over InMemorySaver's."""
    return _overhead_ratio(results, FLOOR, "InMemorySaver")


TELAR_STORES = ("Telar/memory", "Telar/file", "Telar/sqlite", "Telar/postgres", "Telar/redis")
SCALE_TARGET_OPS = ("put", "get_tuple")  # put_writes is shown in the detail, not held to the limit


def targets(results: dict[str, Any]) -> list[Target]:
    found: list[Target] = []

    def overhead(a: str, b: str, limit: float, goal: str) -> None:
        ratio, detail = _overhead_ratio(results, a, b)
        found.append(Target(goal, ratio, limit, "<=", detail))

    overhead("Telar/file", "InMemorySaver", 1.2, "file store per-invoke overhead vs InMemorySaver's")
    overhead("Telar/file", "SqliteSaver", 0.6, "file store per-invoke overhead vs SqliteSaver's")
    overhead("Telar/memory", "InMemorySaver", 0.75, "memory store per-invoke overhead vs InMemorySaver's")
    overhead("Telar/postgres", "PostgresSaver", 0.5, "Postgres store per-invoke overhead vs PostgresSaver's")
    overhead("Telar/redis", "PlainRedisSaver", 0.5, "Redis store per-invoke overhead vs the plain-Redis saver's")

    ratio, detail = _micro_put_ratio(results, "micro", "Telar/memory", "InMemorySaver")
    # The two put targets as issue 39's decision rebased them: the 10-message put at most 1.0x timed
    # alone (benchmarks/put_floor.py) and at most 2.0x inside this benchmark; the 1,000-message put,
    # whose floor is encoding every message exactly, at most 0.5x. Judged on the median of three runs.
    goal = "put of a chat of 10 messages, memory store vs InMemorySaver (inside the full benchmark)"
    found.append(Target(goal, ratio, 2.0, "<=", detail))
    ratio, detail = _micro_put_ratio(results, "long_chat", "Telar/memory", "InMemorySaver")
    chat = results.get("long_chat", {}).get("Telar/memory", {}).get("messages")
    goal = "put of a chat of 1,000 messages growing by one a put, memory store vs InMemorySaver"
    if chat:
        detail += f" (chat of {chat[0]:,} to {chat[1]:,} messages)"
    found.append(Target(goal, ratio, 0.5, "<=", detail))

    scaling = results.get("scaling", {})
    for name in TELAR_STORES:
        by_level = scaling.get(name, {}).get("unbounded")
        if not by_level:
            continue
        levels = sorted(by_level, key=int)
        low, high = levels[0], levels[-1]
        ratios = {op: by_level[high][op]["median"] / by_level[low][op]["median"] for op in SCALE_OPS}
        worst = max(SCALE_TARGET_OPS, key=lambda op: ratios[op])
        detail = ", ".join(f"{op} x{r:.2f}" for op, r in ratios.items())
        goal = f"{name}: put and get_tuple at {high} checkpoints vs at {low} (worst: {worst})"
        found.append(Target(goal, ratios[worst], 1.5, "<=", detail))

    storage = results.get("storage", {})

    def per_checkpoint(name: str) -> float | None:
        return storage.get(name, {}).get("per_checkpoint")

    for name in ("Telar/file", "Telar/sqlite", "Telar/postgres", "Telar/redis"):
        if name in storage:
            ratio, detail = _ratio_of(per_checkpoint, name, "SqliteSaver", "bytes per checkpoint")
            turns = results.get("agent_loop", {})
            if turns.get(name, {}).get("turns") != turns.get("SqliteSaver", {}).get("turns"):
                ratio, detail = None, "not comparable: the two ran a different number of agent-loop turns"
            elif "SqliteSaver" in storage:
                other_a, other_b = storage[name]["other_per_checkpoint"], storage["SqliteSaver"]["other_per_checkpoint"]
                detail += f" (other view, see section 4: {_n(other_a, 0)} vs {_n(other_b, 0)})"
            found.append(Target(f"{name} bytes stored per checkpoint vs SqliteSaver's", ratio, 0.1, "<=", detail))

    concurrency = results.get("concurrency", {})
    ratio, detail = _ratio_of(
        lambda n: concurrency.get(n, {}).get("invokes_per_s"), "Telar/file", "SqliteSaver", "invokes/s"
    )
    found.append(Target("8 worker threads on one file store vs SqliteSaver, throughput", ratio, 1.2, ">=", detail))
    return found


# --- Markdown ------------------------------------------------------------------------------------


def _n(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out + [""]


def _floor_line(results: dict[str, Any]) -> str | None:
    """The line that shows LangGraph's own floor beside InMemorySaver, or None when it was not measured."""
    ratio, detail = floor(results)
    if detail == "not measured":
        return None
    return (f"LangGraph's own floor ({FLOOR}: InMemorySaver, no serialization): {_n(ratio)}x InMemorySaver's "
            f"per-invoke overhead ({detail}).")  # fmt: skip


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    s = results["settings"]
    lines = [
        "# telar-checkpoint benchmarks",
        "",
        f"- date: {results['date']} (took {results['seconds']:.0f} s)",
        f"- command: `{results['command']}`",
        f"- commit: {m['commit']}",
        f"- machine: {m['cpu_count']} CPUs, {m['platform']}, Python {m['python']}",
        f"- servers: {m.get('servers', {})}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items()),
        f"- settings: {s}",
        "",
        "Ratios compare contenders measured in the same run, interleaved round by round.",
        "",
    ]
    for note in results.get("notes", []):
        lines.append(f"> {note}")
    lines.append("")

    lines += ["## Targets", ""]
    lines += _table(
        ["target", "ratio", "limit", "result", "detail"],
        [
            [t["goal"], _n(t["ratio"]), t["limit"], {True: "met", False: "**missed**", None: "n/a"}[t["met"]], t["detail"]]
            for t in results["targets"]
        ],
    )
    floor_line = _floor_line(results)
    if floor_line:
        lines += [floor_line, ""]

    loop = results.get("agent_loop", {})
    if loop:
        lines += [f"## 1. Agent loop: {s['turns']} invokes on one thread (durability={s['durability']})", ""]
        base = loop["baseline"]["invoke_ms"]
        lines.append(f"No checkpointer: invoke median {_n(base['median'])} ms, p95 {_n(base['p95'])} ms.")
        lines.append("")
        rows = []
        for name, r in loop.items():
            if name == "baseline":
                continue
            ratio, _ = _overhead_ratio(results, name, "InMemorySaver")
            turns = f"{r['turns']}" + (" (stopped: budget)" if r["stopped_early"] else "")
            label = f"{name} (LangGraph's own floor)" if name == FLOOR else name
            rows.append([label, turns, _n(r["overhead_ms"]["median"]), _n(r["overhead_ms"]["p95"]),
                         _n(r["invoke_ms"]["median"]), _n(ratio)])  # fmt: skip
        lines += _table(["saver", "turns", "overhead median ms", "overhead p95 ms", "invoke median ms", "x InMemorySaver"], rows)
        if floor_line:
            lines += [floor_line, ""]

    micro = results.get("micro", {})
    if micro:
        lines += [f"## 2. Micro operations ({s['micro_rounds']} rounds; median µs, p95 in brackets)", ""]
        rows = [[name] + [f"{_n(ops[op]['median'], 0)} ({_n(ops[op]['p95'], 0)})" for op in MICRO_OPS] for name, ops in micro.items()]
        lines += _table(["saver", *("put (chat of 10 messages)" if op == "put" else op for op in MICRO_OPS)], rows)

    chat = results.get("long_chat", {})
    if chat:
        first, last = next(iter(chat.values()))["messages"]
        lines += [f"## 2b. put of a long chat: {s['long_chat_rounds']} puts, one message more each ({first:,} to {last:,} messages)", ""]
        base = chat.get("InMemorySaver", {}).get("put_us", {}).get("median")
        rows = [
            [name, _n(r["put_us"]["median"], 0), _n(r["put_us"]["p95"], 0), _n(r["put_us"]["median"] / base if base else None)]
            for name, r in chat.items()
        ]
        lines += _table(["saver", "put median µs", "put p95 µs", "x InMemorySaver"], rows)

    scaling = results.get("scaling", {})
    if scaling:
        lines += ["## 3. Scaling with thread length (median µs of one call)", ""]
        levels = [str(level) for level in s["scale_levels"]]
        for op in SCALE_OPS:
            lines += [f"### {op}", ""]
            rows = []
            for name, variants in scaling.items():
                for variant, by_level in variants.items():
                    medians = [by_level.get(level, {}).get(op, {}).get("median") for level in levels]
                    growth = medians[-1] / medians[0] if medians[0] and medians[-1] else None
                    rows.append([name, variant, *[_n(v, 0) for v in medians], _n(growth)])
            lines += _table(["saver", "history", *levels, f"x ({levels[-1]} / {levels[0]})"], rows)

    storage = results.get("storage", {})
    if storage:
        lines += ["## 4. Storage after the agent loop", ""]
        sq = storage.get("SqliteSaver", {}).get("per_checkpoint")
        pg = storage.get("PostgresSaver", {}).get("per_checkpoint")
        rows = [
            [name, str(r["checkpoints"]), f"{r['bytes']:,}", _n(r["per_checkpoint"], 0), _n(r["other_per_checkpoint"], 0),
             _n(r["per_checkpoint"] / sq if sq and r["per_checkpoint"] else None),
             _n(r["per_checkpoint"] / pg if pg and r["per_checkpoint"] else None), r["how"]]
            for name, r in storage.items()
        ]  # fmt: skip
        columns = ["saver", "checkpoints", "bytes", "per checkpoint", "other view per checkpoint", "x SqliteSaver", "x PostgresSaver",
                   "measured as"]  # fmt: skip
        lines += _table(columns, rows)

    concurrency = results.get("concurrency", {})
    if concurrency:
        lines += [f"## 5. Concurrency: {s['workers']} worker threads x {s['worker_turns']} turns, one process", ""]
        sq = concurrency.get("SqliteSaver", {}).get("invokes_per_s")
        rows = [
            [name, _n(r["invokes_per_s"], 1), ", ".join(_n(x, 1) for x in r["rounds"]), _n(r["invokes_per_s"] / sq if sq else None)]
            for name, r in concurrency.items()
        ]
        lines += _table(["saver", "invokes/s (median)", "rounds", "x SqliteSaver"], rows)
        lines.append("One Python process: the workers share the GIL, so only I/O waits overlap.")
        lines.append("")
    return "\n".join(lines)
