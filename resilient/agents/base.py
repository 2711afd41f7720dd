"""The agent API: what an author writes.

An agent is a *plan* of phases plus an async generator per phase that yields text deltas. Each finished
phase becomes one output message item, and that item is the phase's checkpoint: after a crash the
engine re-runs at most the one phase that was in flight. Authors never see storage or Durable types.

Why phases: a checkpoint per streamed token would cost a storage write per token; a checkpoint per
response would repeat the whole run after a crash. A phase is the unit an author can reason about
("gather sources", "write synthesis") and the unit of repeated work after a crash.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
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
class AgentRequest:
    """What the agent may read of the request that started the turn."""

    response_id: str
    model: str
    instructions: str | None
    input_items: Sequence[dict[str, Any]]
    history: Sequence[dict[str, Any]]
    metadata: dict[str, str]

    def question(self) -> str:
        """The text of the last user message (what the turn is about)."""
        for item in reversed(self.input_items):
            if item.get("role") == "user":
                return _item_text(item)
        return _item_text(self.input_items[-1]) if self.input_items else ""


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


@dataclass
class PhaseContext:
    """Everything a phase may look at.

    ``pending_input_count`` and ``cancelled`` are *live*: the engine refreshes them from storage while the
    phase streams (at most every few hundred milliseconds, never a read per delta). A phase that sees
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
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def phase(self) -> Phase:
        return self.plan[self.phase_index]

    @property
    def should_stop(self) -> bool:
        """True when the turn was cancelled or a newer turn on the chain is waiting (steering)."""
        return self.cancelled or self.pending_input_count > 0

    def previous_texts(self) -> list[str]:
        return [_item_text(item) for item in self.output_so_far]


class Agent(Protocol):
    """Implement these two methods; see ``resilient/agents/research.py`` for a complete example."""

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        """Return the phases of this turn (1..50). Called once per turn; the plan is persisted."""
        ...

    def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        """An async generator yielding text deltas for ``context.phase``."""
        ...
