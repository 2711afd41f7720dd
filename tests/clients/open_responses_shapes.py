"""What the Open Responses compliance CLI validates in an answer, written out as tables: the fields and JSON
types its zod schemas (generated from the Open Responses OpenAPI document) require of a ``ResponseResource``,
of each output item, tool and content part, and of each of the 24 streaming events it accepts (any other
event type fails its check). :func:`response_problems` and :func:`event_problems` return the list of what
is wrong, empty when the CLI's schema would accept it.

Fields whose schema has a default (``object``, every ``type``) may be absent, as in the CLI. Where the
suite's generated schemas and its OpenAPI document differ, the stricter holds: ``logprobs`` of an
``output_text`` part and of the ``output_text`` delta and done events is required, as the generated files
have it (the OpenAPI document lets it be absent).
"""

from __future__ import annotations

from typing import Any

STR, INT, NUM, BOOL, NULL, OBJ, ARR = "string", "integer", "number", "boolean", "null", "object", "array"
Spec = dict[str, tuple[str, ...]]

RESPONSE_RESOURCE: Spec = {
    "id": (STR,), "created_at": (INT,), "completed_at": (INT, NULL), "status": (STR,),
    "incomplete_details": (OBJ, NULL), "model": (STR,), "previous_response_id": (STR, NULL),
    "instructions": (STR, NULL), "output": (ARR,), "error": (OBJ, NULL), "tools": (ARR,),
    "tool_choice": (STR, OBJ), "truncation": (STR,), "parallel_tool_calls": (BOOL,), "text": (OBJ,),
    "top_p": (NUM,), "presence_penalty": (NUM,), "frequency_penalty": (NUM,), "top_logprobs": (INT,),
    "temperature": (NUM,), "reasoning": (OBJ, NULL), "usage": (OBJ, NULL), "max_output_tokens": (INT, NULL),
    "max_tool_calls": (INT, NULL), "store": (BOOL,), "background": (BOOL,), "service_tier": (STR,),
    "safety_identifier": (STR, NULL), "prompt_cache_key": (STR, NULL),
}
STATUSES = ("in_progress", "completed", "incomplete")
ITEMS: dict[str, Spec] = {
    "message": {"id": (STR,), "status": (STR,), "role": (STR,), "content": (ARR,)},
    "function_call": {"id": (STR,), "call_id": (STR,), "name": (STR,), "arguments": (STR,), "status": (STR,)},
    "function_call_output": {"id": (STR,), "call_id": (STR,), "output": (STR, ARR), "status": (STR,)},
    "reasoning": {"id": (STR,), "summary": (ARR,)},
    "file_search_call": {"id": (STR,), "status": (STR,), "queries": (ARR,), "results": (ARR, NULL)},
    "web_search_call": {"id": (STR,), "status": (STR,)},
}
PARTS: dict[str, Spec] = {
    "input_text": {"text": (STR,)}, "output_text": {"text": (STR,), "annotations": (ARR,), "logprobs": (ARR,)},
    "text": {"text": (STR,)},
    "summary_text": {"text": (STR,)}, "reasoning_text": {"text": (STR,)}, "refusal": {"refusal": (STR,)},
    "input_image": {"image_url": (STR, NULL), "detail": (STR,)}, "input_file": {}, "input_video": {"video_url": (STR,)},
}
TOOLS: dict[str, Spec] = {
    "function": {"name": (STR,), "description": (STR, NULL), "parameters": (OBJ, NULL), "strict": (BOOL, NULL)},
    "file_search": {"vector_store_ids": (ARR,)}, "web_search": {},
}
_PART = {"item_id": (STR,), "output_index": (INT,), "part": (OBJ,)}
_TEXT = {"item_id": (STR,), "output_index": (INT,), "content_index": (INT,)}
_SUMMARY = {"item_id": (STR,), "output_index": (INT,), "summary_index": (INT,)}
EVENTS: dict[str, Spec] = {
    **{f"response.{kind}": {"response": (OBJ,)}
       for kind in ("created", "queued", "in_progress", "completed", "failed", "incomplete")},
    "response.output_item.added": {"output_index": (INT,), "item": (OBJ, NULL)},
    "response.output_item.done": {"output_index": (INT,), "item": (OBJ, NULL)},
    "response.content_part.added": {**_PART, "content_index": (INT,)},
    "response.content_part.done": {**_PART, "content_index": (INT,)},
    "response.reasoning_summary_part.added": {**_PART, "summary_index": (INT,)},
    "response.reasoning_summary_part.done": {**_PART, "summary_index": (INT,)},
    "response.output_text.delta": {**_TEXT, "delta": (STR,), "logprobs": (ARR,)},
    "response.output_text.done": {**_TEXT, "text": (STR,), "logprobs": (ARR,)},
    "response.refusal.delta": {**_TEXT, "delta": (STR,)},
    "response.refusal.done": {**_TEXT, "refusal": (STR,)},
    "response.reasoning.delta": {**_TEXT, "delta": (STR,)},
    "response.reasoning.done": {**_TEXT, "text": (STR,)},
    "response.reasoning_summary_text.delta": {**_SUMMARY, "delta": (STR,)},
    "response.reasoning_summary_text.done": {**_SUMMARY, "text": (STR,)},
    "response.output_text.annotation.added": {**_TEXT, "annotation_index": (INT,), "annotation": (OBJ, NULL)},
    "response.function_call_arguments.delta": {"item_id": (STR,), "output_index": (INT,), "delta": (STR,)},
    "response.function_call_arguments.done": {"item_id": (STR,), "output_index": (INT,), "arguments": (STR,)},
    "error": {"error": (OBJ,)},
}
ERROR_PAYLOAD: Spec = {"type": (STR,), "code": (STR, NULL), "message": (STR,), "param": (STR, NULL)}


