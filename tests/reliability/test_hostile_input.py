"""Hostile input over real HTTP: the unmodified app under the host double, on Azurite, fuzzed with hypothesis.

Every endpoint gets wrong types for every field, random JSON documents, unicode / control characters /
NUL / lone surrogates, deep nesting, bodies over the 2 MiB limit, bytes that are not JSON, odd content
types, empty bodies, hostile ids in paths (``../``, ``%2e%2e``, quotes, very long) and bad ``stream``,
``starting_after``, ``Last-Event-ID``, ``after``, ``limit`` and ``order`` values. For every answer:

* never a 5xx (a 502/504 from the host would mean the worker died or hung);
* every 4xx is exactly ``{"error": {"message", "type", "code", "param"}}`` (validated against the ``Error``
  schema of ``docs/openapi.yaml``), JSON, with ``x-should-retry: false`` and a ``code``: the app's own, and
  the double's 404 for a path no function takes;
* every 200 JSON body validates against the schema ``docs/openapi.yaml`` documents for it;
* the worker never restarted.

``docs/openapi.yaml`` itself is checked here too: a valid OpenAPI 3.1 document whose routes and methods
are exactly the HTTP functions registered in ``function_app.py``.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from resilient.functions.http import ROOT_ROUTE
from tests.hostdouble.api import HostDouble
from tests.hostdouble.routes import Router

pytestmark = pytest.mark.azurite

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "docs" / "openapi.yaml"
MAX_BODY = 2 * 1024 * 1024
FUZZ = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(FUZZ, max_examples=40)
KNOBS = {"research_phases": "1", "words_per_phase": "2", "delta_delay_ms": "0"}
BASE = {"model": "m", "input": "hostile?", "background": True, "metadata": KNOBS}
CREATE_FIELDS = ["model", "input", "instructions", "background", "stream", "store", "previous_response_id",
                 "conversation", "metadata", "stream_options", "tools", "temperature", "text", "include",
                 "tool_choice", "user", "reasoning", "max_output_tokens", "prompt", "Input", "unknown", ""]


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def hostile_double() -> Iterator[HostDouble]:
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "h" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_ENABLE_CRASH_ENDPOINT": "false",  # a fuzzed POST /ops/crash must find nothing
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
    }
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running


@pytest.fixture(scope="module")
def http(hostile_double: HostDouble) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hostile_double.base_url, timeout=30.0) as session:
        yield session


@pytest.fixture(scope="module")
def finished(http: httpx.Client) -> dict[str, str]:
    """A finished background response with three input items, and a finished non-background one."""
    body = {**BASE, "input": [{"role": "user", "content": f"q{i}"} for i in range(3)]}
    background = check(http.post("/responses", json=body), "POST", "/responses").json()
    foreground = check(http.post("/responses", json={**BASE, "background": False}), "POST", "/responses").json()
    deadline = time.monotonic() + 30
    while check(http.get(f"/responses/{background['id']}"), "GET", "/r").json()["status"] not in TERMINAL:
        assert time.monotonic() < deadline, "the fixture response did not finish"
        time.sleep(0.05)
    return {"background": background["id"], "foreground": foreground["id"]}


TERMINAL = {"completed", "failed", "cancelled", "incomplete"}


# ------------------------------------------------------------------------------------ routes and schemas
@cache
def app_routes() -> tuple[tuple[str, str, str], ...]:
    """(function name, route template, METHOD) for every HTTP function registered in function_app.py."""
    from tests.fresh_app import fresh_app

    found = []
    for function in fresh_app().get_functions():
        for binding in function.get_bindings():
            raw = binding.get_dict_repr()
            if raw.get("type") == "httpTrigger":
                for method in raw.get("methods") or []:
                    name = getattr(method, "value", method)
                    found.append((function.get_function_name(), str(raw["route"]), str(name).upper()))
    return tuple(sorted(found))


@cache
def router() -> Router:
    routes = Router()
    for function, template, method in app_routes():
        routes.add(function, template, [method])
    return routes


def routed(method: str, target: str) -> bool:
    """Whether the host routes ``method target`` to one of the app's functions: the path percent-decoded
    once, matched exactly (a decoded ``?``, ``#``, tab or line break is part of the path)."""
    path = unquote(urlsplit(target).path)
    return "\n" not in path and router().match(path.lstrip("/"), method) is not None


@cache
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(OPENAPI.read_text())
    return loaded


@cache
def schema_validator(name: str) -> Draft202012Validator:
    resource = Resource.from_contents(spec(), default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource("urn:openapi", resource)
    return Draft202012Validator({"$ref": f"urn:openapi#/components/schemas/{name}"}, registry=registry)


def _assert_schema(name: str, body: Any) -> None:
    problems = sorted(schema_validator(name).iter_errors(body), key=str)
    assert not problems, f"not a valid {name}: {problems[0].message} at {list(problems[0].absolute_path)}"


# -------------------------------------------------------------------------------------------------- oracle
def check(response: httpx.Response, method: str, target: str) -> httpx.Response:
    """The oracle every request goes through (see the module docstring)."""
    status = response.status_code
    assert status < 500, f"{method} {target[:200]!r} → {status}: {response.content[:300]!r}"
    content_type = response.headers.get("content-type", "")
    if 400 <= status < 500:
        assert content_type.startswith("application/json"), (method, target[:200], status, content_type)
        if method == "HEAD":
            return response  # no body by definition
        body = response.json()
        _assert_schema("Error", body)
        assert body["error"]["code"], body
        assert response.headers.get("x-should-retry") == "false", (method, target[:200], status)
        if status == 404:
            assert body["error"]["code"] == "not_found", body
        if status == 413:
            assert body["error"]["code"] == "payload_too_large", body
    elif status == 200 and content_type.startswith("application/json"):
        body = response.json()
        if body.get("object") == "response":
            _assert_schema("Response", body)
        elif body.get("object") == "list":
            _assert_schema("InputItemList", body)
        elif body.get("object") == "response.deleted":
            _assert_schema("DeletedResponse", body)
    return response


def send(http: httpx.Client, method: str, target: str, **kwargs: Any) -> httpx.Response:
    """One request; an SSE answer is closed after its headers (only the status matters here)."""
    with http.stream(method, target, **kwargs) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
        sent = response.request.url.raw_path.decode("ascii")  # as sent: httpx drops "." and ".." segments
        return check(response, method, sent)


def post_json(http: httpx.Client, body: Any, **kwargs: Any) -> httpx.Response:
    content = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    return send(http, "POST", "/responses", content=content,
                headers={"content-type": "application/json", **kwargs.pop("headers", {})}, **kwargs)


# -------------------------------------------------------------------------------------------- strategies
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec=None, categories=["Cc", "Cf", "Cs", "Co", "Zl", "Zp", "So"]), max_size=20),
    st.sampled_from(["", " ", "\x00", "\x00" * 64, "\ud800", "a\udfffb", "\u202e\u2066x", "\r\n\r\n",
                     "\ufeff", "' OR 1=1 --", "PartitionKey eq 'x'", "<script>", "%00", "../..", "\U0001f600",
                     "a" * 5000, "\\u0000", "null", "true", "resp_", "conv_"]),
)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), hostile_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=10,
)
hostile_ids = st.one_of(
    hostile_text,
    st.sampled_from(["..", "../", "../../etc/passwd", "%2e%2e", "%2e%2e%2f", "..%2f..%2f", "resp_..", "resp_'",
                     "resp_\"x\"", "resp_a%00b", "resp_" + "a" * 124, "resp_" + "a" * 5000, "resp_a/b",
                     "resp_a?b=c", "resp_a#b", "resp_%2F", "RESP_X", "resp_x;drop", "resp_ä", "conv_x", "resp_"]),
    st.builds(lambda tail: "resp_" + tail, st.text(st.sampled_from("abcXYZ019_-"), min_size=1, max_size=140)),
)
query_values = st.one_of(
    st.none(), hostile_text, st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["-1", "0", "1", "-2", "1e3", "0x10", " 5", "5 ", "+3", "1.5", "９", "2147483648",
                     "9007199254740992", "9007199254740993", "true", "asc", "desc", "ASC", ""]),
)


