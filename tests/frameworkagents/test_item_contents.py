"""Responses items as Agent Framework contents (``resilient.agents.framework.contents`` / ``messages``): each
kind in Agent Framework's own form, and what the fake model then receives from an Agent Framework agent."""

from __future__ import annotations

from typing import Any

from resilient.agents.base import AgentRequest, PhaseContext
from resilient.agents.framework.messages import item_messages, request_messages
from resilient.agents.loader import wrap_agent
from tests import itemshapes as shapes
from tests.fakemodel.server import FakeModel
from tests.frameworkagents import app_agents
from tests.frameworkagents.test_adapter import run_step


def _context(items: list[dict[str, Any]], history: list[dict[str, Any]] | None = None,
             state: Any = None) -> PhaseContext:
    request = AgentRequest(response_id="resp_1", model="m", instructions="Be kind.", input_items=items,
                           history=history or [], metadata={})
    return PhaseContext(request=request, plan=[], phase_index=0, is_recovery=False, output_so_far=[], state=state)


def test_images_become_uri_data_and_hosted_file_contents() -> None:
    [message] = item_messages([shapes.user(shapes.text("Look"), shapes.IMAGE_URL, shapes.IMAGE_DATA,
                                           shapes.IMAGE_FILE_ID)])
    text, url, data, hosted = message.contents
    assert message.role == "user" and (text.type, text.text) == ("text", "Look")
    assert (url.type, url.uri, url.media_type) == ("uri", "https://example.com/cat.png", "image/png")
    assert url.additional_properties["openai"] == {"content_type": "input_image", "image_detail": "high"}
    assert (data.type, data.uri, data.media_type) == ("data", shapes.PNG_DATA_URL, "image/png")
    assert (hosted.type, hosted.file_id) == ("hosted_file", "file-img1")
    assert hosted.additional_properties["openai"]["image_detail"] == "low"


def test_files_become_data_uri_and_hosted_file_contents_with_their_names() -> None:
    bare = {"type": "input_file", "filename": "notes.pdf", "file_data": shapes.PDF_BASE64}  # base64, no data: URL
    [message] = item_messages([shapes.user(shapes.FILE_DATA, shapes.FILE_URL, shapes.FILE_ID, bare)])
    data, url, hosted, from_base64 = message.contents
    assert (data.type, data.uri, data.media_type, data.name) == ("data", shapes.PDF_DATA_URL, "application/pdf",
                                                                 "notes.pdf")
    assert data.additional_properties["openai"] == {"content_type": "input_file"}
    assert (url.type, url.uri, url.media_type) == ("uri", "https://example.com/report.pdf", "application/pdf")
    assert (hosted.type, hosted.file_id, hosted.name) == ("hosted_file", "file-doc1", "doc.txt")
    assert (from_base64.type, from_base64.uri) == ("data", shapes.PDF_DATA_URL)


def test_a_call_its_output_reasoning_and_a_refusal_keep_their_kinds() -> None:
    messages = item_messages([
        shapes.user(shapes.text("weather?")), shapes.reasoning(), shapes.call("call_1", "get_weather", '{"c": 1}'),
        shapes.call_output("call_1", "rain"), shapes.call_output("call_1", [shapes.text("wet"), shapes.IMAGE_URL]),
        shapes.assistant("Rain.", refusal="Not that."),
        {"type": "mcp_call", "id": "mcp_1", "name": "send", "server_label": "agent", "arguments": "{}",
         "output": "sent", "error": None, "status": "completed"}])
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    reasoning, function_call = messages[1].contents
    assert (reasoning.type, reasoning.id, reasoning.text) == ("text_reasoning", "rs_1", "I should look at the image.")
    assert reasoning.additional_properties["encrypted_content"] == "gAAAA-opaque"
    assert (function_call.type, function_call.call_id, function_call.name, function_call.arguments) == (
        "function_call", "call_1", "get_weather", '{"c": 1}')
    [plain] = messages[2].contents
    assert (plain.type, plain.call_id, plain.result) == ("function_result", "call_1", "rain")
    [rich] = messages[3].contents
    assert [c.type for c in rich.items] == ["text", "uri"] and rich.items[1].uri == "https://example.com/cat.png"
    text, refusal, mcp_call, mcp_result = messages[4].contents
    assert (text.text, refusal.text) == ("Rain.", "Not that.")
    assert refusal.additional_properties["core"] == {"model_output_kind": "refusal"}
    assert (mcp_call.type, mcp_call.tool_name, mcp_result.output) == ("mcp_server_tool_call", "send", "sent")


