"""An Agent Framework ``Workflow`` run superstep by superstep, on a fresh workflow object every step.

A step is one superstep. Every step builds its own workflow with the app's factory (``RESILIENT_AGENT``):
a ``Workflow`` object runs one run at a time and keeps that run's queued messages and pending requests,
so sharing one between responses would make overlapping responses fail and let a cancelled one leave its
messages behind for the next. The step runs the workflow with a :class:`StepCheckpointStorage`: Agent
Framework saves a checkpoint after every superstep, and when the next superstep starts the step is over.
That checkpoint becomes the step's state, which the engine stores with the step; the next step (on
whatever worker, after a kill or a whole-host restart alike) builds a new workflow and restores it there.

Outputs: the text of ``output`` and ``intermediate`` events becomes ``output_text``; the token counts of
its agents' model calls become the response's ``usage`` (:mod:`workflow_events`). ``request_info`` events
(the workflow asks for input) end the turn with one ``function_call`` item each; the next turn's
``function_call_output`` items are parsed into the requested types and sent back as the requests'
responses (:mod:`human_input`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from agent_framework import Message

from resilient.agents.base import (
    AgentRequest,
    NextStep,
    PermanentAgentError,
    Phase,
    PhaseContext,
    PhaseOutput,
    SaveState,
)
from resilient.agents.framework.agent import IDEMPOTENCY_KEY
from resilient.agents.framework.driving import in_own_task
from resilient.agents.framework.human_input import as_function_call, parse_answer, request_id_of
from resilient.agents.framework.step_checkpoints import StepCheckpointStorage
from resilient.agents.framework.workflow_events import TEXT_EVENTS, text_of, usage_of

log = logging.getLogger("resilient.agents.framework")

STATE_KIND = "agent-framework/workflow"
SUPERSTEP = Phase("superstep", "One superstep of the workflow.")
SHARED_WORKFLOW = ("RESILIENT_AGENT's factory returned a workflow object it had returned before. A workflow runs "
                   "one run at a time, and this service builds one per step: build a new one on every call "
                   "(call WorkflowBuilder(...).build() inside the factory, not once at import).")


class FrameworkWorkflow:
    """This service's agent API over an Agent Framework workflow (see the module docstring). ``build`` makes a
    new ``Workflow`` on every call (the app's factory, or ``WorkflowAgent.workflow`` of a new agent)."""

    open_plan = True

    def __init__(self, build: Callable[[], Any], *, resumable: bool = True) -> None:
        self._build = build
        self.resumable = resumable
        self._handed_out: weakref.WeakSet[Any] = weakref.WeakSet()

    def fresh_workflow(self) -> Any:
        """A workflow no other step holds; a factory that hands out one object twice is refused."""
        workflow = self._build()
        if workflow in self._handed_out:
            raise PermanentAgentError(SHARED_WORKFLOW)
        self._handed_out.add(workflow)
        return workflow

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        return [SUPERSTEP]

    def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        return in_own_task(self._keyed(context))

    async def _keyed(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        """The superstep's executors share one idempotency key (``idempotency_key()`` in an executor)."""
        token = IDEMPOTENCY_KEY.set(context.idempotency_key(0))
        storage = StepCheckpointStorage()
        try:
            async for output in self._superstep(context, storage):
                yield output
        finally:
            IDEMPOTENCY_KEY.reset(token)
            storage.close()

    async def _superstep(self, context: PhaseContext, storage: StepCheckpointStorage) -> AsyncIterator[PhaseOutput]:
        state = context.state if isinstance(context.state, dict) and context.state.get("kind") == STATE_KIND else {}
        workflow = self.fresh_workflow()
        # Restored only when this step continues it: a new turn starts a new run, even after an odd checkpoint.
        own_turn = state.get("turn") == context.request.response_id
        answers = _answers(context) if state.get("pending") and not own_turn else {}
        checkpoint = state.get("checkpoint") if own_turn or answers else None
        if checkpoint and own_turn:
            checkpoint_id = await storage.restore(checkpoint)
            stream = workflow.run(checkpoint_id=checkpoint_id, checkpoint_storage=storage, stream=True)
        elif checkpoint:
            responses = await _typed_responses(workflow, await storage.restore(checkpoint), storage, answers)
            stream = workflow.run(responses=responses, checkpoint_storage=storage, stream=True)
        else:
            stream = workflow.run(_input(workflow, context), checkpoint_storage=storage, stream=True)
        async for output in _one_superstep(stream, storage, context):
            yield output


async def _one_superstep(stream: Any, storage: StepCheckpointStorage,
                         context: PhaseContext) -> AsyncIterator[PhaseOutput]:
    """Drive the run until its next superstep would start (then this step is over) or it stops."""
    saved_before = storage.saved
    completed = 0  # supersteps this step ran to the end (a fresh run checkpoints once before its first)
    requests: dict[str, Any] = {}
    failure: Any = None
    async for event in stream:
        kind = getattr(event, "type", None)
        if kind == "superstep_completed":
            completed += 1
        _check_saved(storage)
        if kind == "superstep_started" and completed and storage.saved > saved_before:
            # The previous superstep is checkpointed: that is this step. Stop before the next one runs.
            await _close(stream)
            yield SaveState(_state(context, storage, None))
            yield NextStep()
            return
        if kind in TEXT_EVENTS:
            data = getattr(event, "data", None)
            text = text_of(data)
            if text:
                yield text
            for usage in usage_of(data):
                yield usage
        elif kind == "request_info":
            requests[str(event.request_id)] = event  # every request of the superstep, each once
        elif kind == "failed":  # the stream raises the executor's own exception next (with its message)
            failure = getattr(event, "details", None)
    if failure is not None:
        raise RuntimeError(f"the workflow failed: {getattr(failure, 'message', failure)}")
    _check_saved(storage)
    pending = [{"request_id": rid, "call_id": str(as_function_call(e).call_id)} for rid, e in requests.items()]
    yield SaveState(_state(context, storage, pending or None))
    for event in requests.values():
        yield as_function_call(event)


def _check_saved(storage: StepCheckpointStorage) -> None:
    if storage.failure is not None:
        raise PermanentAgentError(f"the workflow's state could not be checkpointed ({storage.failure}). Register "
                                  "each type your executors keep or send with "
                                  "agent_framework.register_checkpoint_type(YourType).")


def _answers(context: PhaseContext) -> dict[str, str]:
    """This turn's answers to the workflow's requests: request id → the output text."""
    found = {}
    for output in context.request.tool_outputs():
        request_id = request_id_of(output.call_id)
        if request_id is not None:
            found[request_id] = output.output
    return found


async def _typed_responses(workflow: Any, checkpoint_id: str, storage: StepCheckpointStorage,
                           answers: dict[str, str]) -> dict[str, Any]:
    """Restore the paused workflow, read what its pending requests ask for, and parse each answer into the
    type its request names (Agent Framework re-announces pending requests when it restores a checkpoint)."""
    pending: dict[str, Any] = {}
    async for event in workflow.run(checkpoint_id=checkpoint_id, checkpoint_storage=storage, stream=True):
        if getattr(event, "type", None) == "request_info":
            pending[str(event.request_id)] = event
    responses = {rid: parse_answer(text, pending[rid].response_type) for rid, text in answers.items() if rid in pending}
    if not responses:
        raise PermanentAgentError("the answers in this turn name no request the workflow is waiting for")
    return responses


def _state(context: PhaseContext, storage: StepCheckpointStorage,
           pending: list[dict[str, str]] | None) -> dict[str, Any]:
    state: dict[str, Any] = {"kind": STATE_KIND, "turn": context.request.response_id,
                             "checkpoint": storage.encoded()}
    if pending:
        state["pending"] = pending
    return state


def _input(workflow: Any, context: PhaseContext) -> Any:
    """This turn's input in the form the workflow's start executor takes: its text, or messages."""
    text = context.request.question()
    accepted = [getattr(t, "__name__", str(t)) for t in getattr(workflow, "input_types", []) or []]
    if any(name == "str" for name in accepted) or not accepted:
        return text
    if any("Message" in name or "list" in name for name in accepted):
        return [Message("user", [text])]
    return text


async def _close(stream: Any) -> None:
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        try:
            await closer()
        except Exception:  # the workflow is abandoned at a checkpoint; its cleanup must not fail the step
            log.debug("closing the workflow stream failed", exc_info=True)