# ------------------------------------------------------------------------------------------- POST /responses
@FUZZ
@given(field=st.sampled_from(CREATE_FIELDS), value=json_values)
def test_create_with_a_wrong_value_in_any_field(http: httpx.Client, field: str, value: Any) -> None:
    post_json(http, {**BASE, field: value})


@FUZZ
@given(document=json_values)
def test_create_with_any_json_document(http: httpx.Client, document: Any) -> None:
    post_json(http, document)


message_keys = st.sampled_from(["type", "role", "content", "id", "status", "phase", "text", "name", ""])
input_items = st.lists(
    st.one_of(
        json_values,
        st.dictionaries(message_keys, st.one_of(json_values, st.sampled_from(
            ["user", "assistant", "system", "developer", "tool", "message", "input_text", "output_text"])),
            max_size=5),
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "developer", "x"])},
                              optional={"content": st.one_of(hostile_text, st.lists(st.dictionaries(
                                  st.sampled_from(["type", "text", "annotations", "x"]),
                                  st.one_of(hostile_text, st.sampled_from(["input_text", "output_text"]),
                                            json_values), max_size=3), max_size=3)),
                                  "type": st.sampled_from(["message", "function_call", 1])}),
        st.fixed_dictionaries({"type": st.sampled_from(["function_call", "function_call_output", "reasoning",
                                                        "item_reference", "mcp_call", "input_image", None])},
                              optional={"id": hostile_text, "call_id": hostile_text, "name": hostile_text,
                                        "arguments": st.one_of(hostile_text, json_values),
                                        "output": st.one_of(hostile_text, json_values),
                                        "summary": json_values, "encrypted_content": hostile_text}),
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(["input_image", "input_file", "refusal"])},
                                  optional={"image_url": st.one_of(hostile_text, st.sampled_from(
                                      ["data:", "data:image/png;base64,", "data:text/html,<b>", "https://x"])),
                                      "file_data": hostile_text, "file_url": hostile_text, "file_id": hostile_text,
                                      "detail": hostile_text, "refusal": hostile_text}), max_size=2)}),
    ),
    max_size=5,
)


