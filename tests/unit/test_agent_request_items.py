"""What an agent reads of a request whose items carry images, files, tool calls and reasoning: the model
parameters the row's document kept, the question, the tool outputs with their function's name, and the
offline agent naming what it was given."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from resilient.agents.base import AgentRequest, PhaseContext
from resilient.agents.research import BASE_PLAN, ResearchAgent, attachments
from resilient.engine.run.agent_request import request_from
from resilient.settings import Settings
from resilient.storage.ports import ResponseRecord
from tests import itemshapes as shapes

RICH_TURN = [
    shapes.user(shapes.text("What is in these?"), shapes.IMAGE_DATA, shapes.FILE_DATA),
    shapes.reasoning(),
    shapes.call("call_7", "lookup", '{"q": "cat"}'),
    shapes.call_output("call_7", [shapes.text("a cat"), shapes.IMAGE_URL]),
]


def _record(**doc: Any) -> ResponseRecord:
    return ResponseRecord("resp_1", "queued", {"model": "m", **doc}, etag="e")


def test_the_shared_item_shapes_are_what_the_openai_client_sends() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseInputItemParam)
    for item in [*RICH_TURN, shapes.user(shapes.IMAGE_URL, shapes.IMAGE_FILE_ID, shapes.FILE_URL, shapes.FILE_ID),
                 shapes.assistant("hi", refusal="no")]:
        adapter.validate_python(item, strict=True)


def test_the_model_parameters_the_row_kept_reach_the_request_and_nothing_else() -> None:
    record = _record(temperature=0.2, top_p=None, max_output_tokens=300, reasoning={"effort": "low"},
                     text={"format": {"type": "text"}, "verbosity": "low"}, parallel_tool_calls=False,
                     safety_identifier="u-1", metadata={"k": "v"}, store=True, background=True)
    request = request_from(record, RICH_TURN, [])
    assert dict(request.params) == {"temperature": 0.2, "max_output_tokens": 300, "reasoning": {"effort": "low"},
                                    "text": {"format": {"type": "text"}, "verbosity": "low"},
                                    "parallel_tool_calls": False, "safety_identifier": "u-1"}
    assert request_from(_record(), [], []).params == {}


def test_question_and_tool_outputs_read_rich_items() -> None:
    request = request_from(_record(), RICH_TURN, [])
    assert request.question() == "What is in these?"  # the image and the file add no text
    outputs = request.tool_outputs()
    # the call is in this turn's own input (a stateless tool loop), not in the history
    assert [(o.call_id, o.name, o.output) for o in outputs] == [("call_7", "lookup", "a cat")]


@pytest.mark.parametrize(("items", "said"), [
    (RICH_TURN, "2 images, 1 file"),  # the tool output's image counts too
    ([shapes.user(shapes.IMAGE_URL, shapes.FILE_URL, shapes.FILE_ID)], "1 image, 2 files"),
    ([shapes.user(shapes.text("plain"))], ""),
])
def test_attachments_are_counted(items: list[dict[str, Any]], said: str) -> None:
    assert attachments(items) == said


async def _phase_text(request: AgentRequest, index: int) -> str:
    agent = ResearchAgent(Settings.from_env({"RESILIENT_AGENT_DELTA_DELAY_MS": "0"}))
    context = PhaseContext(request=request, plan=list(BASE_PLAN), phase_index=index, is_recovery=False,
                           output_so_far=[])
    return "".join([o async for o in agent.run_phase(context) if isinstance(o, str)])


async def test_the_offline_agent_says_what_it_was_given_in_its_first_phase() -> None:
    items = [shapes.user(shapes.text("Describe this chart"), shapes.IMAGE_URL, shapes.FILE_DATA)]
    request = request_from(_record(), items, [])
    first = await _phase_text(request, 0)
    assert first.startswith("[scope] Given 1 image, 1 file. On Describe this chart:")
    assert "Given" not in await _phase_text(request, 1)
    plain = await _phase_text(request_from(_record(), [shapes.user(shapes.text("Describe this chart"))], []), 0)
    assert plain.startswith("[scope] On Describe this chart:")
