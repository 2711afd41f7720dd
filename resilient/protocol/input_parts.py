"""The content parts of input messages and tool outputs: ``input_text``, ``input_image``, ``input_file``
(user, system and developer messages, ``function_call_output``), ``output_text`` and ``refusal``
(assistant history). Strict pydantic models; which part types a message may hold depends on its role.

URLs are checked because they reach an agent verbatim: an ``input_image`` holds an ``http(s)`` URL or a
base64 ``data:image/...`` URL (a data URL of another media type is a 400, not an agent failure later),
an ``input_file`` an ``http(s)`` ``file_url`` or ``file_data``. Sizes are bounded by the body limit.
"""

from __future__ import annotations

import functools
import operator
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, field_validator, model_validator

from resilient.protocol import errors
from resilient.protocol.request_errors import fail_here, fail_value_here, one_of, tag_error, type_tag
from resilient.protocol.typed_check import check_typed

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
_WEB_URL = re.compile(r"https?://[^\s]+", re.IGNORECASE)
_DATA_URL = re.compile(r"data:([^;,]*)(;[^,]*)?,", re.IGNORECASE)
_IMAGE_DETAILS = ("low", "high", "auto", "original")
_FILE_DETAILS = ("auto", "low", "high")
INPUT_PART_TYPES = ("input_text", "input_image", "input_file")
ASSISTANT_PART_TYPES = ("output_text", "refusal")


class CacheBreakpoint(BaseModel):
    """An input part's ``prompt_cache_breakpoint`` (accepted; passed on with the part)."""

    model_config = _STRICT

    mode: Annotated[Literal["explicit"], one_of(("explicit",), quoted=True)]
    ttl: Annotated[Literal["30m", "12h"] | None, one_of(("30m", "12h"), quoted=True)] = None


class InputTextPart(BaseModel):
    """An ``input_text`` part."""

    model_config = _STRICT

    type: Literal["input_text"] = "input_text"
    # It may be absent but not null (the OpenAI API's type), so None is only a default.
    prompt_cache_breakpoint: CacheBreakpoint = None  # type: ignore[assignment]
    text: str


def _web_url(value: str) -> bool:
    return bool(_WEB_URL.fullmatch(value))


class InputImagePart(BaseModel):
    """An ``input_image`` part: ``image_url`` (``http(s)`` or a ``data:image/...`` URL) or ``file_id``."""

    model_config = _STRICT

    type: Literal["input_image"] = "input_image"
    detail: Annotated[Literal["low", "high", "auto", "original"], one_of(_IMAGE_DETAILS)] = "auto"
    image_url: str | None = None
    file_id: str | None = Field(default=None, min_length=1)
    prompt_cache_breakpoint: CacheBreakpoint = None  # type: ignore[assignment]

    @field_validator("image_url")
    @classmethod
    def _image_url(cls, value: str | None) -> str | None:
        if value is None or _web_url(value):
            return value
        data = _DATA_URL.match(value)
        if data is None:
            fail_value_here("expected an http(s) URL or a data URL of an image (data:image/png;base64,...).")
        if not data.group(1).lower().startswith("image/"):
            fail_value_here(f"an input_image data URL must hold an image (data:image/...), got "
                            f"{errors.echo(value[:data.end() - 1])}.")
        return value

    @model_validator(mode="after")
    def _source(self) -> InputImagePart:
        if self.image_url is None and self.file_id is None:
            fail_here(errors.CODE_MISSING_PARAMETER, "Missing required parameter:",
                      ": an input_image needs image_url or file_id.", ".image_url")
        return self