@FUZZ
@given(items=input_items)
def test_create_with_hostile_input_items(http: httpx.Client, items: list[Any]) -> None:
    post_json(http, {**BASE, "input": items})


@FEW
@given(text=hostile_text, instructions=st.none() | hostile_text,
       meta=st.dictionaries(hostile_text, hostile_text, max_size=3))
def test_hostile_text_is_stored_verbatim_or_refused(http: httpx.Client, text: str, instructions: str | None,
                                                     meta: dict[str, str]) -> None:
    """Unicode, control characters and NUL are data: stored and read back unchanged (or refused with a
    400 where a field has a limit). Lone surrogates cannot be stored as UTF-8: a 400, never a 500."""
    answer = post_json(http, {**BASE, "input": text, "instructions": instructions, "metadata": {**meta, **KNOBS}})
    if answer.status_code != 200:
        return
    rid = answer.json()["id"]
    items = send(http, "GET", f"/responses/{rid}/input_items?order=asc").json()["data"]
    assert [part["text"] for part in items[0]["content"]] == [text]
    again = send(http, "GET", f"/responses/{rid}").json()
    assert again["instructions"] == instructions
    assert again["metadata"] == {**meta, **KNOBS}


@FUZZ
@given(body=st.one_of(st.binary(max_size=300), st.builds(
    lambda doc, cut, junk: json.dumps(doc).encode()[:cut] + junk,
    st.just(BASE), st.integers(0, 120), st.binary(max_size=8))),
    content_type=st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded",
                                  "multipart/form-data; boundary=x", "application/json; charset=latin-1",
                                  "", "application/octet-stream", "*/*", "application/json\x7f"]))
def test_create_with_bytes_that_are_not_json(http: httpx.Client, body: bytes, content_type: str) -> None:
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in content_type):
        # Not an HTTP field value: the HTTP server answers 400 before any app code runs, as the real host's
        # Kestrel does (it refuses control characters other than HTAB, and DEL, in header values).
        with http.stream("POST", "/responses", content=body, headers={"content-type": content_type}) as answer:
            assert answer.status_code == 400
        return
    send(http, "POST", "/responses", content=body, headers={"content-type": content_type})


