"""Unit tests of the double's route-template matcher and action flattening (no processes)."""

from __future__ import annotations

import pytest

from tests.hostdouble.durable.history import flatten_actions
from tests.hostdouble.routes import RESERVED_ROUTE_ERROR, RouteError, Router, compile_route


def test_literal_and_parameter_segments() -> None:
    route = compile_route("responses/{response_id}")
    assert route.match("responses/abc") == {"response_id": "abc"}
    assert route.match("Responses/abc") == {"response_id": "abc"}  # literals are case-insensitive
    assert route.match("responses") is None
    assert route.match("responses/abc/cancel") is None


def test_optional_default_catch_all_and_constraints() -> None:
    assert compile_route("items/{id?}").match("items") == {}
    assert compile_route("items/{id?}").match("items/7") == {"id": "7"}
    assert compile_route("items/{page=1}").match("items") == {"page": "1"}
    assert compile_route("files/{*path}").match("files/a/b c") == {"path": "a/b c"}
    assert compile_route("n/{id:int}").match("n/x") is None
    assert compile_route("n/{id:int}").match("n/-3") == {"id": "-3"}
    assert compile_route("f/{name}.{ext}").match("f/report.pdf") == {"name": "report", "ext": "pdf"}
    assert compile_route("").match("") == {}


def test_router_prefers_literals_and_checks_methods() -> None:
    router = Router()
    router.add("by_id", "responses/{response_id}", ["GET", "DELETE"])
    router.add("cancel", "responses/{response_id}/cancel", ["POST"])
    router.add("list", "responses/special", ["GET"])
    router.add("create", "responses", ["POST"])
    assert router.match("responses/special", "GET") == ("list", {})
    assert router.match("responses/r1", "get") == ("by_id", {"response_id": "r1"})
    assert router.match("responses/r1/cancel", "POST") == ("cancel", {"response_id": "r1"})
    assert router.match("responses/r1", "POST") is None
    assert router.match("responses", "POST") == ("create", {})


def test_matching_is_exact() -> None:
    """The path arrives decoded once; nothing is ignored, decoded again or folded beyond ASCII."""
    create, by_id = compile_route("responses"), compile_route("responses/{response_id}/cancel")
    for path in ["responses\n", "responses\r", "\nresponses", "responses\t", "responses ", "reſponses",
                 "responses\x00", "responses/x"]:
        assert create.match(path) is None, path
    assert by_id.match("responses/\n/cancel") == {"response_id": "\n"}  # any non-empty segment is a value
    assert by_id.match("responses/x/cancel\n") is None
    assert by_id.match("responses/resp_%41/cancel") == {"response_id": "resp_%41"}  # not decoded twice
    assert compile_route("n/{id:int}").match("n/５") is None  # ASCII digits only
    assert compile_route("n/{id:int}").match("n/5\n") is None


@pytest.mark.parametrize("template", ["admin/crash", "/admin", "Admin/x", "administration/health"])
def test_admin_routes_are_reserved(template: str) -> None:
    with pytest.raises(RouteError, match=RESERVED_ROUTE_ERROR):
        compile_route(template)


def test_flatten_actions_handles_schema_versions_and_compounds() -> None:
    a, b, c = {"actionType": 0, "functionName": "a"}, {"actionType": 6, "externalEventName": "go"}, {
        "actionType": 5, "fireAt": "2026-01-01T00:00:00.000000Z"}
    assert flatten_actions([[a], [b, c]]) == [a, b, c]  # V1: one list per yield
    assert flatten_actions([[a, {"actionType": 11, "compoundActions": [b, c]}]]) == [a, b, c]  # V2+
    assert flatten_actions([[{"actionType": 12, "compoundActions": [{"actionType": 11, "compoundActions": [a]}]}]]
                           ) == [a]
