"""What a phase yields, turned into output items and their stream events.

A phase's output is usually one message. It can also be function calls (the turn then ends after the
phase) or an approval request (the phase stops there and the turn pauses). Items are opened lazily, on
the first thing the agent yields, because only then is the item's type known (a model decides between
answering and calling a tool in its first chunk). At most one item is open at a time: text after a call
opens a new message, a call after text closes the message first.

Stream ``output_index`` values come from a counter that starts at the first index this attempt may use
(see ``recovery.py``: after a recovery the stream's indexes run ahead of the output positions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from resilient.agents.base import (
    ApprovalRequest,
    FunctionCall,
    FunctionCallDelta,
    NextStep,
    PhaseOutput,
    Reasoning,
    SaveProgress,
    SaveState,
    ToolRun,
    Usage,
)
from resilient.ids import (
    new_approval_request_id,
    new_call_id,
    new_function_call_id,
    new_mcp_call_id,
    new_message_id,
    new_reasoning_id,
)
from resilient.protocol import events as ev
from resilient.protocol.items import (
    ItemStatus,
    approval_request_item,
    function_call_item,
    mcp_call_item,
    output_message,
    reasoning_item,
)
from resilient.protocol.sse import compact_json
from resilient.storage.ports import JsonDict

# The state a step keeps (SaveState) is stored with the response, in a blob when large; every step reads and
# rewrites it, so it is bounded.
MAX_STATE_BYTES = 1024 * 1024


class AgentOutputError(ValueError):
    """The agent yielded something the request does not allow (an unknown tool, a call with tool_choice
    ``none``, a value that is not a phase output). A bug in the agent: the phase fails at once."""


@dataclass
class _Open:
    stream_index: int
    kind: str  # "message" | "function_call"
    item_id: str
    text: list[str] = field(default_factory=list)
    key: int | None = None  # FunctionCallDelta key
    call_id: str = ""
    name: str = ""


class PhaseItems:
    """Accumulates one phase attempt's items and emits their events in stream order."""

    def __init__(self, first_stream_index: int, tool_names: set[str], tool_choice: object, *,
                 response_id: str) -> None:
        self.next_stream_index = first_stream_index
        self._response_id = response_id  # every item id carries it (``resilient.ids.item_id``)
        self._tools = tool_names
        self._calls_allowed = tool_choice != "none"
        self._open: _Open | None = None
        self.items: list[JsonDict] = []
        self.usage: list[Usage] = []
        self.approval: JsonDict | None = None
        self.state: SaveState | None = None  # the last state the step asked to keep
        self.more = False  # the step said another step follows (NextStep)

    # ------------------------------------------------------------------ feeding
    def feed(self, output: PhaseOutput) -> list[JsonDict]:
        """The events for one thing the agent yielded (none for usage or an empty text delta)."""
        if isinstance(output, str):
            return self._text(output)
        if isinstance(output, Usage):
            self.usage.append(output)
            return []
        if isinstance(output, SaveState):
            _check_state(output.value, "state")
            self.state = output
            return []
        if isinstance(output, SaveProgress):
            _check_state(output.value, "progress")  # the pump writes it (it is not an event)
            return []
        if isinstance(output, NextStep):
            self.more = True
            return []
        if isinstance(output, ToolRun):
            _check_json_object(output.arguments or "{}", f"arguments of tool {output.name!r}")
            return self._whole(mcp_call_item(new_mcp_call_id(self._response_id), output.name,
                                             output.arguments or "{}", output.server_label, output.output,
                                             output.error))
        if isinstance(output, Reasoning):
            return self._whole(reasoning_item(new_reasoning_id(self._response_id), output.summary,
                                              output.encrypted_content))
        if isinstance(output, FunctionCall):
            events = self._close_open("completed")
            events += self._open_call(output.name, None, output.call_id, checked=not output.agent_defined)
            events += self._arguments(output.arguments)
            return events + self._close_open("completed")
        if isinstance(output, FunctionCallDelta):
            events = []
            if self._open is None or self._open.kind != "function_call" or self._open.key != output.key:
                if output.name is None:
                    raise AgentOutputError(f"the first chunk of function call {output.key} must name the function")
                events += self._close_open("completed")
                events += self._open_call(output.name, output.key)
            return events + self._arguments(output.arguments)
        if isinstance(output, ApprovalRequest):
            events = self._close_open("completed")
            _check_json_object(output.arguments, "approval request arguments")
            item = approval_request_item(new_approval_request_id(self._response_id), output.name, output.arguments,
                                         output.server_label)
            index = self._take_index()
            self.items.append(item)
            self.approval = item
            return events + ev.item_opening_events(index, item) + ev.item_closing_events(index, item)
        raise AgentOutputError(f"a phase may yield str, FunctionCall, FunctionCallDelta, ApprovalRequest, Usage, "
                               f"Reasoning, ToolRun, SaveState, SaveProgress or NextStep, "
                               f"not {type(output).__name__}")

    def close(self, status: ItemStatus, *, ensure_item: bool) -> list[JsonDict]:
        """Close the open item with ``status``. ``ensure_item``: a phase that yielded nothing still gets
        one (empty) message, so every finished phase has a checkpoint."""
        events = self._close_open(status)
        if ensure_item and not self.items:
            events += self._text_open()
            events += self._close_open(status)
        return events

    # ------------------------------------------------------------------ views
    @property
    def paused(self) -> bool:
        return self.approval is not None

    @property
    def calls(self) -> list[JsonDict]:
        return [item for item in self.items if item["type"] == "function_call"]

    def shift(self, by: int) -> None:
        """Move every stream index of this attempt by ``by`` (the log grew before our first append)."""
        self.next_stream_index += by
        if self._open is not None:
            self._open.stream_index += by

    # ------------------------------------------------------------------ internals
    def _take_index(self) -> int:
        index = self.next_stream_index
        self.next_stream_index += 1
        return index

    def _whole(self, item: JsonDict) -> list[JsonDict]:
        """Add an item the agent gave complete (a tool run, a reasoning item): it opens and closes at once."""
        events = self._close_open("completed")
        index = self._take_index()
        self.items.append(item)
        return events + ev.item_opening_events(index, item) + ev.item_closing_events(index, item)

    def _text(self, delta: str) -> list[JsonDict]:
        if not delta:
            return []
        events: list[JsonDict] = []
        if self._open is None or self._open.kind != "message":
            events += self._close_open("completed")
            events += self._text_open()
        assert self._open is not None
        self._open.text.append(delta)
        return [*events, ev.output_text_delta(self._open.item_id, self._open.stream_index, 0, delta)]

    def _text_open(self) -> list[JsonDict]:
        self._open = _Open(self._take_index(), "message", new_message_id(self._response_id))
        return ev.phase_opening_events(self._open.stream_index, self._open.item_id)

    def _open_call(self, name: str, key: int | None, call_id: str | None = None,
                   checked: bool = True) -> list[JsonDict]:
        if checked and not self._calls_allowed:
            raise AgentOutputError(f"the agent called {name!r} but tool_choice is 'none'")
        if checked and name not in self._tools:
            raise AgentOutputError(f"the agent called {name!r}, which is not one of the request's tools")
        self._open = _Open(self._take_index(), "function_call", new_function_call_id(self._response_id), key=key,
                           call_id=_checked_call_id(call_id) if call_id else new_call_id(), name=name)
        item = function_call_item(self._open.item_id, self._open.call_id, name, "", status="in_progress")
        return ev.item_opening_events(self._open.stream_index, item)

    def _arguments(self, delta: str) -> list[JsonDict]:
        assert self._open is not None and self._open.kind == "function_call"
        if not delta:
            return []
        self._open.text.append(delta)
        return [ev.function_call_arguments_delta(self._open.item_id, self._open.stream_index, delta)]

    def _close_open(self, status: ItemStatus) -> list[JsonDict]:
        current = self._open
        if current is None:
            return []
        text = "".join(current.text)
        if current.kind == "message":
            item = output_message(current.item_id, text, status=status)
        else:
            if status == "completed":
                text = text or "{}"
                _check_json_object(text, f"arguments of {current.name!r}")  # before the item is closed
            item = function_call_item(current.item_id, current.call_id, current.name, text, status=status)
        self._open = None
        self.items.append(item)
        return ev.item_closing_events(current.stream_index, item)


def _check_state(value: Any, what: str) -> None:
    try:
        size = len(compact_json(value).encode())
    except (TypeError, ValueError) as exc:
        raise AgentOutputError(f"the agent's {what} must be JSON: {exc}") from None
    if size > MAX_STATE_BYTES:
        raise AgentOutputError(f"the agent's {what} is {size} bytes, over the limit of {MAX_STATE_BYTES} "
                               f"bytes: keep large data elsewhere and save a reference to it")


def _check_json_object(text: str, what: str) -> None:
    try:
        value: Any = json.loads(text)
    except ValueError:
        raise AgentOutputError(f"{what} are not valid JSON: {text[:200]!r}") from None
    if not isinstance(value, dict):
        raise AgentOutputError(f"{what} must be a JSON object, got {text[:200]!r}")


def _checked_call_id(call_id: str) -> str:
    """A model's call id, kept as the item's ``call_id``: bounded and printable (it comes back from clients)."""
    if len(call_id) > 128 or not call_id.isprintable() or not call_id.strip():
        raise AgentOutputError(f"a function call id must be 1-128 printable characters, got {call_id[:40]!r}")
    return call_id
