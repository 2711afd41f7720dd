"""The app declares its Durable functions without importing the Durable SDK (``durable_bindings``). The host
reads only the metadata, so it must be exactly what the SDK's own ``df.Blueprint`` emits for the same
declarations, and the handles must behave like the SDK's (replayed for real in ``tests/replay``)."""

from __future__ import annotations

import json
from typing import Any

import azure.durable_functions as df
import azure.functions as func
import pytest

from resilient.functions.durable_bindings import DurableBlueprint, DurableClient


def _declare(bp: Any) -> None:
    """The same declarations, on either blueprint."""

    @bp.orchestration_trigger(context_name="context", orchestration="an_orchestrator")
    def an_orchestrator(context: Any) -> Any:
        yield context.call_activity("an_activity", {"x": 1})

    @bp.activity_trigger(input_name="payload", activity="an_activity")
    @bp.durable_client_input(client_name="client")
    async def an_activity(payload: Any, client: Any) -> dict[str, Any]:
        return {}

    @bp.activity_trigger(input_name="payload")
    async def unnamed_activity(payload: Any) -> dict[str, Any]:
        return {}

    @bp.entity_trigger(context_name="context", entity_name="an_entity")
    def an_entity(context: Any) -> None:
        context.set_result(None)

    @bp.route(route="things/{thing_id}", methods=["POST"])
    @bp.durable_client_input(client_name="client", task_hub="hub", connection_name="Conn")
    async def an_http_function(req: func.HttpRequest, client: Any) -> func.HttpResponse:
        return func.HttpResponse("")


def _metadata(bp: Any) -> dict[str, list[dict[str, Any]]]:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    _declare(bp)
    app.register_functions(bp)
    return {f.get_function_name(): sorted((json.loads(b) for b in f.get_raw_bindings()), key=json.dumps)
            for f in app.get_functions()}


def test_the_metadata_is_what_the_durable_sdk_emits_for_the_same_declarations() -> None:
    ours, sdks = _metadata(DurableBlueprint()), _metadata(df.Blueprint())
    assert set(ours) == {"an_orchestrator", "an_activity", "unnamed_activity", "an_entity", "an_http_function"}
    assert ours == sdks


def test_the_handles_are_named_and_carry_the_user_function_like_the_sdks() -> None:
    app = func.FunctionApp()
    bp = DurableBlueprint()
    _declare(bp)
    app.register_functions(bp)
    functions = {f.get_function_name(): f.get_user_function() for f in app.get_functions()}
    assert functions["an_orchestrator"].orchestrator_function.__name__ == "an_orchestrator"
    assert functions["an_entity"].entity_function.__name__ == "an_entity"


def test_the_entity_handle_runs_a_batch_through_the_sdk() -> None:
    app = func.FunctionApp()
    bp = DurableBlueprint()

    @bp.entity_trigger(context_name="context", entity_name="counter")
    def counter(context: Any) -> None:
        total = int(context.get_state(lambda: 0)) + int(context.get_input())
        context.set_state(total)
        context.set_result(total)

    app.register_functions(bp)
    (handle,) = [f.get_user_function() for f in app.get_functions()]
    # The extension's encoding: the state is JSON text, an operation's input JSON text of JSON text.
    batch = {"self": {"name": "counter", "key": "k"}, "exists": True, "state": json.dumps(40),
             "batch": [{"name": "add", "input": json.dumps(json.dumps(2))}]}
    result = json.loads(handle(json.dumps(batch)))
    assert json.loads(result["entityState"]) == 42
    assert result["results"][0]["isError"] is False and json.loads(result["results"][0]["result"]) == 42


def test_the_client_is_built_from_the_binding_once_and_only_when_used() -> None:
    binding = json.dumps({"taskHubName": "hub", "creationUrls": {}, "managementUrls": {"id": "INSTANCEID"},
                          "baseUrl": "http://127.0.0.1:7071/runtime/webhooks/durabletask",
                          "requiredQueryStringParameters": "code=abc", "rpcBaseUrl": None,
                          "httpBaseUrl": None, "maxGrpcMessageSizeInBytes": 0, "grpcHttpClientTimeout": None})
    client = DurableClient(binding)
    built = client.get()
    assert isinstance(built, df.DurableOrchestrationClient)
    assert built._orchestration_bindings.task_hub_name == "hub"
    assert client.get() is built


@pytest.mark.parametrize("decorator", ["orchestration_trigger", "entity_trigger"])
def test_the_sdk_is_not_needed_to_declare(decorator: str) -> None:
    # The decorators must not build the SDK's handle at declaration time (that is what imports it).
    bp = DurableBlueprint()

    def fn(context: Any) -> None:
        return None

    getattr(bp, decorator)(context_name="context")(fn)
    (builder,) = bp._function_builders
    handle = builder._function.get_user_function()
    assert handle.__name__ == "fn" and handle is not fn