def _kind(value: Any) -> str:
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return NUM
    return {str: STR, dict: OBJ, list: ARR}.get(type(value), "other")


def _fields(value: Any, spec: Spec, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object"]
    problems = []
    for name, kinds in spec.items():
        if name not in value:
            problems.append(f"{where}.{name}: required")
        elif _kind(value[name]) not in kinds and not (NUM in kinds and _kind(value[name]) == INT):
            problems.append(f"{where}.{name}: expected {' or '.join(kinds)}, got {_kind(value[name])}")
    return problems


def _enum(value: Any, allowed: tuple[str, ...], where: str) -> list[str]:
    return [] if value in allowed else [f"{where}: {value!r} is not one of {allowed}"]


def _typed(value: Any, table: dict[str, Spec], where: str) -> list[str]:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in table:
        return [f"{where}.type: {kind!r} is none of {sorted(table)}"]
    return _fields(value, table[kind], where)


def item_problems(item: Any, where: str) -> list[str]:
    problems = _typed(item, ITEMS, where)
    if problems:
        return problems
    if item["type"] in ("message", "function_call", "function_call_output"):
        problems += _enum(item["status"], STATUSES, f"{where}.status")
    if item["type"] == "message":
        problems += _enum(item["role"], ("user", "assistant", "system", "developer"), f"{where}.role")
    for key in ("content", "summary"):
        for i, part in enumerate(item.get(key) or []):
            problems += _typed(part, PARTS, f"{where}.{key}.{i}")
    return problems


def response_problems(response: Any, where: str = "response") -> list[str]:
    problems = _fields(response, RESPONSE_RESOURCE, where)
    if problems:
        return problems
    for i, item in enumerate(response["output"]):
        problems += item_problems(item, f"{where}.output.{i}")
    for i, tool in enumerate(response["tools"]):
        problems += _typed(tool, TOOLS, f"{where}.tools.{i}")
    choice = response["tool_choice"]
    if isinstance(choice, str):
        problems += _enum(choice, ("none", "auto", "required"), f"{where}.tool_choice")
    else:
        problems += _enum(choice.get("type"), ("function", "file_search", "web_search", "allowed_tools"),
                          f"{where}.tool_choice.type")
    problems += _enum(response["truncation"], ("auto", "disabled"), f"{where}.truncation")
    problems += _enum((response["text"].get("format") or {}).get("type"), ("text", "json_object", "json_schema"),
                      f"{where}.text.format.type")
    if response["usage"] is not None:
        problems += _fields(response["usage"], {"input_tokens": (INT,), "output_tokens": (INT,), "total_tokens": (INT,),
                                                "input_tokens_details": (OBJ,), "output_tokens_details": (OBJ,)},
                            f"{where}.usage")
    if response["reasoning"] is not None:
        problems += _fields(response["reasoning"], {"effort": (STR, NULL), "summary": (STR, NULL)},
                            f"{where}.reasoning")
    return problems


def event_problems(event: Any) -> list[str]:
    """What fails the CLI's check of one streaming event (it checks each against the union of the 24)."""
    kind = event.get("type") if isinstance(event, dict) else None
    if kind not in EVENTS:
        return [f"event type {kind!r} is none of the {len(EVENTS)} Open Responses streaming events"]
    problems = _fields(event, {"sequence_number": (INT,), **EVENTS[kind]}, kind)
    if problems:
        return problems
    if "response" in EVENTS[kind]:
        problems += response_problems(event["response"], f"{kind}.response")
    if event.get("item") is not None:
        problems += item_problems(event["item"], f"{kind}.item")
    if "part" in event:
        problems += _typed(event["part"], {k: v for k, v in PARTS.items() if k != "input_video"}, f"{kind}.part")
    if kind == "error":
        problems += _fields(event["error"], ERROR_PAYLOAD, "error.error")
    return problems
