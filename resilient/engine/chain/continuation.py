"""Checks for what a turn's input refers to: tool outputs, approval answers and item references.

A ``function_call_output`` must answer a ``call_id`` that a ``function_call`` of the same input or the
chain issued. The input's own calls make stateless tool loops work (a client that resends the whole
history, the model's ``function_call`` then its output, with or without ``previous_response_id`` and with
``store: false``): such a turn without ``previous_response_id`` is a fresh turn whose history is its own
input. Every call must be answered, those of the input and those the previous turn ended with (as the
OpenAI API requires: a model cannot go on with a call left open). An ``mcp_approval_response`` must answer
the approval request the previous turn paused on; the answer decides how the paused plan continues
(``resume`` in the new turn's row). An ``item_reference`` must name an item the turn may reach
(``resilient/engine/chain/references.py``: its chain's, or on a turn without a chain any stored response's); a
referenced ``function_call`` issues its ``call_id`` as one of the input would, and on a turn without a chain,
whose history is its input, it must be answered there too.

An ``mcp_approval_response`` sent without ``previous_response_id`` or ``conversation`` answers the stored
approval request its id names (:func:`answered_turn`): the turn continues the response that paused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from resilient.agents.base import output_text
from resilient.engine.chain import turns
from resilient.engine.chain.lifecycle import stored
from resilient.engine.chain.references import find_referenced
from resilient.engine.chain.refusals import Invalid, NotStored
from resilient.ids import response_of_item
from resilient.protocol import errors
from resilient.storage.errors import NotFound
from resilient.typed_answers import answer_problem

if TYPE_CHECKING:
    from resilient.protocol.request import CreateResponseRequest
    from resilient.storage.factory import Storage

MAX_TURNS_SEARCHED = 50
# In a row's document: the turn's input is its whole history (an approval answer sent without
# previous_response_id, see answered_turn), so the chain's earlier turns are not added to it.
HISTORY_IN_INPUT_KEY = "history_in_input"


@dataclass(frozen=True)
class Continuation:
    """What the new turn's row records: ``resume`` when it answers a paused plan; ``referenced``: the item
    each ``item_reference`` names, by id (the create stores it in the reference's place)."""

    resume: dict[str, Any] | None = None
    referenced: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class AnsweredTurn:
    """The paused response an approval answer continues, and its chain."""

    response_id: str
    chain_id: str


async def answered_turn(storage: Storage, request: CreateResponseRequest) -> AnsweredTurn | None:
    """The paused response that an ``mcp_approval_response`` sent without ``previous_response_id`` or
    ``conversation`` answers; None when the request names its turn or answers no approval request.

    The Vercel AI SDK, with its default ``store: true``, continues an MCP approval this way: it resends the
    history, with an ``item_reference`` to the stored ``mcp_approval_request``, then the answer. The request
    is an item of a stored response (its id names that response, ``resilient.ids.item_id``), so the answer
    continues that response as ``previous_response_id`` would: the turn joins its chain right after it
    (ordered by the chain's lock; a second answer finds a newer turn there and is refused) and the paused
    plan resumes. The input already holds the history, so the chain's turns are not added to it again
    (``HISTORY_IN_INPUT_KEY``). A response of a conversation is answered with ``conversation``.
    """
    approvals = request.approval_responses()
    if request.previous_response_id or request.conversation or not approvals:
        return None
    answer = approvals[0]  # the request allows one (parse_create_request)
    param = f"input[{request.items().index(answer)}].approval_request_id"
    request_id = errors.echo(answer.approval_request_id)
    holder = response_of_item(answer.approval_request_id)
    try:
        record = await stored(storage, holder) if holder is not None else None
    except NotStored:
        record = None
    if record is None:
        raise _invalid(f"No stored approval request with id {request_id}: answer a stored response's request, "
                       "or send previous_response_id (or conversation).", param=param,
                       code=errors.CODE_APPROVAL_NOT_FOUND)
    if record.doc.get("conversation_id"):
        raise _invalid(f"The approval request {request_id} belongs to conversation "
                       f"{errors.echo(record.doc['conversation_id'])}: answer it with that conversation.",
                       param=param, code=errors.CODE_APPROVAL_NOT_FOUND)
    chain_id = str(record.doc.get("chain_id") or record.response_id)
    chain = await storage.chains.get(chain_id)
    newest = chain.latest_response_id or chain_id
    if newest != record.response_id and await turns.exists(storage, newest):
        raise answered_already(request)
    return AnsweredTurn(record.response_id, chain_id)


def answered_already(request: CreateResponseRequest) -> Invalid:
    """The refusal of an answer whose paused response a later turn continues already (found before the turn
    is placed, or by the chain's compare-and-swap when two answers race)."""
    answer = request.approval_responses()[0]
    return _invalid(f"The approval request {errors.echo(answer.approval_request_id)} is no longer pending: a "
                    "later turn continues its response.", code=errors.CODE_APPROVAL_NOT_FOUND,
                    param=f"input[{request.items().index(answer)}].approval_request_id")


async def check_continuation(
    storage: Storage, request: CreateResponseRequest, previous_turn: str | None, *, chain_id: str | None
) -> Continuation:
    """Validate the request's tool outputs, approval answers and item references against the chain
    ``chain_id`` (None: the turn has none, its input is its whole history).

    Every refusal is :class:`Invalid`: a 400 ``invalid_request_error``, as the OpenAI API answers (its clients raise
    ``BadRequestError``): what the items refer to must exist in the input or the chain, every call must be
    answered, and a ``call_id`` may be answered once. The code names the broken rule.
    """
    outputs = request.function_outputs()
    approvals = request.approval_responses()
    positions = {id(item): i for i, item in enumerate(request.items())}
    answered = {o.call_id for o in outputs}
    referenced = await _check_references(storage, request, chain_id, previous_turn, positions)
    named = [referenced[ref.id] for ref in request.item_references()]
    referenced_calls = [str(i.get("call_id")) for i in named if i.get("type") == "function_call"]
    own_calls = [call.call_id for call in request.function_calls()]
    if chain_id is None:  # a stateless turn: its input is its history, every call in it is answered there
        own_calls += referenced_calls
    for call_id in own_calls:
        if call_id not in answered:
            raise _output_required(call_id)
    if previous_turn is None and approvals:
        raise _not_found(positions[id(approvals[0])], "approval_request_id",
                         "this conversation has no earlier turn to answer.")
    previous_output = await _output_of(storage, previous_turn) if previous_turn is not None else []

    if outputs:
        issued = {*own_calls, *referenced_calls}
        issued |= {str(i.get("call_id")) for i in previous_output if i.get("type") == "function_call"}
        unknown = [o for o in outputs if o.call_id not in issued]
        if unknown and previous_turn is not None:
            issued |= await _earlier_calls(storage, previous_turn)
        for output in outputs:
            if output.call_id not in issued:
                raise _invalid(  # OpenAI's message, param and status
                    f"No tool call found for function call output with call_id {_bare(output.call_id)}.",
                    param="input", code=errors.CODE_TOOL_CALL_NOT_FOUND)
        seen: set[str] = set()
        for output in outputs:
            if output.call_id in seen:
                raise _invalid(f"{errors.echo(output.call_id)} is answered more than once.",
                               code=errors.CODE_DUPLICATE_CALL_OUTPUT, param=f"input[{positions[id(output)]}]")
            seen.add(output.call_id)
    _check_typed_answers(previous_output, outputs, positions)
    for item in previous_output:
        if item.get("type") == "function_call" and item.get("call_id") not in answered:
            raise _output_required(item.get("call_id"))

    if not approvals:
        return Continuation(referenced=referenced)
    answer = approvals[0]  # the request allows one (parse_create_request)
    pending = [i for i in previous_output if i.get("type") == "mcp_approval_request"]
    if not pending or pending[-1].get("id") != answer.approval_request_id:
        raise _invalid(
            f"No pending approval request with id {errors.echo(answer.approval_request_id)} in the previous "
            "response.", param=f"input[{positions[id(answer)]}].approval_request_id",
            code=errors.CODE_APPROVAL_NOT_FOUND)
    return Continuation(resume={
        "from": previous_turn,
        "approval_request_id": answer.approval_request_id,
        "approve": answer.approve,
        "reason": answer.reason,
        "name": pending[-1].get("name"),
    }, referenced=referenced)


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


async def _check_references(storage: Storage, request: CreateResponseRequest, chain_id: str | None,
                            previous_turn: str | None, positions: dict[int, int]) -> dict[str, dict[str, Any]]:
    """The item each ``item_reference`` names, by id; a reference to nothing the turn may reach is a 400
    (``find_referenced`` says what it may reach: never another chain's items)."""
    references = request.item_references()
    if not references:
        return {}
    found = await find_referenced(storage, {ref.id for ref in references}, chain_id=chain_id,
                                  previous_turn=previous_turn)
    for ref in references:
        if ref.id not in found:
            where = "this conversation's earlier turns" if chain_id is not None else "any stored response"
            raise _invalid(f"Item with id {errors.echo(ref.id)} not found in {where}.",
                           param=f"input[{positions[id(ref)]}].id", code=errors.CODE_ITEM_NOT_FOUND)
    return found


def _check_typed_answers(previous_output: list[dict[str, Any]], outputs: list[Any], positions: dict[int, int]) -> None:
    """A workflow asked for a typed answer (``request_info``): an output of the wrong type is refused here, so
    the workflow keeps waiting (:mod:`resilient.typed_answers`)."""
    calls = {str(i.get("call_id")): i for i in previous_output if i.get("type") == "function_call"}
    for output in outputs:
        call = calls.get(output.call_id)
        problem = answer_problem(call, output_text(output.output)) if call is not None else None
        if problem:
            raise _invalid(
                f"The output for call_id {_bare(output.call_id)} does not answer the workflow's request "
                f"{errors.echo(call.get('name') if call else '')}: {problem} The workflow is still waiting for "
                "an answer.", param=f"input[{positions[id(output)]}].output", code=errors.CODE_INVALID_VALUE)


def _invalid(message: str, *, param: str, code: str) -> Invalid:
    """A refusal the HTTP layer answers with 400 ``invalid_request_error`` (``http/results.translated``)."""
    return Invalid(code, message, param)


def _output_required(call_id: object) -> Invalid:
    return _invalid(  # OpenAI's message, param and status
        f"No tool output found for function call {_bare(call_id)}.", code=errors.CODE_TOOL_OUTPUT_REQUIRED,
        param="input")


def _not_found(position: int, field: str, detail: str) -> Invalid:
    code = errors.CODE_TOOL_CALL_NOT_FOUND if field == "call_id" else errors.CODE_APPROVAL_NOT_FOUND
    return _invalid(f"Nothing to answer for 'input[{position}].{field}': {detail}",
                    param=f"input[{position}].{field}", code=code)


def _bare(value: object) -> str:
    """A call_id as the OpenAI API's messages show it (unquoted), shortened and limited to printable text:
    the id comes from the client and is reflected."""
    text = str(value)[:64]
    return "".join(ch if ch.isprintable() else "?" for ch in text)