def test_history_keeps_answered_calls_and_a_saved_conversation_does_not_take_a_call_twice() -> None:
    history = [shapes.user(shapes.text("q")), shapes.call("call_0", "dropped"), shapes.call("call_1", "kept")]
    messages = request_messages(_context([shapes.call_output("call_1", "ok")], history))
    assert [(m.role, [c.type for c in m.contents]) for m in messages] == [
        ("system", ["text"]), ("user", ["text"]), ("assistant", ["function_call"]), ("tool", ["function_result"])]
    assert messages[2].contents[0].call_id == "call_1"
    state = {"kind": "agent-framework/messages", "turn": "resp_0", "messages": [m.to_dict() for m in messages[1:3]]}
    again = request_messages(_context([shapes.call("call_1", "kept"), shapes.call_output("call_1", "ok")],
                                      state=state))
    assert [m.role for m in again] == ["system", "user", "assistant", "tool"]


def test_agent_frameworks_responses_client_sends_the_contents_as_the_items_they_came_from() -> None:
    """The round trip: Agent Framework's Responses API client (``OpenAIChatClient``) turns the contents back
    into the items the request carried (its documented override point for the request input, called
    directly, as no model is needed to see it)."""
    from agent_framework.openai import OpenAIChatClient

    user = shapes.user(shapes.text("Look"), shapes.IMAGE_URL, shapes.IMAGE_DATA, shapes.IMAGE_FILE_ID,
                       shapes.FILE_DATA, shapes.FILE_URL)
    rich_output = shapes.call_output("call_1", [shapes.text("wet"), shapes.IMAGE_URL])
    items = [user, shapes.reasoning(), shapes.call("call_1", "get_weather", '{"c":1}'), rich_output,
             shapes.assistant("Rain.", refusal="No.")]
    client = OpenAIChatClient(model="m", api_key="unused")
    sent = client._prepare_messages_for_openai(item_messages(items), request_uses_service_side_storage=False)
    assert sent[0] == user
    assert sent[1] == {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-opaque",
                       "summary": [{"type": "summary_text", "text": "I should look at the image."}]}
    assert {k: sent[2][k] for k in ("type", "call_id", "name", "arguments")} == shapes.call("call_1", "get_weather",
                                                                                         '{"c":1}')
    assert sent[3] == rich_output
    assert sent[4]["content"][1:] == [{"type": "refusal", "refusal": "No."}]


async def test_an_agent_framework_agent_sends_the_image_and_file_as_content_parts(model: FakeModel) -> None:
    agent = wrap_agent(app_agents.build())
    context = _context([shapes.user(shapes.text("please e-mail bob this"), shapes.IMAGE_DATA, shapes.FILE_DATA)])
    await run_step(agent, context)
    # Agent Framework's Chat Completions client sends each content of a message as a message of its own
    users = [m["content"] for m in model.chat_requests()[0].body["messages"] if m["role"] == "user"]
    assert users[0] == "please e-mail bob this"
    parts = [part for content in users[1:] for part in content]
    assert [p["type"] for p in parts] == ["image_url", "file"]
    assert parts[0]["image_url"] == {"url": shapes.PNG_DATA_URL, "detail": "auto"}
    assert parts[1]["file"] == {"file_data": shapes.PDF_DATA_URL, "filename": "notes.pdf"}


async def test_a_stateless_tool_loop_reaches_an_agent_framework_agent_as_tool_history(model: FakeModel) -> None:
    agent = wrap_agent(app_agents.build())
    context = _context([shapes.user(shapes.text("weather in Oslo?")), shapes.call("call_9", "get_weather"),
                        shapes.call_output("call_9", "sunny")])
    outputs = await run_step(agent, context)
    assert "".join(o for o in outputs if isinstance(o, str)) == "Done: sunny."
    messages = model.chat_requests()[0].body["messages"]
    assert [m["role"] for m in messages] == ["system", "system", "user", "assistant", "tool"]  # agent's, request's
    assert messages[3]["tool_calls"][0]["id"] == "call_9" and messages[4]["tool_call_id"] == "call_9"
