"""Responses items and content parts as Agent Framework ``Content``: each kind in the form Agent Framework
has for it, so its chat clients send it to their model the way they send their own.

* ``input_text`` / ``output_text`` → text; an assistant's ``refusal`` → text marked as a refusal;
* ``input_image`` → ``Content.from_uri`` (an https or ``data:`` URL, its ``detail`` kept) or, by
  ``file_id``, a hosted file marked as an image;
* ``input_file`` → ``Content.from_uri`` of its ``file_data`` (a ``data:`` URL, or base64 made into one) or
  its ``file_url``, with its ``filename``; by ``file_id``, a hosted file;
* ``function_call`` / ``function_call_output`` → function call and function result (an output given as
  parts becomes a list of contents);
* ``reasoning`` → text reasoning with its id, summary text and ``encrypted_content``;
* ``mcp_call`` → an MCP server tool call and its result.

The Agent Framework keys used to say how a content goes to OpenAI (``detail``, ``openai_content_type``,
``encrypted_content``, the refusal marker) are the ones its OpenAI clients read.
"""

from __future__ import annotations

import mimetypes
from typing import Any

from agent_framework import Content

from resilient.agents.base import TEXT_PART_TYPES

_OPENAI = "openai"  # the namespace of Agent Framework's OpenAI-specific content properties


def part_content(part: object, role: str = "user") -> Content | None:
    """One Responses content part as a ``Content`` (None for a part with nothing to carry)."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in TEXT_PART_TYPES:
        return Content.from_text(str(part.get("text") or ""))
    if kind == "refusal" and role == "assistant":
        return Content.from_text(str(part.get("refusal") or ""),
                                 additional_properties={"core": {"model_output_kind": "refusal"}})
    if kind == "input_image":
        return _image(part)
    if kind == "input_file":
        return _file(part)
    return None


def _image(part: dict[str, Any]) -> Content | None:
    detail = str(part.get("detail") or "auto")
    props = {_OPENAI: {"content_type": "input_image", "image_detail": detail}}
    url = part.get("image_url")
    if url:
        media_type = None if str(url).startswith("data:") else _guess(str(url), "image/*")
        return Content.from_uri(str(url), media_type=media_type, file_id=part.get("file_id"),
                                additional_properties=props)
    if part.get("file_id"):
        return Content.from_hosted_file(str(part["file_id"]), media_type="image/*", additional_properties=props)
    return None


def _file(part: dict[str, Any]) -> Content | None:
    name = part.get("filename")
    props = {_OPENAI: {"content_type": "input_file"}}
    media_type = _guess(str(name or part.get("file_url") or ""), "application/octet-stream")
    data = part.get("file_data")
    if data:
        uri = str(data) if str(data).startswith("data:") else f"data:{media_type};base64,{data}"
        return Content.from_uri(uri, name=name, file_id=part.get("file_id"), additional_properties=props)
    if part.get("file_url"):
        return Content.from_uri(str(part["file_url"]), media_type=media_type, name=name,
                                file_id=part.get("file_id"), additional_properties=props)
    if part.get("file_id"):
        return Content.from_hosted_file(str(part["file_id"]), name=name, additional_properties=props)
    return None


def _guess(name: str, default: str) -> str:
    """The media type a file name or URL path suggests (``default`` when it suggests none)."""
    guessed, _ = mimetypes.guess_type(name.split("?", 1)[0])
    return guessed or default


def assistant_contents(item: dict[str, Any]) -> list[Content]:
    """The contents of an item the model produced: a function call, a reasoning item, a server-side MCP
    call (with its result). Empty for any other item."""
    kind = item.get("type")
    if kind == "function_call":
        return [Content.from_function_call(str(item.get("call_id")), str(item.get("name")),
                                           arguments=item.get("arguments") or "{}")]
    if kind == "reasoning":
        summary = "".join(str(s.get("text") or "") for s in item.get("summary") or [] if isinstance(s, dict))
        encrypted = item.get("encrypted_content")
        props = {"encrypted_content": encrypted} if encrypted else None
        return [Content.from_text_reasoning(id=item.get("id"), text=summary or None, status=item.get("status"),
                                            additional_properties=props)]
    if kind == "mcp_call":
        call_id = str(item.get("id"))
        output = item.get("output") if item.get("error") is None else f"error: {item.get('error')}"
        return [Content.from_mcp_server_tool_call(call_id, str(item.get("name")), server_name=item.get("server_label"),
                                                  arguments=item.get("arguments")),
                Content.from_mcp_server_tool_result(call_id, output=output)]
    return []


def function_result(item: dict[str, Any]) -> Content:
    """A ``function_call_output`` as a function result: its text, or the contents of its parts."""
    output = item.get("output")
    if isinstance(output, list):
        contents = [c for c in (part_content(p) for p in output) if c is not None]
        return Content.from_function_result(str(item.get("call_id")), result=contents)
    return Content.from_function_result(str(item.get("call_id")), result="" if output is None else str(output))
