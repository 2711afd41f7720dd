"""The agent API: what an author writes.

An agent is a *plan* of phases plus an async generator per phase that yields text deltas. Each finished
phase becomes one output message item, and that item is the phase's checkpoint: after a crash the
engine re-runs at most the one phase that was in flight. Authors never see storage or Durable types.

Why phases: a checkpoint per streamed token would cost a storage write per token; a checkpoint per
response would repeat the whole run after a crash. A phase is the unit an author can reason about
("gather sources", "write synthesis") and the unit of repeated work after a crash.

Besides text (``str``), a phase may yield:

* :class:`FunctionCall` (or streamed :class:`FunctionCallDelta` chunks): a call of one of the request's
  function tools. The turn ends after this phase; the client runs the function and answers in its next
  turn with a ``function_call_output`` item (see :meth:`AgentRequest.tool_outputs`).
* :class:`ApprovalRequest`: ask a person before going on. The phase stops there, the turn completes
  with an ``mcp_approval_request`` item, and the plan waits in storage. When the next turn approves, this
  same phase runs again with :attr:`PhaseContext.approval` set; when it denies, no further phase runs.
* :class:`Usage`: the model's token counts for this phase (added up into the response's ``usage``).
* :class:`Reasoning`: the model's reasoning (a ``reasoning`` output item a client may send back next turn).
* :class:`ToolRun`: a tool the agent ran itself (server side) and its result: an ``mcp_call`` output item.
  Part of this step's checkpoint, so a finished step's tool calls are never run again.
* :class:`SaveState`: JSON state to keep with this step's checkpoint (an agent's conversation, a workflow
  checkpoint id, the author's own metadata). The next step gets it as :attr:`PhaseContext.state`, and so
  does the first step of the chain's next turn.
* :class:`SaveProgress`: JSON to keep *at once*, in the middle of a step (what an agent has done that must not
  be done again: a model's decision, a tool's result). The engine writes it before it asks for the step's
  next output; if the worker dies before the step's checkpoint, the step's next attempt gets the last one
  as :attr:`PhaseContext.progress`.
* :class:`NextStep`: another step follows this one. An agent whose ``open_plan`` is true decides its
  steps as it goes: its plan names one phase, and each step that yields ``NextStep`` gets a successor.

Steps decided at run time: set ``open_plan = True`` on the agent. A *step* is then what the agent
completes as it goes (one model call and the tools it asked for); each finished step is checkpointed with
its items and state, and after a crash only the step in flight runs again. An agent that must not run
again after a crash sets ``resumable = False``: the run then fails with a message saying so.

Errors: raise :class:`TransientAgentError` (with ``retry_after``) for a failure worth retrying later (a
rate limit, a dropped connection) and :class:`PermanentAgentError` for one that retrying cannot fix (bad
credentials, an unknown deployment); the engine fails the phase at once with the message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Phase:
    """One step of a plan. ``name`` is stable (used in logs and custom status); ``goal`` guides the agent."""

    name: str
    goal: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "goal": self.goal}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Phase:
        return cls(name=str(data["name"]), goal=str(data.get("goal", "")))


@dataclass(frozen=True)
class FunctionCall:
    """A complete call of the request's function tool ``name``; ``arguments`` is a JSON object text.
    ``call_id``: the model's own id for the call, when the agent keeps it (the client's
    ``function_call_output`` then names the call the model knows); else one is made.
    ``agent_defined``: the agent asks the client this itself (a workflow's ``request_info``), so ``name`` need
    not be one of the request's tools, and ``tool_choice`` does not apply."""

    name: str
    arguments: str = "{}"
    call_id: str | None = None
    agent_defined: bool = False

    @classmethod
    def of(cls, name: str, arguments: Mapping[str, Any]) -> FunctionCall:
        return cls(name, json.dumps(dict(arguments), ensure_ascii=False))


@dataclass(frozen=True)
class FunctionCallDelta:
    """One streamed chunk of a function call (a model streams its arguments). Chunks with the same
    ``key`` build one call; the first chunk of a key must name the function."""

    key: int
    arguments: str = ""
    name: str | None = None


@dataclass(frozen=True)
class ApprovalRequest:
    """Ask a person whether to go on (see the module docstring). ``arguments`` is a JSON object text."""

    name: str
    arguments: str = "{}"
    server_label: str = "agent"


@dataclass(frozen=True)
class Usage:
    """Token counts one model call reported; yield it once per call (it is not text)."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class Reasoning:
    """A model's reasoning item: its summary texts and its ``encrypted_content`` (the part a model takes back)."""

    summary: tuple[str, ...] = ()
    encrypted_content: str | None = None


@dataclass(frozen=True)
class Approval:
    """The answer to an :class:`ApprovalRequest`, given to the phase that asked when it runs again."""

    request_id: str
    approved: bool
    reason: str | None = None


@dataclass(frozen=True)
class ToolOutput:
    """A ``function_call_output`` the client sent this turn, with the name of the function it answers."""

    call_id: str
    name: str | None
    output: str


@dataclass(frozen=True)
class ToolRun:
    """A tool the agent ran on the server, with its result (an ``mcp_call`` output item). ``error`` set:
    the tool failed and the model was told so. ``arguments`` is a JSON object text."""

    name: str
    arguments: str
    output: str | None
    error: str | None = None
    server_label: str = "agent"


@dataclass(frozen=True)
class SaveState:
    """JSON state to checkpoint with this step (see the module docstring). The last one yielded wins."""

    value: Any


@dataclass(frozen=True)
class SaveProgress:
    """JSON to keep durably now, before the step goes on (see the module docstring). The engine writes it
    (one storage write) before it asks for the next output and then sets ``saved``: an agent that runs
    ahead of the engine (in a task of its own) waits for ``saved`` before it does what must not repeat.
    The last one yielded wins; it is kept for this step only."""

    value: Any
    saved: asyncio.Event = field(default_factory=asyncio.Event, compare=False, repr=False)


@dataclass(frozen=True)
class NextStep:
    """Another step follows this one (agents with ``open_plan``)."""


type PhaseOutput = (str | FunctionCall | FunctionCallDelta | ApprovalRequest | Usage | Reasoning | ToolRun
                    | SaveState | SaveProgress | NextStep)


class AgentError(Exception):
    """Base of the errors an agent raises on purpose; the message reaches the client's ``error``.
    ``code`` is the response's ``error.code`` (a value the client's ``ResponseError`` allows)."""

    code: str = "server_error"


class PermanentAgentError(AgentError):
    """Retrying cannot help (401, 403, 404, a bad request): the phase fails at once."""


class TransientAgentError(AgentError):
    """Worth retrying later (429, 5xx, a dropped connection): background runs wait ``retry_after``
    seconds (a durable timer, bounded) and run the phase again."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class AgentRequest:
    """What the agent may read of the request that started the turn. ``input_items`` and ``history`` are items
    in the OpenAI Responses item JSON shape (``openai.types.responses``: messages with text, image and file
    parts, function calls and outputs, reasoning, ...); ``docs/AGENT_INPUT.md`` says how each kind reaches
    each kind of agent."""

    response_id: str
    model: str
    instructions: str | None
    input_items: Sequence[dict[str, Any]]
    history: Sequence[dict[str, Any]]
    metadata: dict[str, str]
    tools: Sequence[dict[str, Any]] = ()
    tool_choice: str | dict[str, Any] = "auto"
    # The state the chain's previous turn ended with (its last :class:`SaveState`), if any.
    previous_state: Any = None
    # The create parameters a model uses, under their OpenAI names (``temperature``, ``max_output_tokens``,
    # ``reasoning``, ``text``, ...): only those the request carried (see ``engine.agent_request.MODEL_PARAMS``).
    params: Mapping[str, Any] = field(default_factory=dict)

    def question(self) -> str:
        """The text of the last user message (what the turn is about). A turn that only answers a tool
        call or an approval request has none of its own: then it is the chain's last user message."""
        for items in (self.input_items, self.history):
            for item in reversed(items):
                if item.get("type", "message") == "message" and item.get("role") == "user":
                    return item_text(item)
        messages = [i for i in self.input_items if i.get("type", "message") == "message"]
        return item_text(messages[-1]) if messages else ""

    def offered_tool(self) -> dict[str, Any] | None:
        """The function tool to call when the agent decides to call one: the one ``tool_choice`` names,
        else the first offered; None when no tool is offered or ``tool_choice`` is ``none``."""
        if not self.tools or self.tool_choice == "none":
            return None
        if isinstance(self.tool_choice, dict):
            wanted = self.tool_choice.get("name")
            return next((t for t in self.tools if t.get("name") == wanted), None)
        return dict(self.tools[0])

    def tool_outputs(self) -> list[ToolOutput]:
        """The ``function_call_output`` items of this turn, in input order. A call's name is found in the
        chain's history or in this turn's own input (a stateless tool loop sends the call with its output)."""
        names = {str(i.get("call_id")): str(i.get("name"))
                 for i in (*self.history, *self.input_items) if i.get("type") == "function_call"}
        found: list[ToolOutput] = []
        for item in self.input_items:
            if item.get("type") == "function_call_output":
                call_id = str(item.get("call_id"))
                found.append(ToolOutput(call_id, names.get(call_id), output_text(item.get("output"))))
        return found


TEXT_PART_TYPES = frozenset({"input_text", "output_text"})


def output_text(output: object) -> str:
    """A ``function_call_output``'s ``output`` as text (a string, or the text of its text parts; image and
    file parts have no text)."""
    if isinstance(output, str):
        return output
    return parts_text(output)


def item_text(item: dict[str, Any]) -> str:
    """The text of a message item: its string content, or its text parts joined (a refusal, an image or a
    file part adds nothing)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    return parts_text(content)


def parts_text(parts: object) -> str:
    """The text of a list of content parts (``input_text`` and ``output_text`` parts)."""
    found = parts if isinstance(parts, list) else []
    return "".join(str(p.get("text") or "") for p in found
                   if isinstance(p, dict) and p.get("type", "input_text") in TEXT_PART_TYPES)


@dataclass
class PhaseContext:
    """Everything a phase may look at.

    ``pending_input_count`` and ``cancelled`` are *live*: the engine updates them while the phase streams
    (at once for a cancel or steer handled by the same process, else within the control interval; never
    a read per delta). A phase that sees
    :attr:`should_stop` may yield a closing sentence and return; the engine also stops it at the next
    delta boundary.
    """

    request: AgentRequest
    plan: Sequence[Phase]
    phase_index: int
    is_recovery: bool
    output_so_far: Sequence[dict[str, Any]]
    pending_input_count: int = 0
    cancelled: bool = False
    delta_delay_seconds: float = 0.0
    approval: Approval | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    # The state the previous step saved (:class:`SaveState`); in a turn's first step, the state the chain's
    # previous turn ended with. None when there is none.
    state: Any = None
    # This turn was queued behind a running turn of its chain and that turn was told to finish early.
    is_steered_turn: bool = False
    # The chain this turn belongs to (its conversation, or the first response of a previous_response_id
    # chain); None for a turn with no chain (store=false).
    conversation_chain_id: str | None = None
    # Live, like ``cancelled``: the worker is shutting down (SIGTERM: the instance is scaled in or the host
    # stops). The step should stop at once; it runs again elsewhere. Distinct from a cancel, which ends the run.
    shutting_down: bool = False
    # On an attempt of a step that an earlier attempt did not finish (the worker died): the last
    # :class:`SaveProgress` value that attempt kept; else None.
    progress: Any = None

    @property
    def phase(self) -> Phase:
        """This phase of the plan (an open plan names one phase that every step runs)."""
        return self.plan[min(self.phase_index, len(self.plan) - 1)]

    @property
    def should_stop(self) -> bool:
        """True when the turn was cancelled, a newer turn on the chain is waiting (steering), or the worker
        is shutting down (the step then runs again elsewhere)."""
        return self.cancelled or self.pending_input_count > 0 or self.shutting_down

    def previous_texts(self) -> list[str]:
        return [item_text(item) for item in self.output_so_far]

    def idempotency_key(self, position: int) -> str:
        """A key for the ``position``-th side effect this step starts, the same on every attempt of this
        step (a crash repeats the step in flight): hand it to the service the side effect calls."""
        return f"{self.request.response_id}/step-{self.phase_index}/{position}"


class Agent(Protocol):
    """Implement these two methods; see ``resilient/agents/research.py`` for a complete example.

    Optional attributes the engine reads: ``open_plan`` (bool, default False: steps decided at run time,
    see the module docstring) and ``resumable`` (bool, default True: False fails a crashed run instead
    of running its step again)."""

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        """Return the phases of this turn (1..50). Called once per turn; the plan is persisted."""
        ...

    def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        """An async generator yielding text deltas (and optionally calls, approval requests, usage)."""
        ...
