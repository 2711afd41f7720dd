"""A small in-process Durable runtime that runs the REAL orchestrator generator over the real activities.

Used where the host double is not needed: the race tests (``tests/reliability/test_races.py``) and the
repair tests (``tests/integration/test_repair*.py``). It plays the Durable side only:

* runs ``resilient.engine.orchestration.orchestrator.response_orchestrator`` step by step, executing each activity with
  the real :class:`~resilient.engine.activities.Engine` (each activity is its own asyncio task, so a
  "killed" orchestration can leave it running as a zombie, or kill it too);
* answers ``chain_lock`` entity calls with the entity's own pure state machine (``chainlock.apply``, one
  operation at a time, like a Durable entity) and accepts one-way signals;
* buffers external events (``cancel``, ``lock_granted``) the way Durable does for an instance that is not
  waiting yet; an event for an unknown instance is refused, one for an instance that ended is dropped;
* durable timers sleep ``timer_scale`` × their delay (time is not what these tests are about);
* ``inject`` is keyed by (response id, activity name) or, for one phase, (response id, "run_phase:<i>");
* the ``DurableRuntime`` port: ``start`` (over a terminal instance: a new execution; over a running one:
  refused, as the extension's default ``OverridableExistingInstanceStates`` does), ``status``,
  ``raise_event``, ``signal_entity``; plus test hooks: :meth:`Durable.kill` (the orchestration becomes
  Failed/Terminated, or disappears), and :attr:`Durable.inject` (make the next calls of an activity fail
  with a given text, e.g. the real host's worker-exit reason, before or after the activity ran).

Orchestrator exceptions are thrown into the generator exactly as the Python SDK does
(``Exception("<reason> \\n <details>")``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from resilient.engine.activities import Engine
from resilient.engine.chain import chainlock
from resilient.engine.heal import unstored
from resilient.engine.orchestration import orchestrator as orch
from resilient.engine.orchestration import terms as terms

WORKER_EXIT = ("Activity function '{name}' failed: python exited with code 137 (0x89) \n "
               "Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException: python exited with code 137")


@dataclass
class _Activity:
    name: str
    payload: Any


@dataclass
class _EntityCall:
    entity: Any
    operation: str
    payload: Any


@dataclass(eq=False)
class _WaitEvent:
    name: str


@dataclass(eq=False)
class _Timer:
    fire_at: datetime
    cancelled: bool = False
    is_completed: bool = False

    def cancel(self) -> None:
        assert not self.is_completed, "a completed timer cannot be cancelled (the SDK raises)"
        self.cancelled = True


@dataclass
class _AnyOf:
    tasks: list[Any]


class _Context:
    """The part of ``DurableOrchestrationContext`` the orchestrator uses; every call returns a task
    description that :class:`Durable` carries out."""

    current_utc_datetime = datetime(2026, 1, 1, tzinfo=UTC)

    def __init__(self, payload: Any) -> None:
        self._payload = payload
        self.custom_status: Any = None

    def get_input(self) -> Any:
        return self._payload

    def call_activity(self, name: str, payload: Any) -> _Activity:
        return _Activity(name, payload)

    def call_entity(self, entity: Any, operation: str, payload: Any) -> _EntityCall:
        return _EntityCall(entity, operation, payload)

    def wait_for_external_event(self, name: str) -> _WaitEvent:
        return _WaitEvent(name)

    def task_any(self, tasks: list[Any]) -> _AnyOf:
        return _AnyOf(list(tasks))

    def create_timer(self, fire_at: datetime) -> _Timer:
        return _Timer(fire_at)

    def set_custom_status(self, status: Any) -> None:
        self.custom_status = status


def wire(value: Any) -> Any:
    """Everything crossing the Durable boundary is JSON."""
    return json.loads(json.dumps(value))


@dataclass
class Injected:
    """Fail one activity call with ``text``: before it does anything (default), after it did all its work
    but before it reported (``after=True``), or once it appended ``deltas`` more text deltas to the log (the
    worker died mid-phase: the activity is cancelled where it stands)."""

    text: str
    after: bool = False
    deltas: int | None = None


@dataclass
class Instance:
    instance_id: str
    payload: Any
    status: str = "Running"
    task: asyncio.Task[Any] | None = None
    output: Any = None
    executions: int = 1
    inbox: list[tuple[str, Any]] = field(default_factory=list)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    activity_tasks: set[asyncio.Task[Any]] = field(default_factory=set)


class Durable:
    """The ``DurableRuntime`` port plus a runtime for the real orchestrator (see the module docstring)."""

    def __init__(self, engine: Engine, *, timer_scale: float = 0.01) -> None:
        self.engine = engine
        self.timer_scale = timer_scale
        self.entities: dict[str, Any] = {}
        self.instances: dict[str, Instance] = {}
        self.activity_errors: list[tuple[str, str, str]] = []
        self.activities: dict[str, list[str]] = {}
        self.plan_order: list[str] = []
        self.starts: list[tuple[str, Any]] = []
        self.signals: list[tuple[str, str, str, Any]] = []
        self.inject: dict[tuple[str, str], list[Injected]] = {}
        self.repairer: Any = None  # set to a Repairer to have inspect_response nudge it, as the binding does

    @property
    def runs(self) -> dict[str, asyncio.Task[Any]]:
        return {rid: inst.task for rid, inst in self.instances.items() if inst.task is not None}

    # -- DurableRuntime port
    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        found = self.instances.get(instance_id)
        if found is not None and found.status in ("Running", "Pending"):
            raise RuntimeError(f"An Orchestration instance with the status {found.status} already exists.")
        self.starts.append((instance_id, wire(payload)))
        self.activities.setdefault(instance_id, [])
        inst = Instance(instance_id, wire(payload), executions=(found.executions + 1) if found else 1)
        self.instances[instance_id] = inst
        inst.task = asyncio.create_task(self._orchestrate(inst))

    async def status(self, instance_id: str) -> str | None:
        found = self.instances.get(instance_id)
        return None if found is None else found.status

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        """Buffered for the instance's current execution (an instance that ended ignores it)."""
        inst = self.instances.get(instance_id)
        if inst is None:
            raise LookupError(f"no orchestration {instance_id}")
        inst.inbox.append((name, wire(data)))
        inst.wakeup.set()

    async def signal_entity(self, entity_name: str, key: str, operation: str, payload: Any) -> None:
        self.signals.append((entity_name, key, operation, wire(payload)))
        self._apply(f"{entity_name}@{key}", operation, payload)

    # -- test hooks
    async def kill(self, instance_id: str, status: str | None = "Failed", *, activities: bool = True) -> None:
        """The orchestration dies: it becomes ``status`` (None: the instance disappears). With ``activities``
        its running activities die too (the worker died); otherwise they go on as zombies."""
        inst = self.instances[instance_id]
        if inst.task is not None:
            inst.task.cancel()
            await asyncio.gather(inst.task, return_exceptions=True)
        if activities:
            for running in list(inst.activity_tasks):
                running.cancel()
            await asyncio.gather(*inst.activity_tasks, return_exceptions=True)
        if status is None:
            del self.instances[instance_id]
        else:
            inst.status = status

    def entity_state(self, chain_id: str) -> chainlock.ChainState:
        return chainlock.coerce_state(self.entities.get(f"{terms.CHAIN_LOCK_ENTITY}@{chain_id}"), chain_id)

    async def wait(self, instance_id: str, timeout: float) -> Any:
        """The output of the instance's current execution (waits for a restarted one too)."""
        async def done() -> Any:
            while True:
                inst = self.instances.get(instance_id)
                task = None if inst is None else inst.task
                if task is None:
                    await asyncio.sleep(0.05)  # killed without a trace: wait for a new execution
                    continue
                try:
                    output = await asyncio.shield(task)
                except asyncio.CancelledError:
                    if not task.cancelled():
                        raise
                    await asyncio.sleep(0.05)  # killed: wait for a restarted execution
                    continue
                if self.instances[instance_id].task is task:
                    return output

        return await asyncio.wait_for(done(), timeout)

    # -- the orchestration loop
    async def _orchestrate(self, inst: Instance) -> Any:
        generator: Generator[Any, Any, Any] = orch.response_orchestrator(_Context(inst.payload))
        send: Any = None
        throw: BaseException | None = None
        try:
            for _ in range(1000):
                try:
                    task = generator.throw(throw) if throw is not None else generator.send(send)
                except StopIteration as finished:
                    inst.status, inst.output = "Completed", finished.value
                    return finished.value
                send, throw = None, None
                try:
                    send = await self._perform(inst, task)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a failed activity is thrown into the orchestrator, as Durable does
                    self.activity_errors.append((inst.instance_id, type(exc).__name__, str(exc)[:300]))
                    throw = exc
            raise AssertionError(f"orchestration {inst.instance_id} did not end in 1000 steps")
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            inst.status, inst.output = "Failed", repr(exc)
            raise

    def _apply(self, key: str, operation: str, payload: Any) -> Any:
        state = chainlock.coerce_state(self.entities.get(key), key.split("@", 1)[1])
        new_state, answer = chainlock.apply(operation, state, wire(payload))
        self.entities[key] = wire(new_state)
        return wire(answer)

    async def _perform(self, inst: Instance, task: Any) -> Any:
        if isinstance(task, _Activity):
            args = wire(task.payload)
            self.activities[inst.instance_id].append(task.name)
            running = asyncio.create_task(self._activity(task.name, args))
            inst.activity_tasks.add(running)
            running.add_done_callback(inst.activity_tasks.discard)
            return wire(await asyncio.shield(running))
        if isinstance(task, _EntityCall):
            await asyncio.sleep(0)  # an entity operation is a message: let others interleave
            return self._apply(f"{task.entity.name}@{task.entity.key}", task.operation, task.payload)
        if isinstance(task, _WaitEvent):
            return (await self._next_event(inst, [task]))[1]
        if isinstance(task, _AnyOf):
            waits = [t for t in task.tasks if isinstance(t, _WaitEvent)]
            timers = [t for t in task.tasks if isinstance(t, _Timer)]
            if not timers:
                return (await self._next_event(inst, waits))[0]
            timer = min(timers, key=lambda t: t.fire_at)
            try:
                return (await asyncio.wait_for(self._next_event(inst, waits), self._delay(timer)))[0]
            except TimeoutError:
                timer.is_completed = True
                return timer
        if isinstance(task, _Timer):
            await asyncio.sleep(self._delay(task))
            task.is_completed = True
            return None
        raise AssertionError(f"unexpected orchestrator task {task!r}")

    def _delay(self, timer: _Timer) -> float:
        return max(0.0, (timer.fire_at - _Context.current_utc_datetime).total_seconds() * self.timer_scale)

    async def _next_event(self, inst: Instance, waits: list[_WaitEvent]) -> tuple[_WaitEvent, Any]:
        """The first buffered event one of ``waits`` is waiting for (in arrival order)."""
        while True:
            for position, (name, data) in enumerate(inst.inbox):
                for wait in waits:
                    if wait.name == name:
                        del inst.inbox[position]
                        return wait, data
            inst.wakeup.clear()
            await inst.wakeup.wait()

    async def _activity(self, name: str, args: dict[str, Any]) -> Any:
        rid = str(args["response_id"])
        queued = self.inject.get((rid, f"{name}:{args['index']}")) if "index" in args else None
        queued = queued or self.inject.get((rid, name))
        failure = queued.pop(0) if queued else None
        if failure is not None and failure.deltas is not None:
            await self._die_mid_phase(rid, self._run(name, rid, args), failure.deltas)
            raise Exception(failure.text.format(name=name))
        if failure is not None and not failure.after:
            raise Exception(failure.text.format(name=name))
        result = await self._run(name, rid, args)
        if failure is not None:
            raise Exception(failure.text.format(name=name))
        return result

    async def _die_mid_phase(self, rid: str, work: Any, deltas: int) -> None:
        """Run ``work`` until ``deltas`` more text deltas are in the log (or it ends), then kill it."""
        async def count() -> int:
            found = await self.engine.storage.events.read_after(rid, -1)
            return sum(e.type == "response.output_text.delta" for e in found.events)

        start = await count()
        running = asyncio.create_task(work)
        while not running.done():
            if await count() >= start + deltas:
                break
            await asyncio.sleep(0.005)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    async def _run(self, name: str, rid: str, args: dict[str, Any]) -> Any:
        engine = self.engine
        if name == terms.RUN_PHASE:
            if args.get("plan"):
                self.plan_order.append(rid)
            position = args.get("position")  # an open plan's step: where its items start
            return await engine.run_phase(rid, int(args["index"]), finalize=bool(args.get("finalize", False)),
                                          plan=bool(args.get("plan", False)),
                                          position=int(position) if position is not None else None)
        if name == terms.FINALIZE:
            return await engine.finalize(rid, args)
        if name == terms.MARK_QUEUED:
            return await engine.mark_queued(rid)
        if name == terms.INSPECT:  # as the binding does: an unfinished run also gets a repair check
            verdict = await engine.inspect(rid)
            if not verdict["over"] and self.repairer is not None:
                await self.repairer.nudge(rid)
            return verdict
        if name == terms.WAKE_NEXT:
            await self.raise_event(rid, terms.LOCK_GRANTED_EVENT, {"granted": True})
            return {"woken": rid}
        if name == terms.FORGET:  # store=false (the binding also purges the history, which this keeps none of)
            await unstored.forget(engine.storage, rid)
            return {"forgotten": True}
        raise AssertionError(f"unknown activity {name}")
