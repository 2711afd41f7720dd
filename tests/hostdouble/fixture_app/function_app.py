"""Fixture Function App for the host double's tests: every feature the real app relies on, small.

HTTP (FastAPI extension, so streaming is app-wide) with ``@app.durable_client_input``; orchestrators that
chain activities, set custom status, race an external event against a timer, call/signal an entity, fan
out with ``task_all``, retry, call a sub-orchestrator, continue as new and fail; one that catches a failed
activity and calls it again (as an app heals a worker crash); async and sync activities (one with a
durable client binding); an entity; a timer trigger whose schedule comes from an app setting. Activities
and the timer write one marker file per run so tests can count how often each ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.http.fastapi import JSONResponse, Request, StreamingResponse

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)
bp = df.Blueprint()  # the real app registers blueprints: exercise that path too


# ------------------------------------------------------------------------------------------------- HTTP
async def _json_body(req: Request) -> Any:
    raw = await req.body()
    return json.loads(raw) if raw.strip() else None


@app.route(route="orchestrations/{name}/{instance_id}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def start_orchestration(req: Request, client: df.DurableOrchestrationClient) -> JSONResponse:
    name, instance_id = req.path_params["name"], req.path_params["instance_id"]
    try:
        started = await client.start_new(name, instance_id=instance_id, client_input=await _json_body(req))
    except Exception as exc:  # surfaced to the test (e.g. instance already running)
        return JSONResponse({"error": str(exc)}, status_code=409)
    return JSONResponse(client.create_http_management_payload(started), status_code=202)


@app.route(route="orchestrations/{instance_id}", methods=["GET"])
@app.durable_client_input(client_name="client")
async def orchestration_status(req: Request, client: df.DurableOrchestrationClient) -> JSONResponse:
    status = await client.get_status(req.path_params["instance_id"])
    if not status:
        return JSONResponse({"error": "not found"}, status_code=404)
    return JSONResponse({
        "runtimeStatus": status.runtime_status.name if status.runtime_status else None,
        "customStatus": status.custom_status,
        "output": status.output,
        "input": status.input_,
        "createdTime": status.created_time.isoformat() if status.created_time else None,
    })


@app.route(route="orchestrations/{instance_id}/events/{event}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def raise_event(req: Request, client: df.DurableOrchestrationClient) -> JSONResponse:
    await client.raise_event(req.path_params["instance_id"], req.path_params["event"], await _json_body(req))
    return JSONResponse({"raised": req.path_params["event"]}, status_code=202)


@app.route(route="orchestrations/{instance_id}/terminate", methods=["POST"])
@app.durable_client_input(client_name="client")
async def terminate(req: Request, client: df.DurableOrchestrationClient) -> JSONResponse:
    await client.terminate(req.path_params["instance_id"], "stopped by test")
    return JSONResponse({"terminated": True}, status_code=202)


@app.route(route="entities/{name}/{key}/{op}", methods=["POST"])
@app.durable_client_input(client_name="client")
async def signal_entity(req: Request, client: df.DurableOrchestrationClient) -> JSONResponse:
    entity = df.EntityId(req.path_params["name"], req.path_params["key"])
    await client.signal_entity(entity, req.path_params["op"], await _json_body(req))
    return JSONResponse({"signalled": True}, status_code=202)


@app.route(route="entities/{name}/{key}", methods=["GET"])
@app.durable_client_input(client_name="client")
async def read_entity(req: Request, client: df.DurableOrchestrationClient) -> JSONResponse:
    state = await client.read_entity_state(df.EntityId(req.path_params["name"], req.path_params["key"]))
    return JSONResponse({"exists": state.entity_exists, "state": state.entity_state})


@app.route(route="stream", methods=["GET"])
async def stream(req: Request) -> StreamingResponse:
    chunks = int(req.query_params.get("chunks", "4"))
    delay = float(req.query_params.get("delay", "0.3"))
    crash_after = int(req.query_params.get("crash_after", "-1"))

    async def events() -> Any:
        for index in range(chunks):
            if index == crash_after:
                os._exit(1)
            yield f"data: {json.dumps({'index': index})}\n\n".encode()
            await asyncio.sleep(delay)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@app.route(route="crash", methods=["POST"])
async def crash(req: Request) -> JSONResponse:
    os._exit(1)


@app.route(route="env/{name}", methods=["GET"])
async def read_env(req: Request) -> JSONResponse:
    return JSONResponse({"value": os.environ.get(req.path_params["name"]), "pid": os.getpid(),
                         "cwd": os.getcwd()})


@app.route(route="echo/{kind:alpha}/{*rest}", methods=["GET", "POST"])
async def echo(req: Request) -> JSONResponse:
    return JSONResponse({"path_params": dict(req.path_params), "query": dict(req.query_params),
                         "method": req.method, "path": req.url.path, "body": (await req.body()).decode(),
                         "x_test": req.headers.get("x-test"), "invocation": req.headers.get("x-ms-invocation-id"),
                         "header_names": sorted(req.headers.keys())})


@app.route(route="plain", methods=["GET"])
def plain_sync(req: Request) -> dict[str, Any]:
    """A sync function returning a dict: FastAPI serializes it, as the real worker's web app does."""
    return {"sync": True, "query": dict(req.query_params)}


