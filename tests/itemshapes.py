"""Input items in the OpenAI Responses item shape (``openai.types.responses``) with images, files, tool calls
and reasoning: what an agent's request carries once the protocol has accepted them. Shared by the tests of how
each kind reaches each agent kind (unit, engine and scenario tests)."""

from __future__ import annotations

from typing import Any

PNG_DATA_URL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OU"
                "AAAAABJRU5ErkJggg==")
PDF_BASE64 = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCg=="
PDF_DATA_URL = f"data:application/pdf;base64,{PDF_BASE64}"

IMAGE_URL = {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "high"}
IMAGE_DATA = {"type": "input_image", "image_url": PNG_DATA_URL, "detail": "auto"}
IMAGE_FILE_ID = {"type": "input_image", "file_id": "file-img1", "detail": "low"}
FILE_DATA = {"type": "input_file", "filename": "notes.pdf", "file_data": PDF_DATA_URL}
FILE_URL = {"type": "input_file", "file_url": "https://example.com/report.pdf"}
FILE_ID = {"type": "input_file", "file_id": "file-doc1", "filename": "doc.txt"}


def text(value: str) -> dict[str, Any]:
    return {"type": "input_text", "text": value}


def user(*parts: dict[str, Any], item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "user", "content": list(parts)}
    if item_id:
        item["id"] = item_id
    return item


def assistant(value: str, *, refusal: str | None = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "output_text", "text": value, "annotations": []}]
    if refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    return {"type": "message", "role": "assistant", "id": "msg_a1", "status": "completed", "content": parts}


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def call_output(call_id: str, output: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def reasoning(summary: str = "I should look at the image.", encrypted: str = "gAAAA-opaque") -> dict[str, Any]:
    return {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": encrypted}
