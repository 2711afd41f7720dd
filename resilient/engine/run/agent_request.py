"""What the agent is given for a phase: its request (input items, the chain's history, the row's settings)
and the phase's context, or, for a turn whose approval was denied, the short answer given in its phase_row."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from resilient.agents.base import Agent, AgentRequest, Approval, PhaseContext, PhaseOutput
from resilient.engine.chain import conversation_items
from resilient.engine.chain.continuation import HISTORY_IN_INPUT_KEY
from resilient.engine.chain.references import is_reference, resolve_references, stored_input_items
from resilient.engine.chain.turns import STEERING_KEY
from resilient.engine.run.phase_record import STATE_KEY, PhaseRecord
from resilient.storage.errors import NotFound
from resilient.storage.ports import Control, JsonDict, ResponseRecord

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

MAX_HISTORY_TURNS = 50

# The create parameters that shape a model call, as the row's document keeps them (their OpenAI names).
# An agent reads them as ``AgentRequest.params``; the sample agent's model path maps them onto its model call
# (``resilient.agents.chat_params``).
MODEL_PARAMS = (
    "temperature", "top_p", "presence_penalty", "frequency_penalty", "max_output_tokens", "top_logprobs",
    "parallel_tool_calls", "reasoning", "text", "truncation", "max_tool_calls", "prompt_cache_key",
    "prompt_cache_retention", "safety_identifier", "service_tier", "user", "include",
)


async def agent_request(storage: Storage, record: ResponseRecord) -> AgentRequest:
    items = await all_input_items(storage, record.response_id)
    state: list[Any] = []
    earlier = await history(storage, record, state)
    return request_from(record, items, earlier, state[0] if state else None)


def request_from(record: ResponseRecord, items: list[JsonDict], history: list[JsonDict],
                 previous_state: Any = None) -> AgentRequest:
    """The agent's view of a row: built once per step (never per event)."""
    return AgentRequest(
        response_id=record.response_id,
        model=str(record.doc.get("model") or ""),
        instructions=record.doc.get("instructions"),
        input_items=items,
        history=history,
        metadata=dict(record.doc.get("agent_metadata") or record.doc.get("metadata") or {}),
        tools=list(record.doc.get("tools") or []),
        tool_choice=record.doc.get("tool_choice") or "auto",
        previous_state=previous_state,
        params=model_params(record.doc),
    )


def model_params(doc: JsonDict) -> dict[str, Any]:
    """The model parameters the request set (absent and null ones left out: the model's defaults apply)."""
    return {name: doc[name] for name in MODEL_PARAMS if doc.get(name) is not None}


async def all_input_items(storage: Storage, response_id: str) -> list[JsonDict]:
    """The response's input items in the OpenAI item shape. A create stores the item a reference names in
    its place; an input stored before that still holds references, resolved here along the chain
    (``references.py``)."""
    items = await stored_input_items(storage, response_id)
    if not any(is_reference(item) for item in items):
        return items
    try:
        record = await storage.responses.get(response_id)
    except NotFound:
        return items
    return await resolve_references(storage, items, previous_turn(record))


async def history(storage: Storage, record: ResponseRecord, state: list[Any] | None = None) -> list[JsonDict]:
    """The chain's earlier turns, oldest first: each turn's input items then its output items. ``state``,
    when given, receives the agent state the previous turn ended with (when it saved one). A turn whose
    input is its whole history (``HISTORY_IN_INPUT_KEY``) has none before it, and the walk stops at one:
    what precedes it is already in its input."""
    turns: list[tuple[str, Sequence[JsonDict]]] = []
    previous = previous_turn(record)
    own_history = bool(record.doc.get(HISTORY_IN_INPUT_KEY))
    for _ in range(MAX_HISTORY_TURNS):
        if not previous:
            break
        try:
            earlier = await storage.responses.get(str(previous))
        except NotFound:
            break
        if state is not None and not turns and earlier.doc.get(STATE_KEY) is not None:
            state.append(earlier.doc[STATE_KEY])
        if own_history:
            return []
        turn = await all_input_items(storage, earlier.response_id)
        turn += await storage.items.list_output_items(earlier.response_id)
        turns.append((earlier.response_id, turn))
        previous = None if earlier.doc.get(HISTORY_IN_INPUT_KEY) else previous_turn(earlier)
    turns.reverse()
    conversation = record.doc.get("conversation_id")
    if conversation:  # with the items added to the conversation through the API, in their places
        return await conversation_items.history(storage, str(conversation), turns, reached_start=not previous)
    return [item for _, earlier_turn in turns for item in earlier_turn]


def previous_turn(record: ResponseRecord) -> str | None:
    """The turn before this one on its chain (conversation or previous_response_id), if any."""
    found = record.doc.get("previous_turn") or record.doc.get("previous_response_id")
    return str(found) if found else None


def phase_context(request: AgentRequest, phase_row: PhaseRecord, control: Control, output_so_far: list[JsonDict],
                  state: Any, *, is_recovery: bool) -> PhaseContext:
    """What the agent's phase may look at; ``control`` is the row's control columns as the attempt read
    them (the pump keeps them live while the phase streams)."""
    doc = phase_row.row.doc
    return PhaseContext(
        request=request,
        plan=phase_row.plan,
        phase_index=phase_row.plan_phase,
        is_recovery=is_recovery,
        output_so_far=output_so_far,
        pending_input_count=control.pending_input_count,
        cancelled=control.cancel_requested,
        approval=approval_for(doc, phase_row.plan_phase),
        state=state,
        is_steered_turn=bool(doc.get(STEERING_KEY)),
        conversation_chain_id=doc.get("chain_id"),
        progress=phase_row.progress,
    )


def phase_outputs(agent: Agent, doc: JsonDict, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
    """The outputs the phase streams: the agent's, or the denial of a resumed turn whose approval was denied."""
    resume = doc.get("resume")
    return denial(doc) if resume and not resume.get("approve") else agent.run_phase(context)


def approval_for(doc: JsonDict, phase: int) -> Approval | None:
    """The approval a resumed turn carries, for the phase that asked (the first one it runs)."""
    resume = doc.get("resume")
    if not resume or not resume.get("approve") or phase != int(doc.get("phase_offset", 0)):
        return None
    return Approval(str(resume["approval_request_id"]), True, resume.get("reason"))


async def denial(doc: JsonDict) -> AsyncIterator[PhaseOutput]:
    """The one phase of a turn whose approval request was denied: a short message, no agent code."""
    resume = doc["resume"]
    reason = resume.get("reason")
    yield f"Not approved: {resume.get('name') or 'the next step'} was not run" + (f" ({reason})." if reason else ".")
