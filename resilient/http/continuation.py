"""Checks for what a turn's input refers to: tool outputs, approval answers and item references.

A ``function_call_output`` must answer a ``call_id`` that a ``function_call`` of the same input or the
chain issued. The input's own calls make stateless tool loops work (a client that resends the whole
history, the model's ``function_call`` then its output, with or without ``previous_response_id`` and with
``store: false``): such a turn without ``previous_response_id`` is a fresh turn whose history is its own
input. Every call must be answered, those of the input and those the previous turn ended with (as the
OpenAI API requires: a model cannot go on with a call left open). An ``mcp_approval_response`` must answer
the approval request the previous turn paused on; the answer decides how the paused plan continues
(``resume`` in the new turn's row). An ``item_reference`` must name an item of the chain's earlier turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resilient.engine.references import find_chain_items
from resilient.protocol import errors
from resilient.storage.errors import NotFound

if TYPE_CHECKING:
    from resilient.protocol.request import CreateResponseRequest
    from resilient.storage.factory import Storage

MAX_TURNS_SEARCHED = 50


@dataclass(frozen=True)
class Continuation:
    """What the new turn's row records: ``resume`` when it answers a paused plan."""

    resume: dict[str, Any] | None = None


async def check_continuation(
    storage: Storage, request: CreateResponseRequest, previous_turn: str | None
) -> Continuation:
    """Validate the request's tool outputs and approval answers against the chain.

    Every refusal is a 400 ``invalid_request_error``, as the OpenAI API answers (its clients raise
    ``BadRequestError``): what the items refer to must exist in the input or the chain, every call must be
    answered, and a ``call_id`` may be answered once. The code names the broken rule.
    """
    outputs = request.function_outputs()
    approvals = request.approval_responses()
    positions = {id(item): i for i, item in enumerate(request.items())}
    answered = {o.call_id for o in outputs}
    for call in request.function_calls():
        if call.call_id not in answered:
            raise _output_required(call.call_id)
    if previous_turn is None and approvals:
        raise _not_found(positions[id(approvals[0])], "approval_request_id",
                         "this conversation has no earlier turn to answer.")
    previous_output = await _output_of(storage, previous_turn) if previous_turn is not None else []

    if outputs:
        issued = {call.call_id for call in request.function_calls()}
        issued |= {str(i.get("call_id")) for i in previous_output if i.get("type") == "function_call"}
        unknown = [o for o in outputs if o.call_id not in issued]
        if unknown and previous_turn is not None:
            issued |= await _earlier_calls(storage, previous_turn)
        for output in outputs:
            if output.call_id not in issued:
                raise errors.invalid_request(  # OpenAI's message, param and status
                    f"No tool call found for function call output with call_id {_bare(output.call_id)}.",
                    param="input", code=errors.CODE_TOOL_CALL_NOT_FOUND)
        seen: set[str] = set()
        for output in outputs:
            if output.call_id in seen:
                raise errors.invalid_request(f"{errors.echo(output.call_id)} is answered more than once.",
                                             code=errors.CODE_DUPLICATE_CALL_OUTPUT,
                                             param=f"input[{positions[id(output)]}]")
            seen.add(output.call_id)
    for item in previous_output:
        if item.get("type") == "function_call" and item.get("call_id") not in answered:
            raise _output_required(item.get("call_id"))
    await _check_references(storage, request, previous_turn, positions)

    if not approvals:
        return Continuation()
    answer = approvals[0]  # the request allows one (parse_create_request)
    pending = [i for i in previous_output if i.get("type") == "mcp_approval_request"]
    if not pending or pending[-1].get("id") != answer.approval_request_id:
        raise errors.invalid_request(
            f"No pending approval request with id {errors.echo(answer.approval_request_id)} in the previous "
            "response.", param=f"input[{positions[id(answer)]}].approval_request_id",
            code=errors.CODE_APPROVAL_NOT_FOUND)
    return Continuation(resume={
        "from": previous_turn,
        "approval_request_id": answer.approval_request_id,
        "approve": answer.approve,
        "reason": answer.reason,
        "name": pending[-1].get("name"),
    })


async def _output_of(storage: Storage, response_id: str) -> list[dict[str, Any]]:
    try:
        return await storage.items.list_output_items(response_id)
    except NotFound:
        return []


async def _earlier_calls(storage: Storage, previous_turn: str) -> set[str]:
    """call_ids issued by the turns before the previous one (following the chain back)."""
    found: set[str] = set()
    turn: str | None = previous_turn
    for _ in range(MAX_TURNS_SEARCHED):
        if turn is None:
            break
        try:
            record = await storage.responses.get(turn)
        except NotFound:
            break
        found |= {str(i.get("call_id")) for i in await _output_of(storage, turn) if i.get("type") == "function_call"}
        earlier = record.doc.get("previous_turn") or record.doc.get("previous_response_id")
        turn = str(earlier) if earlier else None
    return found


async def _check_references(storage: Storage, request: CreateResponseRequest, previous_turn: str | None,
                            positions: dict[int, int]) -> None:
    """Every ``item_reference`` names an item of the chain's earlier turns (never of another chain: the
    search follows this chain only)."""
    references = request.item_references()
    if not references:
        return
    found = await find_chain_items(storage, previous_turn, {ref.id for ref in references})
    for ref in references:
        if ref.id not in found:
            raise errors.invalid_request(f"Item with id {errors.echo(ref.id)} not found in this conversation's "
                                         "earlier turns.", param=f"input[{positions[id(ref)]}].id",
                                         code=errors.CODE_ITEM_NOT_FOUND)


def _output_required(call_id: object) -> errors.ApiError:
    return errors.invalid_request(  # OpenAI's message, param and status
        f"No tool output found for function call {_bare(call_id)}.", code=errors.CODE_TOOL_OUTPUT_REQUIRED,
        param="input")


def _not_found(position: int, field: str, detail: str) -> errors.ApiError:
    code = errors.CODE_TOOL_CALL_NOT_FOUND if field == "call_id" else errors.CODE_APPROVAL_NOT_FOUND
    return errors.invalid_request(f"Nothing to answer for 'input[{position}].{field}': {detail}",
                                  param=f"input[{position}].{field}", code=code)


def _bare(value: object) -> str:
    """A call_id as the OpenAI API's messages show it (unquoted), shortened and limited to printable text:
    the id comes from the client and is reflected."""
    text = str(value)[:64]
    return "".join(ch if ch.isprintable() else "?" for ch in text)