@app.route(route="admin/secret", methods=["GET"])
async def reserved(req: Request) -> JSONResponse:
    """Never reachable: the real host rejects routes starting with ``admin`` (built-in routes)."""
    return JSONResponse({"reached": True})


# --------------------------------------------------------------------------------------------- Durable
def _marker(payload: dict[str, Any], label: str) -> None:
    folder = Path(payload["marker_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{label}.{uuid.uuid4().hex}").write_text(str(os.getpid()))


@bp.orchestration_trigger(context_name="context", orchestration="sequence")
def sequence_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    """``steps`` activities in sequence, each slow: the crash-recovery scenario."""
    args = context.get_input()
    results = []
    for index in range(int(args["steps"])):
        context.set_custom_status({"phase": index})
        result = yield context.call_activity("step", {**args, "index": index})
        results.append(result)
    context.set_custom_status({"phase": "done"})
    return results


@bp.orchestration_trigger(context_name="context", orchestration="fanout")
def fanout_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    """``steps`` slow activities at once (several in flight when the worker dies)."""
    args = context.get_input()
    results = yield context.task_all(
        [context.call_activity("step", {**args, "index": f"fan{i}"}) for i in range(int(args["steps"]))])
    return results


@bp.activity_trigger(input_name="payload", activity="step")
async def step_activity(payload: dict[str, Any]) -> dict[str, Any]:
    _marker(payload, f"step-{payload['index']}")
    await asyncio.sleep(float(payload.get("sleep", 0)))
    return {"index": payload["index"], "pid": os.getpid()}


@bp.orchestration_trigger(context_name="context", orchestration="guarded")
def guarded_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    """Calls ``step`` until it succeeds (at most ``tries`` times), keeping each failure's text."""
    args = context.get_input()
    errors: list[str] = []
    for attempt in range(int(args.get("tries", 3))):
        try:
            result = yield context.call_activity("step", {**args, "index": f"{args.get('index', 'g')}-{attempt}"})
            return {"errors": errors, "result": result}
        except Exception as exc:  # the SDK raises Exception("<Reason> \n <Details>") for a TaskFailed
            errors.append(str(exc))
    return {"errors": errors, "result": None}


@bp.orchestration_trigger(context_name="context", orchestration="fragile")
def fragile_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    """One ``flaky`` call, not caught: the orchestration fails while ``flaky`` fails (rewind target)."""
    args = context.get_input()
    first = yield context.call_activity("echo", "before")
    flaky = yield context.call_activity("flaky", args)
    return {"first": first, "flaky": flaky}


@bp.orchestration_trigger(context_name="context", orchestration="counting")
def counting_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    """``calls`` entity calls in a row (each one entity batch)."""
    args = context.get_input()
    counter = df.EntityId("Counter", args["key"])
    totals = []
    for _ in range(int(args["calls"])):
        total = yield context.call_entity(counter, "add", 1)
        totals.append(total)
    return totals


@bp.activity_trigger(input_name="value", activity="echo")
def echo_activity(value: Any) -> Any:
    return {"echo": value}


@bp.activity_trigger(input_name="payload", activity="notify")
@bp.durable_client_input(client_name="client")
async def notify_activity(payload: dict[str, Any], client: df.DurableOrchestrationClient) -> str:
    """An activity with a durable client binding (as the real app's wake-next activity)."""
    await client.raise_event(payload["target"], "go", {"from": payload["source"]})
    return payload["target"]


@bp.activity_trigger(input_name="payload", activity="flaky")
def flaky_activity(payload: dict[str, Any]) -> str:
    folder = Path(payload["marker_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    attempt = len(list(folder.glob("flaky.*"))) + 1
    (folder / f"flaky.{attempt}").write_text("")
    if attempt <= int(payload["fail_times"]):
        raise RuntimeError(f"flaky attempt {attempt} failed")
    return f"ok after {attempt}"


@bp.orchestration_trigger(context_name="context", orchestration="workflow")
def workflow_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    """Activity, then an external event raced against a timer, an entity call + signal, and a fan-out."""
    args = context.get_input()
    context.set_custom_status("working")
    yield context.call_activity("step", {**args, "index": "pre", "sleep": args.get("pre_sleep", 0)})
    context.set_custom_status("waiting")
    go = context.wait_for_external_event("go")
    timer = context.create_timer(context.current_utc_datetime + timedelta(seconds=float(args["timeout"])))
    winner = yield context.task_any([go, timer])
    if winner == go:
        timer.cancel()
        how, payload = "event", go.result
    else:
        how, payload = "timer", None
    counter = df.EntityId("Counter", args["key"])
    total = yield context.call_entity(counter, "add", 1)
    context.signal_entity(counter, "add", 10)
    fanned = yield context.task_all([context.call_activity("echo", n) for n in (1, 2, 3)])
    context.set_custom_status("done")
    return {"how": how, "payload": payload, "payload_type": type(payload).__name__, "total": total,
            "fanned": fanned, "replaying_now": context.is_replaying}


@bp.orchestration_trigger(context_name="context", orchestration="retrying")
def retrying_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    args = context.get_input()
    retry = df.RetryOptions(first_retry_interval_in_milliseconds=200, max_number_of_attempts=3)
    recovered = yield context.call_activity_with_retry("flaky", retry, {**args, "fail_times": 2})
    try:
        yield context.call_activity_with_retry(
            "flaky", df.RetryOptions(100, 2), {**args, "marker_dir": args["marker_dir"] + "/b", "fail_times": 5})
        exhausted = "no error?"
    except Exception as exc:
        exhausted = str(exc)
    try:
        yield context.call_entity(df.EntityId("Counter", args["key"]), "fail")
        entity_error = "no error?"
    except Exception as exc:
        entity_error = str(exc)
    after = yield context.call_activity("echo", "after")
    return {"recovered": recovered, "exhausted": exhausted, "entity_error": entity_error, "after": after}


@bp.orchestration_trigger(context_name="context", orchestration="parent")
def parent_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    args = context.get_input()
    child = yield context.call_sub_orchestrator("child", {"n": args["n"]}, f"{context.instance_id}-child")
    wake = yield context.call_activity("notify", {"target": args["waiter"], "source": context.instance_id})
    return {"child": child, "woke": wake}


@bp.orchestration_trigger(context_name="context", orchestration="child")
def child_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    n = context.get_input()["n"]
    doubled = yield context.call_activity("echo", n * 2)
    return {"doubled": doubled, "parent": context.parent_instance_id}


@bp.orchestration_trigger(context_name="context", orchestration="waiter")
def waiter_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    got = yield context.wait_for_external_event("go")
    return {"got": got}


@bp.orchestration_trigger(context_name="context", orchestration="looping")
def looping_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    state = context.get_input()
    yield context.call_activity("echo", state["round"])
    if state["round"] < state["rounds"]:
        context.continue_as_new({**state, "round": state["round"] + 1})
        return None
    return {"rounds_done": state["round"]}


@bp.orchestration_trigger(context_name="context", orchestration="boom")
def boom_orchestrator(context: df.DurableOrchestrationContext) -> Any:
    context.set_custom_status("about to fail")
    yield context.call_activity("echo", "before failing")
    raise ValueError("boom in orchestrator")


@bp.entity_trigger(context_name="context", entity_name="Counter")
def counter_entity(context: df.DurableEntityContext) -> None:
    value = context.get_state(lambda: 0)
    operation = context.operation_name
    if operation == "add":
        value += int(context.get_input() or 0)
        context.set_state(value)
        context.set_result(value)
    elif operation == "get":
        context.set_result(value)
    elif operation == "fail":
        raise ValueError("counter refuses")
    else:
        raise ValueError(f"unknown operation {operation}")


@app.timer_trigger(schedule="%FIXTURE_TIMER_SCHEDULE%", arg_name="timer", use_monitor=True,
                   run_on_startup=os.environ.get("FIXTURE_TIMER_RUN_ON_STARTUP") == "true")
def ticker(timer: func.TimerRequest) -> None:
    """Writes a marker per run (``<FIXTURE_TIMER_DIR>/tick.<past_due>.<uuid>``) when a directory is set."""
    folder = os.environ.get("FIXTURE_TIMER_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"tick.{str(timer.past_due).lower()}.{uuid.uuid4().hex}").write_text(str(os.getpid()))


app.register_functions(bp)
