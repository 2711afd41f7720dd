"""Worker acceptance: run the REAL Python worker's function indexing on function_app.py.

``azure-functions-runtime`` is the library the Functions Python worker (3.13+) uses to index a v2 app:
it imports ``function_app``, finds the app object, type-checks every binding against the parameter
names and annotations, and produces the metadata the host receives. If this passes, ``func start`` and
Azure will see the same functions and bindings asserted here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 13), reason="azure-functions-runtime needs Python 3.13+"
)


class _BindingInfo(SimpleNamespace):
    # The worker compares binding directions and data types against these protobuf enum constants;
    # the values are the ones azure.functions' own enums carry (BindingDirection, DataType).
    in_ = 0
    out = 1
    inout = 2
    undefined = 0
    string = 1
    binary = 2
    stream = 3


def _protos() -> Any:
    return SimpleNamespace(
        BindingInfo=_BindingInfo,
        RpcFunctionMetadata=lambda **kw: SimpleNamespace(**kw),
        RpcRetryOptions=SimpleNamespace,
        ParameterBinding=SimpleNamespace,
    )


@pytest.fixture(scope="module")
def indexed() -> dict[str, dict[str, Any]]:
    from azure_functions_runtime import functions, loader
    from azure_functions_runtime.bindings import meta
    from azure_functions_runtime.http_v2 import HttpV2Registry

    meta.load_binding_registry()
    sys.modules.pop("function_app", None)  # index a fresh import, as the worker does at start-up
    fns = loader.index_function_app(str(ROOT / "function_app.py"))
    results, _logs = loader.process_indexed_function(_protos(), functions.Registry(), fns, str(ROOT))
    out: dict[str, dict[str, Any]] = {}
    for metadata in results:
        bindings = [json.loads(b) if isinstance(b, str) else b for b in metadata.raw_bindings]
        out[metadata.name] = {"bindings": bindings}
    out["__http_v2__"] = {"enabled": HttpV2Registry.http_v2_enabled()}
    return out


def _by_type(entry: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [b for b in entry["bindings"] if b["type"] == kind]


HTTP_ROUTES = {
    "create_response": ("responses", ["POST"]),
    "get_response": ("responses/{response_id}", ["GET"]),
    "cancel_response": ("responses/{response_id}/cancel", ["POST"]),
    "delete_response": ("responses/{response_id}", ["DELETE"]),
    "list_input_items": ("responses/{response_id}/input_items", ["GET"]),
}


def test_http_streaming_is_enabled_for_the_app(indexed: dict[str, dict[str, Any]]) -> None:
    assert indexed["__http_v2__"]["enabled"] is True


@pytest.mark.parametrize("name", sorted(HTTP_ROUTES))
def test_http_route_bindings(indexed: dict[str, dict[str, Any]], name: str) -> None:
    route, methods = HTTP_ROUTES[name]
    (trigger,) = _by_type(indexed[name], "httpTrigger")
    assert trigger["route"] == route
    assert [m.upper() for m in trigger["methods"]] == methods
    assert trigger["authLevel"].upper() == "FUNCTION"
    assert trigger["direction"].upper() == "IN" and trigger["name"] == "req"
    (client,) = _by_type(indexed[name], "durableClient")
    assert client["name"] == "client" and client["direction"].upper() == "IN"
    (out,) = _by_type(indexed[name], "http")
    assert out["direction"].upper() == "OUT"


def test_v1_routes_reach_the_same_operations(indexed: dict[str, dict[str, Any]]) -> None:
    (trigger,) = _by_type(indexed["v1_responses"], "httpTrigger")
    assert trigger["route"] == "v1/{*path}" and trigger["authLevel"].upper() == "FUNCTION"
    assert sorted(m.upper() for m in trigger["methods"]) == ["DELETE", "GET", "POST"]
    assert _by_type(indexed["v1_responses"], "durableClient")[0]["name"] == "client"


def test_health_and_root_are_anonymous_gets(indexed: dict[str, dict[str, Any]]) -> None:
    for name, route in (("health_check", "health"), ("api_root", "{root:regex(^$)?}")):
        (trigger,) = _by_type(indexed[name], "httpTrigger")
        assert trigger["route"] == route and trigger["authLevel"].upper() == "ANONYMOUS"
        assert [m.upper() for m in trigger["methods"]] == ["GET"]


def test_crash_endpoint_is_admin_only(indexed: dict[str, dict[str, Any]]) -> None:
    (trigger,) = _by_type(indexed["crash_worker"], "httpTrigger")
    assert trigger["route"] == "ops/crash" and trigger["authLevel"].upper() == "ADMIN"


def test_durable_functions_are_registered(indexed: dict[str, dict[str, Any]]) -> None:
    (orch,) = _by_type(indexed["responses_orchestrator"], "orchestrationTrigger")
    assert orch["name"] == "context"
    for activity in ("run_phase", "finalize_response", "mark_queued", "wake_next_turn",
                     "inspect_response", "forget_response"):
        (trigger,) = _by_type(indexed[activity], "activityTrigger")
        assert trigger["name"] == "payload"
    # raises an event; inspects a holder's orchestration; purges a store=false history
    for with_client in ("wake_next_turn", "inspect_response", "forget_response"):
        assert _by_type(indexed[with_client], "durableClient")[0]["name"] == "client"
    (entity,) = _by_type(indexed["chain_lock"], "entityTrigger")
    assert entity["name"] == "context"


def test_no_unexpected_functions(indexed: dict[str, dict[str, Any]]) -> None:
    expected = set(HTTP_ROUTES) | {"crash_worker", "responses_orchestrator", "run_phase",
                                   "finalize_response", "mark_queued", "wake_next_turn", "inspect_response",
                                   "forget_response", "chain_lock", "__http_v2__"}
    assert set(indexed) == expected | {"cleanup_expired", "repair_stuck_runs", "v1_responses", "health_check",
                                       "api_root", "compact_response", "count_input_tokens"}


@pytest.mark.parametrize(("name", "route"), [("compact_response", "responses/compact"),
                                             ("count_input_tokens", "responses/input_tokens")])
def test_unserved_openai_endpoints_are_functions_without_a_durable_client(indexed: dict[str, dict[str, Any]],
                                                                         name: str, route: str) -> None:
    (trigger,) = _by_type(indexed[name], "httpTrigger")
    assert trigger["route"] == route and [m.upper() for m in trigger["methods"]] == ["POST"]
    assert trigger["authLevel"].upper() == "FUNCTION"
    assert _by_type(indexed[name], "durableClient") == []


def test_retention_cleanup_is_a_timer_with_a_durable_client(indexed: dict[str, dict[str, Any]]) -> None:
    (timer,) = _by_type(indexed["cleanup_expired"], "timerTrigger")
    assert timer["schedule"] == "0 */15 * * * *" and timer["name"] == "timer"
    assert _by_type(indexed["cleanup_expired"], "durableClient")[0]["name"] == "client"


def test_repair_sweep_is_a_timer_with_a_durable_client(indexed: dict[str, dict[str, Any]]) -> None:
    (timer,) = _by_type(indexed["repair_stuck_runs"], "timerTrigger")
    assert timer["schedule"] == "30 * * * * *" and timer["name"] == "timer"
    assert _by_type(indexed["repair_stuck_runs"], "durableClient")[0]["name"] == "client"
