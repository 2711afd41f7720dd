"""Checks for a turn that answers the previous one: tool outputs and approval answers.

A ``function_call_output`` must answer a ``call_id`` the chain issued; when the previous turn ended with
function calls, every one of them must be answered (as the OpenAI API requires: a model cannot go on with
a call left open). An ``mcp_approval_response`` must answer the approval request the previous turn paused
on; the answer decides how the paused plan continues (``resume`` in the new turn's row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resilient.agents.base import output_text
from resilient.protocol import errors
from resilient.storage.errors import NotFound
from resilient.typed_answers import answer_problem

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
    ``BadRequestError``): what the items refer to must exist in the chain, every call of the previous turn
    must be answered, and a ``call_id`` may be answered once. The code names the broken rule.
    """
    outputs = request.function_outputs()
    approvals = request.approval_responses()
    if previous_turn is None:
        if outputs or approvals:
            raise _not_found(0, "call_id" if outputs else "approval_request_id",
                             "this conversation has no earlier turn to answer.")
        return Continuation()
    previous_output = await _output_of(storage, previous_turn)
    positions = {id(item): i for i, item in enumerate(request.items())}

    if outputs:
        issued = {str(i.get("call_id")) for i in previous_output if i.get("type") == "function_call"}
        unknown = [o for o in outputs if o.call_id not in issued]
        if unknown:
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
    _check_typed_answers(previous_output, outputs, positions)
    answered = {o.call_id for o in outputs}
    for item in previous_output:
        if item.get("type") == "function_call" and item.get("call_id") not in answered:
            raise errors.invalid_request(  # OpenAI's message, param and status
                f"No tool output found for function call {_bare(item.get('call_id'))}.",
                code=errors.CODE_TOOL_OUTPUT_REQUIRED, param="input")

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


def _check_typed_answers(previous_output: list[dict[str, Any]], outputs: list[Any], positions: dict[int, int]) -> None:
    """A workflow asked for a typed answer (``request_info``): an output of the wrong type is refused here, so
    the workflow keeps waiting (:mod:`resilient.typed_answers`)."""
    calls = {str(i.get("call_id")): i for i in previous_output if i.get("type") == "function_call"}
    for output in outputs:
        call = calls.get(output.call_id)
        problem = answer_problem(call, output_text(output.output)) if call is not None else None
        if problem:
            raise errors.invalid_request(
                f"The output for call_id {_bare(output.call_id)} does not answer the workflow's request "
                f"{errors.echo(call.get('name') if call else '')}: {problem} The workflow is still waiting for "
                "an answer.", param=f"input[{positions[id(output)]}].output", code=errors.CODE_INVALID_VALUE)


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


def _not_found(position: int, field: str, detail: str) -> errors.ApiError:
    code = errors.CODE_TOOL_CALL_NOT_FOUND if field == "call_id" else errors.CODE_APPROVAL_NOT_FOUND
    return errors.invalid_request(f"Nothing to answer for 'input[{position}].{field}': {detail}",
                                  param=f"input[{position}].{field}", code=code)


def _bare(value: object) -> str:
    """A call_id as the OpenAI API's messages show it (unquoted), shortened and limited to printable text:
    the id comes from the client and is reflected."""
    text = str(value)[:64]
    return "".join(ch if ch.isprintable() else "?" for ch in text)
