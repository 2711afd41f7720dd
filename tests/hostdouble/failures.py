"""How an invocation ends, and the texts the real host writes for each ending.

The worker side of an invocation can end four ways (:data:`Outcome`): the worker answered (success or a
failure of the user code), the worker process died (``WorkerProcessExitException``), ``functionTimeout``
fired (``FunctionTimeoutException``), or the host is shutting down. The texts below are the host's and the
Durable extension's, read from their source:

* ``WorkerProcess.OnProcessExited``: ``"{FileName} exited with code {code} (0x{code:X})"`` (``python`` for
  the Python worker; SIGKILL shows as 137 = 128 + 9, as .NET reports a signalled process);
* ``FunctionExecutor``: ``"Timeout value of {hh:mm:ss} was exceeded by function: Functions.{name}"``;
* ``RpcException``: ``"Result: Failure\\nException: {Type}: {message}\\nStack: {stack}"``, of which
  ``OutOfProcExceptionHelpers.TryGetExceptionWithFriendlyMessage`` keeps the text between ``Exception:``
  and ``\\nStack:`` (leading space included);
* ``TaskActivityShim``: TaskFailed ``Reason`` ``"Activity function '{name}' failed: {message}"`` and
  ``Details`` = the exception serialized by Newtonsoft with ``TypeNameHandling.Objects``
  (``Utils.SerializeCause``);
* ``TaskOrchestrationShim``: ``"Orchestrator function '{name}' failed: {message}"``, where a worker exit
  surfaces through ``resultTask.Result`` as an ``AggregateException`` ("One or more errors occurred.
  (…)") — our reading of the code; the part that matters for classification (``exited with code``) is
  certain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .config import format_timespan

WORKER_EXECUTABLE = "python"
HRESULT_EXCEPTION = -2146233088  # COR_E_EXCEPTION


@dataclass(frozen=True)
class Answered:
    """The worker answered; ``body`` is its JSON answer (``{"ok": true, ...}`` or a user-code failure)."""

    body: dict[str, Any]


@dataclass(frozen=True)
class WorkerExited:
    """The worker process died while the invocation was in flight."""

    exit_code: int

    @property
    def message(self) -> str:
        return worker_exit_message(self.exit_code)


@dataclass(frozen=True)
class TimedOut:
    """``functionTimeout`` expired for this invocation."""

    function: str
    timeout: timedelta

    @property
    def message(self) -> str:
        return timeout_message(self.function, self.timeout)


@dataclass(frozen=True)
class HostStopping:
    """The host is shutting down; the Durable work item is abandoned and retried later."""


Outcome = Answered | WorkerExited | TimedOut | HostStopping


def worker_exit_message(exit_code: int) -> str:
    return f"{WORKER_EXECUTABLE} exited with code {exit_code} (0x{exit_code & 0xFFFFFFFF:X})"


def timeout_message(function: str, timeout: timedelta) -> str:
    return f"Timeout value of {format_timespan(timeout)} was exceeded by function: Functions.{function}"


def exit_code_of(returncode: int) -> int:
    """asyncio's ``-signal`` for a signalled process → the ``128 + signal`` .NET reports on Linux."""
    return 128 - returncode if returncode < 0 else returncode


def dotnet_exception(type_name: str, assembly: str, message: str, inner: dict[str, Any] | None = None,
                     stack: str | None = None) -> dict[str, Any]:
    """An exception as Newtonsoft serializes it through ``ISerializable`` with ``TypeNameHandling.Objects``."""
    return {
        "$type": f"{type_name}, {assembly}", "ClassName": type_name, "Message": message, "Data": None,
        "InnerException": inner, "HelpURL": None, "StackTraceString": stack, "RemoteStackTraceString": None,
        "RemoteStackIndex": 0, "ExceptionMethod": None, "HResult": HRESULT_EXCEPTION, "Source": None,
        "WatsonBuckets": None,
    }


def worker_exit_details(exit_code: int) -> str:
    inner = dotnet_exception("System.Exception", "System.Private.CoreLib", "")
    return json.dumps(dotnet_exception("Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException",
                                       "Microsoft.Azure.WebJobs.Script", worker_exit_message(exit_code), inner))


def timeout_details(function: str, timeout: timedelta) -> str:
    return json.dumps(dotnet_exception("Microsoft.Azure.WebJobs.Host.FunctionTimeoutException",
                                       "Microsoft.Azure.WebJobs.Host", timeout_message(function, timeout)))


def user_code_failure(message: str, stack: str) -> tuple[str, str]:
    """(friendly message, Details) for an exception the user's code raised in the worker."""
    rpc_message = f"Result: Failure\nException: {message}\nStack: {stack}"
    friendly = rpc_message[rpc_message.index("\nException:") + len("\nException:"):rpc_message.index("\nStack:")]
    inner = dotnet_exception("Microsoft.Azure.WebJobs.Script.Workers.Rpc.RpcException",
                             "Microsoft.Azure.WebJobs.Script", rpc_message)
    return friendly, json.dumps(dotnet_exception("System.Exception", "System.Private.CoreLib", friendly, inner))


def activity_failure(name: str, outcome: Outcome) -> tuple[str, str]:
    """TaskFailed (Reason, Details) for an activity that did not complete."""
    if isinstance(outcome, WorkerExited):
        return f"Activity function '{name}' failed: {outcome.message}", worker_exit_details(outcome.exit_code)
    if isinstance(outcome, TimedOut):
        return (f"Activity function '{name}' failed: {outcome.message}",
                timeout_details(outcome.function, outcome.timeout))
    if isinstance(outcome, Answered):
        friendly, details = user_code_failure(str(outcome.body.get("error", "unknown error")),
                                              str(outcome.body.get("stack", "")))
        return f"Activity function '{name}' failed: {friendly}", details
    raise ValueError(f"no TaskFailed for {outcome!r}")


def orchestrator_worker_exit(name: str, exit_code: int) -> tuple[str, str]:
    """Output and details of an orchestration whose episode was in flight when the worker died."""
    message = f"One or more errors occurred. ({worker_exit_message(exit_code)})"
    aggregate = dotnet_exception("System.AggregateException", "System.Private.CoreLib", message,
                                 json.loads(worker_exit_details(exit_code)))
    return f"Orchestrator function '{name}' failed: {message}", json.dumps(aggregate)
