"""An Agent Framework ``Workflow`` run superstep by superstep.

A step is one superstep. The workflow runs with :class:`StepCheckpointStorage` as its checkpoint storage:
Agent Framework saves a checkpoint after every superstep, and when the next superstep starts the step is
over. The checkpoint becomes the step's state, which the engine stores with the step's checkpoint in the
service's Table storage (spilled to a blob when large). The next step restores the workflow from it, on
whatever worker runs it, after a worker kill or a whole-host restart alike.

Outputs: text from ``output`` and ``intermediate`` events (an agent executor's streamed updates, strings,
agent responses) becomes ``output_text``. A ``request_info`` event (the workflow asks a person) becomes an
``mcp_approval_request``; the approval answer is sent back as the request's response (``True``/``False``,
or the request's own approval-response shape when it has one).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agent_framework import Message, WorkflowCheckpoint

from resilient.agents.base import (
    AgentRequest,
    ApprovalRequest,
    NextStep,
    Phase,
    PhaseContext,
    PhaseOutput,
    SaveState,
)
from resilient.agents.framework.agent import IDEMPOTENCY_KEY
from resilient.agents.framework.driving import in_own_task

log = logging.getLogger("resilient.agents.framework")

STATE_KIND = "agent-framework/workflow"
SUPERSTEP = Phase("superstep", "One superstep of the workflow.")


class StepCheckpointStorage:
    """Agent Framework's ``CheckpointStorage`` for one step: holds the checkpoint the step started from and
    those the workflow saves while it runs; the newest is what the step keeps (``encoded``), and the engine
    stores it durably with the step."""

    def __init__(self, restored: dict[str, Any] | None = None) -> None:
        self._checkpoints: dict[str, WorkflowCheckpoint] = {}
        self.latest: WorkflowCheckpoint | None = None
        self.saved = 0
        if restored:
            checkpoint = WorkflowCheckpoint.from_dict(_decode(restored))
            self._checkpoints[checkpoint.checkpoint_id] = checkpoint
            self.latest = checkpoint

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        kept = copy.deepcopy(checkpoint)
        self._checkpoints[kept.checkpoint_id] = kept
        self.latest = kept
        self.saved += 1
        return kept.checkpoint_id

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        from agent_framework import WorkflowCheckpointException

        found = self._checkpoints.get(checkpoint_id)
        if found is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        return copy.deepcopy(found)

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        return [copy.deepcopy(c) for c in self._checkpoints.values() if c.workflow_name == workflow_name]

    async def delete(self, checkpoint_id: str) -> bool:
        return self._checkpoints.pop(checkpoint_id, None) is not None

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        return copy.deepcopy(self.latest) if self.latest and self.latest.workflow_name == workflow_name else None

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return [c.checkpoint_id for c in self._checkpoints.values() if c.workflow_name == workflow_name]

    def encoded(self) -> dict[str, Any] | None:
        return _encode(self.latest.to_dict()) if self.latest is not None else None


def _encode(value: dict[str, Any]) -> dict[str, Any]:
    # Agent Framework's own checkpoint encoding (what its file storage writes): JSON, with values it cannot
    # express in JSON pickled. A private module of agent_framework, pinned by requirements.txt's range.
    from agent_framework._workflows._checkpoint_encoding import encode_checkpoint_value

    encoded: dict[str, Any] = encode_checkpoint_value(value)
    return encoded


def _decode(value: dict[str, Any]) -> dict[str, Any]:
    from agent_framework._workflows._checkpoint_encoding import decode_checkpoint_value

    decoded: dict[str, Any] = decode_checkpoint_value(value)
    return decoded


class FrameworkWorkflow:
    """This service's agent API over an Agent Framework workflow (see the module docstring)."""

    open_plan = True

    def __init__(self, workflow: Any, *, resumable: bool = True) -> None:
        self.workflow = workflow
        self.resumable = resumable

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        return [SUPERSTEP]

    def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        return in_own_task(self._keyed(context))

    async def _keyed(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        """The superstep's executors share one idempotency key (``idempotency_key()`` in an executor)."""
        token = IDEMPOTENCY_KEY.set(context.idempotency_key(0))
        try:
            async for output in self._superstep(context):
                yield output
        finally:
            IDEMPOTENCY_KEY.reset(token)

    async def _superstep(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        state = context.state if isinstance(context.state, dict) and context.state.get("kind") == STATE_KIND else {}
        storage = StepCheckpointStorage(state.get("checkpoint"))
        own_turn = state.get("turn") == context.request.response_id
        pending = state.get("pending_request")
        if own_turn and storage.latest is not None:
            stream = self.workflow.run(checkpoint_id=storage.latest.checkpoint_id, checkpoint_storage=storage,
                                       stream=True)
        elif pending and storage.latest is not None and context.approval is not None:
            stream = self.workflow.run(responses={pending["request_id"]: context.approval.approved},
                                       checkpoint_id=storage.latest.checkpoint_id, checkpoint_storage=storage,
                                       stream=True)
        else:
            stream = self.workflow.run(_input(self.workflow, context), checkpoint_storage=storage, stream=True)
        saved_before = storage.saved
        completed = 0  # supersteps this step ran to the end (a fresh run checkpoints once before its first)
        request: Any = None
        async for event in stream:
            kind = getattr(event, "type", None)
            if kind == "superstep_completed":
                completed += 1
            if kind == "superstep_started" and completed and storage.saved > saved_before:
                # The previous superstep is checkpointed: that is this step. Stop before the next one runs.
                await _close(stream)
                yield SaveState(_state(context, storage, None))
                yield NextStep()
                return
            if kind in ("output", "intermediate", "data"):
                text = _text(getattr(event, "data", None))
                if text:
                    yield text
            elif kind == "request_info":
                request = event
            elif kind == "failed":
                details = getattr(event, "details", None)
                raise RuntimeError(f"the workflow failed: {getattr(details, 'message', details)}")
        if request is not None:
            pending_request = {"request_id": str(request.request_id),
                               "data": repr(getattr(request, "data", None))[:2000]}
            yield SaveState(_state(context, storage, pending_request))
            yield ApprovalRequest(str(getattr(request, "source_executor_id", None) or "workflow"),
                                  "{}", server_label="workflow")
            return
        yield SaveState(_state(context, storage, None))


def _state(context: PhaseContext, storage: StepCheckpointStorage, pending: dict[str, Any] | None) -> dict[str, Any]:
    state: dict[str, Any] = {"kind": STATE_KIND, "turn": context.request.response_id,
                             "checkpoint": storage.encoded()}
    if pending is not None:
        state["pending_request"] = pending
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


def _text(data: Any) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    text = getattr(data, "text", None)
    if isinstance(text, str):
        return text
    if isinstance(data, list):
        return "".join(_text(d) for d in data)
    return ""


async def _close(stream: Any) -> None:
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        try:
            await closer()
        except Exception:  # the workflow is abandoned at a checkpoint; its cleanup must not fail the step
            log.debug("closing the workflow stream failed", exc_info=True)
