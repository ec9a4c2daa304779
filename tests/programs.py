"""Small programs as LangGraph users write them, with public LangGraph and langchain APIs only, for
the compatibility tests (tests/test_compat.py). Importable from a new process, which rebuilds a
program and continues its thread from `Program.resume_at`.

Each program is deterministic: the chat model is scripted, and what a node does depends only on the
thread's state and on the program's `context`, which is made afresh whenever the graph is built (so a
new process that rebuilds it behaves as the first one would).
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NamedTuple

import pydantic
import pydantic.v1
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, RetryPolicy, Send, interrupt
from typing_extensions import TypedDict

# --- A scripted tool-calling chat model ---


class ScriptedChatModel(BaseChatModel):
    """Answers a question by calling one tool, then answers from the tool's result.

    The tool is the bound tool whose name has a word of the question (else the first one), called
    with its first argument set to the question's last word; after a tool result it gives a final
    answer quoting that result. Deterministic, so every saver sees the same messages.
    """

    tools: list[tuple[str, str]] = []  # (tool name, name of its first argument)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        described = [convert_to_openai_tool(t)["function"] for t in tools]
        first_arguments = [(d["name"], next(iter(d["parameters"]["properties"]))) for d in described]
        return self.model_copy(update={"tools": first_arguments})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        last = messages[-1]
        usage = {"input_tokens": 10 * len(messages), "output_tokens": 5, "total_tokens": 10 * len(messages) + 5}
        if isinstance(last, HumanMessage) and self.tools:
            words = last.text.rstrip("?!. ").split()
            name, argument = next((t for t in self.tools if set(t[0].split("_")) & set(words)), self.tools[0])
            call = {"name": name, "args": {argument: words[-1]}, "id": f"call_{len(messages)}", "type": "tool_call"}
            message = AIMessage("", tool_calls=[call], usage_metadata=usage)
        elif isinstance(last, ToolMessage):
            message = AIMessage(f"Done: {last.text}", usage_metadata=usage)
        else:
            message = AIMessage(f"You said: {last.text}", usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"It is sunny in {city}, 24 degrees."


@tool
def send_email(to: str) -> str:
    """Send an email, once a human approves it."""
    verdict = interrupt({"action": "send_email", "to": to})
    return f"Email to {to}: {verdict}."


# --- Programs and their steps ---


@dataclass
class Step:
    """One call on the thread: `make_input(context)` gives its input; `raises` the exception type the
    program expects it to end with (the same on every saver)."""

    make_input: Callable[[dict], Any]
    raises: type[BaseException] | None = None


@dataclass
class Program:
    """`build(checkpointer, context)` compiles the program; `steps` are run in order on one thread,
    with LangGraph's `durability` mode; a new process rebuilds it and takes over at step `resume_at`."""

    build: Callable[[Any, dict], Any]
    steps: list[Step]
    resume_at: int = 1
    durability: str = "async"  # LangGraph's default


def question(text: str) -> Step:
    """A user's message. It has an id: LangGraph's `add_messages` gives a message without one an id
    in place, while a background thread may be serialising the same object for the saver, so what
    even InMemorySaver stores of it would depend on timing."""
    return Step(lambda context: {"messages": [HumanMessage(text, id=f"question-{text}")]})


def resume(value: Any) -> Step:
    return Step(lambda context: Command(resume=value))


def react_agent(checkpointer: Any, context: dict) -> Any:
    from langgraph.prebuilt import create_react_agent

    return create_react_agent(ScriptedChatModel(), [get_weather, send_email], checkpointer=checkpointer)