class InputFilePart(BaseModel):
    """An ``input_file`` part: ``file_data`` (base64, usually with ``filename``), ``file_url`` or ``file_id``."""

    model_config = _STRICT

    type: Literal["input_file"] = "input_file"
    detail: Annotated[Literal["auto", "low", "high"], one_of(_FILE_DETAILS)] | None = None
    file_data: str | None = Field(default=None, min_length=1)
    file_id: str | None = Field(default=None, min_length=1)
    file_url: str | None = None
    filename: str | None = Field(default=None, min_length=1, max_length=512)
    prompt_cache_breakpoint: CacheBreakpoint = None  # type: ignore[assignment]

    @field_validator("file_url")
    @classmethod
    def _file_url(cls, value: str | None) -> str | None:
        if value is not None and not _web_url(value):
            fail_value_here("expected an http(s) URL.")
        return value

    @model_validator(mode="after")
    def _source(self) -> InputFilePart:
        if self.file_data is None and self.file_id is None and self.file_url is None:
            fail_here(errors.CODE_MISSING_PARAMETER, "Missing required parameter:",
                      ": an input_file needs file_data, file_url or file_id.", ".file_data")
        return self


def _annotations(value: object) -> object:
    from openai.types.responses.response_output_text_param import Annotation

    return check_typed(list[Annotation], value)


def _logprobs(value: object) -> object:
    from openai.types.responses.response_output_text_param import Logprob

    return check_typed(list[Logprob], value)


class OutputTextPart(BaseModel):
    """An ``output_text`` part of an assistant message; ``annotations`` and ``logprobs`` are checked against
    the ``openai`` types (citations a client echoes back)."""

    model_config = _STRICT

    type: Literal["output_text"] = "output_text"
    annotations: list[dict[str, Any]] = Field(default_factory=list)
    logprobs: list[dict[str, Any]] = Field(default_factory=list)
    text: str

    @field_validator("annotations", mode="before")
    @classmethod
    def _check_annotations(cls, value: object) -> object:
        return _annotations(value) if value else value

    @field_validator("logprobs", mode="before")
    @classmethod
    def _check_logprobs(cls, value: object) -> object:
        return _logprobs(value) if value else value


class RefusalPart(BaseModel):
    """A ``refusal`` part of an assistant message."""

    model_config = _STRICT

    type: Literal["refusal"] = "refusal"
    refusal: str


ContentPart = InputTextPart | InputImagePart | InputFilePart | OutputTextPart | RefusalPart
_MEMBERS: dict[str, type[BaseModel]] = {
    "input_text": InputTextPart, "input_image": InputImagePart, "input_file": InputFilePart,
    "output_text": OutputTextPart, "refusal": RefusalPart,
}


def parts_adapter(allowed: tuple[str, ...], owner: str) -> TypeAdapter[list[ContentPart]]:
    """A list of parts whose ``type`` is one of ``allowed`` (a discriminated union on ``type``); ``owner``
    names what holds them in the error (``role 'user'``)."""
    listed = ", ".join(f"'{kind}'" for kind in allowed)

    def tag(value: Any) -> object:
        kind = type_tag(value, allowed[0])
        return kind if kind in allowed else None

    members: Any = tuple(Annotated[_MEMBERS[kind], Tag(kind)] for kind in allowed)
    part: Any = Annotated[
        functools.reduce(operator.or_, members),
        Discriminator(tag, custom_error_type="api_tag", custom_error_message="unsupported part type",
                      custom_error_context=tag_error(errors.CODE_INVALID_VALUE, "Invalid value for",
                                                     f": {{value}}. Supported values for {owner} are: {listed}.",
                                                     missing="absent or null")),
    ]
    return TypeAdapter(list[part])  # type: ignore[valid-type]


ROLE_PARTS: dict[str, TypeAdapter[list[ContentPart]]] = {
    role: parts_adapter(ASSISTANT_PART_TYPES if role == "assistant" else INPUT_PART_TYPES, f"role '{role}'")
    for role in ("user", "system", "developer", "assistant")
}
OUTPUT_PARTS = parts_adapter(INPUT_PART_TYPES, "a function_call_output")


def stored_part(part: ContentPart) -> dict[str, Any]:
    """A part as the input-items listing returns it: the fields sent, plus the ones the ``openai`` listing
    types require (an image's ``detail``, a text's ``annotations``)."""
    data = part.model_dump(exclude_unset=True, exclude_none=True)
    data["type"] = part.type
    if isinstance(part, InputImagePart):
        data["detail"] = part.detail
    if isinstance(part, OutputTextPart):
        data.setdefault("annotations", [])
        data.setdefault("logprobs", [])
    return data