@pytest.mark.parametrize("body", [
    b"", b" ", b"\n", b"null", b"[]", b"\"x\"", b"0", b"{}", b"\xef\xbb\xbf{}", b"{\"input\":\"x\"}\x00",
    b"\xff\xfe{\x00}\x00", b"{\"input\": \"\\ud800\", \"background\": true}", b"{\"a\":1,\"a\":2}",
    b"{\"input\":\"x\",\"input\":[]}", b"NaN", b"{\"temperature\": NaN, \"input\": \"x\", \"background\": true}",
    b"{" * 10_000, b"[" * 100_000 + b"]" * 100_000,
    json.dumps({**BASE, "input": [[[]]] * 3}).encode(),
    b'{"input": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"input": "x", "metadata": ' + b'{"a":' * 5_000 + b"1" + b"}" * 5_001,
], ids=lambda b: f"{len(b)}B:{b[:12]!r}")
def test_create_with_odd_and_deeply_nested_bodies(http: httpx.Client, body: bytes) -> None:
    answer = send(http, "POST", "/responses", content=body, headers={"content-type": "application/json"})
    assert answer.status_code in (200, 400), answer.status_code


def test_create_over_two_mib_is_413_and_just_under_is_not(http: httpx.Client) -> None:
    filler = "x" * (MAX_BODY - len(json.dumps({**BASE, "input": ""})))
    at_limit = json.dumps({**BASE, "input": filler}).encode()
    assert len(at_limit) == MAX_BODY
    assert post_json(http, {**BASE, "input": filler}).status_code == 200
    over = at_limit + b" "
    assert send(http, "POST", "/responses", content=over).status_code == 413
    huge = b'{"input": "' + b"y" * (8 * MAX_BODY) + b'"}'
    assert send(http, "POST", "/responses", content=huge).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold for chunked bodies too
        yield b'{"input": "'
        for _ in range(3):
            yield b"z" * MAX_BODY
        yield b'"}'

    assert send(http, "POST", "/responses", content=chunks()).status_code == 413