def langchain_agent(checkpointer: Any, context: dict) -> Any:
    """`langchain.agents.create_agent`, asking a human before it sends an email (its own middleware)."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    approval = HumanInTheLoopMiddleware(interrupt_on={"send_email": False, "send_letter": True})
    tools = [get_weather, send_letter]
    return create_agent(ScriptedChatModel(), tools, middleware=[approval], checkpointer=checkpointer)


@tool
def send_letter(to: str) -> str:
    """Send a letter (the langchain agent asks a human first)."""
    return f"Letter sent to {to}."


# --- The Functional API, with pydantic values and a human approval in a task ---


class Order(pydantic.BaseModel):
    item: str
    quantity: int


class Quote(pydantic.BaseModel):
    order: Order
    price: float


class Receipt(pydantic.BaseModel):
    quote: Quote
    approved_by: str
    orders_so_far: int


@task
def price(order: Order) -> Quote:
    return Quote(order=order, price=2.5 * order.quantity)


@task
def approve(quote: Quote) -> str:
    return interrupt({"question": "approve this quote?", "quote": quote})


def shop(checkpointer: Any, context: dict) -> Any:
    @entrypoint(checkpointer=checkpointer)
    def take_order(order: Order, *, previous: Receipt | None = None) -> Receipt:
        quote = price(order).result()
        approved_by = approve(quote).result()
        # With LANGGRAPH_STRICT_MSGPACK, LangGraph's own savers give `previous` back as its data.
        orders_so_far = Receipt.model_validate(previous).orders_so_far if previous else 0
        return Receipt(quote=quote, approved_by=approved_by, orders_so_far=orders_so_far + 1)

    return take_order


# --- User values of every data kind in fields typed Any ---


class Plan(pydantic.BaseModel):
    goal: str
    steps: list[str]


class LegacyPlan(pydantic.v1.BaseModel):
    goal: str
    done: bool = False


@dataclass
class Budget:
    tokens: int
    calls: list[str] = field(default_factory=list)


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Point(NamedTuple):
    x: int
    y: int


class Anything(TypedDict, total=False):
    turn: int
    plan: Any
    legacy: Any
    budget: Any
    priority: Any
    point: Any
    local: Any
    history: Annotated[list, operator.add]


def user_values(checkpointer: Any, context: dict) -> Any:
    class Note(pydantic.BaseModel):  # a class defined inside a function, as users do
        text: str

    def think(state: Anything) -> dict:
        turn = state.get("turn", 0) + 1
        return {
            "turn": turn,
            "plan": Plan(goal=f"goal {turn}", steps=["a", "b"][:turn]),
            "legacy": LegacyPlan(goal=f"legacy {turn}", done=turn > 1),
            "budget": Budget(tokens=100 * turn, calls=["think"] * turn),
            "priority": Priority.HIGH if turn > 1 else Priority.LOW,
            "point": Point(turn, -turn),
            "local": Note(text=f"note {turn}"),
            "history": [Budget(tokens=turn), Priority.LOW, Point(0, turn)],
        }

    builder = StateGraph(Anything)
    builder.add_node(think)
    builder.add_edge(START, "think")
    builder.add_edge("think", END)
    return builder.compile(checkpointer=checkpointer)


# --- A node that stores `message.text` (a str subclass in langchain-core 1.x) ---


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    answer: str


def text_answer(checkpointer: Any, context: dict) -> Any:
    model = ScriptedChatModel()

    def respond(state: Chat) -> dict:
        reply = model.invoke(state["messages"])
        return {"messages": [reply], "answer": reply.text}

    builder = StateGraph(Chat)
    builder.add_node(respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=checkpointer)


# --- A node that fails once, retried by invoking again, or by a RetryPolicy ---


class Work(TypedDict, total=False):
    request: str
    log: Annotated[list[str], operator.add]


def fails_once(checkpointer: Any, context: dict) -> Any:
    """`work` raises until a step sets ``context["fixed"]`` (the user fixed what was wrong)."""

    def work(state: Work) -> dict:
        if not context.get("fixed"):
            raise ValueError(f"boom on {state['request']}")
        return {"log": [f"worked on {state['request']}"]}

    builder = StateGraph(Work)
    builder.add_node("prepare", lambda state: {"log": ["prepared"]})
    builder.add_node(work)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=checkpointer)


def fix_then_retry(context: dict) -> None:
    context["fixed"] = True
    return None


def retried_by_policy(checkpointer: Any, context: dict) -> Any:
    """`work` fails on the first attempt of each turn; its RetryPolicy runs it again."""

    def work(state: Work) -> dict:
        turn = len(state["log"])
        if turn not in context.setdefault("failed", set()):
            context["failed"].add(turn)
            raise ValueError(f"flaky on turn {turn}")
        return {"log": [f"worked on {state['request']}"]}

    builder = StateGraph(Work)
    retry = RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False, retry_on=ValueError)
    builder.add_node(work, retry_policy=retry)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=checkpointer)


# --- A node that edits an earlier item of an `operator.add` list in place ---


class Journal(TypedDict, total=False):
    log: Annotated[list[dict], operator.add]


def edit_in_place(checkpointer: Any, context: dict) -> Any:
    def write(state: Journal) -> dict:
        # In place, as users do; from the second run on only: in the first, log[0] is the input's own
        # dict, which LangGraph also hands to put_writes (the __start__ task's write) from another
        # thread, so what either saver stores of that write depends on which thread ran first.
        if len(state["log"]) > 1:
            state["log"][0]["text"] = f"edited at {len(state['log'])}"
        return {"log": [{"text": f"entry {len(state['log'])}"}]}

    builder = StateGraph(Journal)
    builder.add_node(write)
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    return builder.compile(checkpointer=checkpointer)


# --- Map-reduce with Send, and a subgraph that asks a human ---


class Summary(pydantic.BaseModel):
    document: str
    words: int


class Documents(TypedDict, total=False):
    documents: list[str]
    summaries: Annotated[list[Summary], operator.add]
    report: str


def map_reduce(checkpointer: Any, context: dict) -> Any:
    def plan(state: Documents) -> list[Send]:
        return [Send("summarise", {"documents": [d]}) for d in state["documents"]]

    def summarise(state: Documents) -> dict:
        document = state["documents"][0]
        return {"summaries": [Summary(document=document, words=len(document.split()))]}

    def reduce(state: Documents) -> dict:
        return {"report": ", ".join(f"{s.document}: {s.words}" for s in state["summaries"])}

    builder = StateGraph(Documents)
    builder.add_node(summarise)
    builder.add_node(reduce)
    builder.add_conditional_edges(START, plan, ["summarise"])
    builder.add_edge("summarise", "reduce")
    builder.add_edge("reduce", END)
    return builder.compile(checkpointer=checkpointer)


class Review(TypedDict, total=False):
    topic: str
    draft: Summary
    verdict: str


class Publication(Review, total=False):
    log: Annotated[list[str], operator.add]


def subgraph(checkpointer: Any, context: dict) -> Any:
    """A parent graph whose `writer` node is a subgraph that drafts, then asks a human to review."""

    def write(state: Review) -> dict:
        return {"draft": Summary(document=f"about {state['topic']}", words=2)}

    def review(state: Review) -> dict:
        return {"verdict": interrupt({"question": "publish?", "draft": state["draft"]})}

    inner = StateGraph(Review)
    inner.add_node(write)
    inner.add_node(review)
    inner.add_edge(START, "write")
    inner.add_edge("write", "review")

    outer = StateGraph(Publication)
    outer.add_node("start", lambda state: {"log": [f"started on {state['topic']}"]})
    outer.add_node("writer", inner.compile())
    outer.add_node("publish", lambda state: {"log": [f"published {state['draft'].document} ({state['verdict']})"]})
    outer.add_edge(START, "start")
    outer.add_edge("start", "writer")
    outer.add_edge("writer", "publish")
    outer.add_edge("publish", END)
    return outer.compile(checkpointer=checkpointer)


PROGRAMS: dict[str, Program] = {
    "react_agent": Program(
        react_agent, [question("what is the weather in Paris?"), question("and the weather in Rome?")]
    ),
    "react_agent_interrupt_in_tool": Program(
        react_agent, [question("please email bob"), resume("approved"), question("email alice"), resume("rejected")]
    ),
    "langchain_agent": Program(
        langchain_agent,
        [
            question("weather in Oslo?"),
            question("send a letter to carol"),
            resume({"decisions": [{"type": "approve"}]}),
        ],
        resume_at=2,  # the new process gives the human's decision
    ),
    "functional_api": Program(
        shop,
        [
            Step(lambda context: Order(item="tea", quantity=2)),
            resume("ann"),
            Step(lambda context: Order(item="cake", quantity=1)),
            resume("bob"),
        ],
    ),
    "user_values": Program(user_values, [Step(lambda context: {}), Step(lambda context: {})]),
    "message_text": Program(text_answer, [question("hello there"), question("how are you?")]),
    "fails_once": Program(
        fails_once,
        [
            Step(lambda context: {"request": "report", "log": []}, raises=ValueError),
            Step(fix_then_retry),
            Step(lambda context: {"request": "second report"}),
        ],
    ),
    "retry_policy": Program(
        retried_by_policy, [Step(lambda context: {"request": "a", "log": []}), Step(lambda context: {"request": "b"})]
    ),
    # durability "sync": with "async", LangGraph saves a step's checkpoint in a background thread while
    # the next node already edits the same objects, so what even InMemorySaver stores depends on timing.
    "edit_in_place": Program(
        edit_in_place,
        [Step(lambda context: {"log": [{"text": "first"}]}), Step(lambda context: {"log": []})],
        durability="sync",
    ),
    "map_reduce": Program(
        map_reduce,
        [Step(lambda context: {"documents": ["a b", "c d e", "f"]}), Step(lambda context: {"documents": ["g h i j"]})],
    ),
    "subgraph_interrupt": Program(
        subgraph,
        [
            Step(lambda context: {"topic": "cats", "log": []}),
            resume("yes"),
            Step(lambda context: {"topic": "dogs"}),
            resume("no"),
        ],
    ),
}