def test_a_20_mb_data_url_is_413_before_it_is_parsed(http: httpx.Client) -> None:
    """The body limit (2 MiB) holds for data URLs too: 413 ``payload_too_large``, never a 500."""
    image = "data:image/png;base64," + "A" * (20 * 1024 * 1024)
    answer = post_json(http, {**BASE, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": image}]}]})
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"


def test_a_non_image_data_url_in_input_image_is_400(http: httpx.Client) -> None:
    answer = post_json(http, {**BASE, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:text/html;base64,PGI+"}]}]})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "input[0].content[0].image_url"


def test_an_item_reference_to_another_chains_item_is_400(http: httpx.Client, finished: dict[str, str]) -> None:
    """An item of another chain exists, but a turn reaches only its own chain's items."""
    items = send(http, "GET", f"/responses/{finished['background']}/input_items").json()["data"]
    other = post_json(http, {**BASE, "background": False}).json()
    answer = post_json(http, {**BASE, "previous_response_id": other["id"], "input": [
        {"type": "item_reference", "id": items[0]["id"]}]})
    assert answer.status_code == 400
    assert (answer.json()["error"]["code"], answer.json()["error"]["param"]) == ("item_not_found", "input[0].id")
    fresh = post_json(http, {**BASE, "input": [{"type": "item_reference", "id": items[0]["id"]}]})
    assert fresh.status_code == 400 and fresh.json()["error"]["code"] == "item_not_found"


# -------------------------------------------------------------------------------------------- paths and ids
ENDPOINTS = [("GET", "/responses/{}"), ("GET", "/responses/{}?stream=true"), ("DELETE", "/responses/{}"),
             ("POST", "/responses/{}/cancel"), ("GET", "/responses/{}/input_items")]


@FUZZ
@given(response_id=hostile_ids, endpoint=st.sampled_from(ENDPOINTS), safe=st.sampled_from(["", "/", "/%'\""]))
def test_hostile_ids_in_paths_are_404(http: httpx.Client, response_id: str, endpoint: tuple[str, str],
                                      safe: str) -> None:
    method, template = endpoint
    segment = quote(response_id.encode("utf-8", "surrogatepass"), safe=safe)
    target = template.format(segment)
    answer = send(http, method, target)
    if method == "GET" and answer.request.url.path == "/":  # the client resolved ".." segments: the root
        assert answer.status_code == 200 and answer.json()["object"] == "service", (target, answer.text)
    elif routed(method, target):
        assert answer.status_code == 404, (target, answer.status_code)


def raw_request(base_url: str, method: str, target: str,
                headers: list[tuple[bytes, bytes]] | None = None) -> httpx.Response:
    """One HTTP/1.1 request with the request-target and headers sent byte for byte (httpx would normalize
    ``..`` and refuse non-ASCII header values)."""
    parts = urlsplit(base_url)
    extra = b"".join(name + b": " + value + b"\r\n" for name, value in headers or [])
    with socket.create_connection((parts.hostname, parts.port), timeout=15) as sock:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Length: 0\r\n"
                     "Connection: close\r\n".encode("latin-1") + extra + b"\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(line.split(": ", 1)) for line in header_lines]
    if ("transfer-encoding", "chunked") in [(k.lower(), v.lower()) for k, v in headers]:
        decoded, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            if int(size, 16) == 0:
                break
            decoded, rest = decoded + rest[: int(size, 16)], rest[int(size, 16) + 2:]
        body = decoded
    return httpx.Response(int(status_line.split()[1]), headers=headers, content=body)


@pytest.mark.parametrize("target", [
    "/responses/..", "/responses/../responses", "/responses/../../x", "/responses/./x", "/responses/.",
    "/responses/resp_x/../cancel", "/responses/%2e%2e", "/responses/%2e%2e/cancel", "/responses/..%2fx",
    "/responses/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "/responses/resp_%00", "/responses/resp_%ff%fe",
    "/responses/%22resp_x%22", "/responses/resp_x'--", "/responses//cancel", "/responses/resp_x/input_items/..",
    "/responses/" + "a" * 8000, "/responses/resp_x?starting_after=1&starting_after=2", "/%2e%2e/responses",
])
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_dot_segments_and_raw_targets(hostile_double: HostDouble, method: str, target: str) -> None:
    check(raw_request(hostile_double.base_url, method, target), method, target)


@pytest.mark.parametrize("target", [
    "/responses%0A", "/responses%0D%0A", "/responses%0A/", "/responses/%0A/cancel", "/responses/resp_x%0A/cancel",
    "/responses/resp_x/cancel%0A", "/responses%3Fstream=true", "/responses%23x", "/responses%09", "/%0Aresponses",
    "/responses/%0A", "/responses/resp_x/input_items%0A", "/nothing/here", "/api/responses", "/responses%00",
])
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_paths_that_no_function_takes_are_json_404(hostile_double: HostDouble, method: str, target: str) -> None:
    """Exact routing: a decoded line break, "?" or "#" is part of the path (no "$"-before-newline match,
    no URL re-parsing), and the answer is the OpenAI error shape, never a plain-text 404."""
    answer = check(raw_request(hostile_double.base_url, method, target), method, target)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found", (target, answer.text)


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_the_root_takes_only_get(hostile_double: HostDouble, method: str) -> None:
    """``GET /`` is the pointer to the API (tests/scenario/test_surface.py); other methods name nothing."""
    answer = check(raw_request(hostile_double.base_url, method, "/"), method, "/")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found", answer.text


@pytest.mark.parametrize(("name", "value"), [
    (b"x-anything", "é".encode()), (b"x-anything", b"\xe9"), (b"x-anything", "５".encode()),
    (b"user-agent", b"\xff\xfe"), (b"accept", "text/event-stream; q=\u00e9".encode()),
    (b"last-event-id", "５".encode()), (b"last-event-id", b"\xe9"), (b"last-event-id", "٣".encode()),
])
@pytest.mark.parametrize("endpoint", ["background", "unknown"])
def test_non_ascii_header_bytes_reach_the_app(hostile_double: HostDouble, finished: dict[str, str], name: bytes,
                                              value: bytes, endpoint: str) -> None:
    """Header values may hold any byte but controls; the double forwards them as they came (it used to
    answer a plain 500). A bad ``Last-Event-ID`` is a 400 naming the header; other headers are ignored."""
    rid = finished.get(endpoint, "resp_" + "0" * 48)
    target = f"/responses/{rid}?stream=true"
    answer = check(raw_request(hostile_double.base_url, "GET", target, headers=[(name, value)]), "GET", target)
    if name == b"last-event-id":
        expected = 400
    elif endpoint == "unknown":
        expected = 404
    else:
        expected = 200
    assert answer.status_code == expected, answer.content[:300]
    if expected == 400:
        assert answer.json()["error"]["param"] == "Last-Event-ID"


@pytest.mark.parametrize("method", ["PUT", "PATCH", "OPTIONS", "HEAD", "TRACE"])
@pytest.mark.parametrize("target", ["/responses", "/responses/resp_x", "/responses/resp_x/cancel",
                                    "/responses/resp_x/input_items", "/ops/crash", "/api/responses"])
def test_methods_without_a_function(http: httpx.Client, method: str, target: str) -> None:
    send(http, method, target)


def test_crash_endpoint_is_absent_when_disabled(http: httpx.Client, hostile_double: HostDouble) -> None:
    answer = send(http, "POST", "/ops/crash", content=b"{}")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert hostile_double.stats()["worker_restarts"] == 0


# ----------------------------------------------------------------------------------------- query parameters
@FUZZ
@given(stream=query_values, starting_after=query_values, last_event_id=query_values, obfuscation=query_values,
       which=st.sampled_from(["background", "foreground"]))
def test_retrieve_with_hostile_stream_parameters(http: httpx.Client, finished: dict[str, str],
                                                 stream: str | None, starting_after: str | None,
                                                 last_event_id: str | None, obfuscation: str | None,
                                                 which: str) -> None:
    params = {k: v for k, v in {"stream": stream, "starting_after": starting_after,
                                "include_obfuscation": obfuscation}.items() if v is not None}
    headers: dict[str, bytes] = {}
    if last_event_id is not None:
        raw = last_event_id.encode("utf-8", "surrogatepass")
        # What an HTTP client can send at all (h11: no control characters, no edge whitespace); any other
        # byte, non-ASCII included, reaches the app.
        assume(all(byte >= 0x20 and byte != 0x7F for byte in raw) and raw == raw.strip())
        headers["last-event-id"] = raw
    send(http, "GET", f"/responses/{finished[which]}?{_q(params)}", headers=headers)


def _q(params: dict[str, str]) -> str:
    """A query string with every key and value percent-encoded byte for byte (lone surrogates become the
    invalid UTF-8 bytes a hostile client would send)."""
    return urlencode({k.encode("utf-8", "surrogatepass"): v.encode("utf-8", "surrogatepass")
                      for k, v in params.items()})


@FUZZ
@given(after=query_values, limit=query_values, order=query_values, extra=st.dictionaries(hostile_text, hostile_text,
                                                                                         max_size=2))
def test_input_items_with_hostile_paging(http: httpx.Client, finished: dict[str, str], after: str | None,
                                         limit: str | None, order: str | None, extra: dict[str, str]) -> None:
    params = {k: v for k, v in {"after": after, "limit": limit, "order": order}.items() if v is not None}
    answer = send(http, "GET", f"/responses/{finished['background']}/input_items?{_q({**extra, **params})}")
    if answer.status_code == 200:
        assert len(answer.json()["data"]) <= 100


@FEW
@given(body=st.one_of(st.binary(max_size=100), json_values.map(lambda v: json.dumps(v).encode())),
       response_id=st.sampled_from(["background", "foreground", "unknown"]))
def test_cancel_ignores_its_body(http: httpx.Client, finished: dict[str, str], body: bytes, response_id: str) -> None:
    rid = finished.get(response_id, "resp_" + secrets.token_hex(24))
    answer = send(http, "POST", f"/responses/{rid}/cancel", content=body)
    expected = {"background": 409, "foreground": 400, "unknown": 404}[response_id]  # finished / not background
    assert answer.status_code == expected, answer.status_code


# ----------------------------------------------------------------------------------------------- the end
def test_the_worker_never_died(hostile_double: HostDouble) -> None:
    stats = hostile_double.stats()
    assert stats["worker_restarts"] == 0, stats


# ------------------------------------------------------------------------------------------ docs/openapi.yaml
def test_openapi_document_is_valid_openapi_3_1() -> None:
    from openapi_spec_validator import validate

    document = spec()
    assert str(document["openapi"]).startswith("3.1.")
    validate(document)
    for schema in document["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


def test_openapi_routes_are_exactly_the_registered_http_functions() -> None:
    documented = {(path.strip("/"), method.upper())
                  for path, item in spec()["paths"].items()
                  for method in item if method in {"get", "post", "put", "patch", "delete", "head", "options"}}
    # Two catch-alls are not paths of their own: "v1/{*path}" serves the documented paths again under /v1
    # (see the document's description); the root's template matches only "/", its documented path.
    registered = {("" if template == ROOT_ROUTE else template.strip("/"), method)
                  for _, template, method in app_routes() if template != "v1/{*path}"}
    assert documented == registered
    operation_ids = [op["operationId"] for item in spec()["paths"].values() for key, op in item.items()
                     if key != "parameters"]
    assert len(operation_ids) == len(set(operation_ids))
