"""Storage round trips per step of a hosted Agent Framework agent, with and without tools.

Runs the app (``function_app.py`` under the host double) with ``RESILIENT_AGENT`` set to the framework
tests' agent (``tests/frameworkagents/app_agents.py``) talking to the fake model, and counts the HTTP
requests the *app* makes to Azurite (its tables and blobs, named by the run's storage prefix; the Durable
backend's own traffic in the same account is not counted) through a loopback counting proxy.

Workloads (the fake model's policy, ``tests/frameworkagents/model.py``):

* ``no tools``: "thank you", one step (one model call, a text answer);
* ``one tool``: "please e-mail bob", two steps (a model call and ``send_email``; then the answer);
* ``two tools``: "please book and pay", two steps (one model call asking for ``reserve`` and ``charge``;
  then the answer); only where the agent has those tools.

    AZURITE="$(bash scripts/azurite.sh connection-string mine)"
    AzureWebJobsStorage="$AZURITE" .venv/bin/python bench/agent_steps.py --runs 5
    # the same workloads against another checkout of the app (e.g. the commit before a change):
    AzureWebJobsStorage="$AZURITE" .venv/bin/python bench/agent_steps.py --app-dir /tmp/base --runs 5
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from counting_proxy import CountingProxy, storage_operation  # noqa: E402

WORKLOADS = [("no tools", "thank you", 1), ("one tool", "please e-mail bob", 2),
             ("two tools", "please book and pay", 2)]


class AppCallsProxy(CountingProxy):
    """Counts only the requests whose path names the app's storage prefix (its tables and containers)."""

    def __init__(self, upstream_ports: dict[str, int], prefix: str) -> None:
        super().__init__(upstream_ports)
        self.prefix = prefix.lower()

    def _count(self, service: str, method: str, target: str, headers: dict[str, str] | None = None) -> None:
        if self.prefix in target.lower():
            with self._lock:
                self.counts[storage_operation(service, method, target, headers or {})] += 1


def azurite_ports(connection_string: str) -> dict[str, int]:
    found = {}
    for service in ("blob", "queue", "table"):
        match = re.search(rf"{service.capitalize()}Endpoint=http://127\.0\.0\.1:(\d+)", connection_string)
        if not match:
            raise SystemExit(f"AzureWebJobsStorage names no local {service} endpoint (start Azurite first)")
        found[service] = int(match.group(1))
    return found


def run_workload(client: Any, proxy: AppCallsProxy, text: str, runs: int) -> list[collections.Counter[str]]:
    per_run = []
    for _ in range(runs):
        before = proxy.snapshot()
        with client.responses.create(model="fake", input=text, stream=True, background=True) as stream:
            for event in stream:
                if event.type in ("response.completed", "response.failed", "response.incomplete"):
                    assert event.type == "response.completed", event
        time.sleep(1.0)  # the run's last writes after its terminal event (chain release)
        per_run.append(proxy.snapshot() - before)
    return per_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--app-dir", default=str(ROOT), help="the app checkout to run (default: this one)")
    args = parser.parse_args()
    from openai import OpenAI

    from tests.fakemodel.server import FakeModel
    from tests.frameworkagents.model import ToolLoop
    from tests.hostdouble.api import HostDouble

    prefix = "ab" + secrets.token_hex(4)
    proxy = AppCallsProxy(azurite_ports(os.environ["AzureWebJobsStorage"]), prefix)
    proxy.start()
    app_tools = (Path(args.app_dir) / "tests/frameworkagents/app_agents.py").read_text()
    try:
        with FakeModel() as model:
            model.responder = ToolLoop()
            env = {"AzureWebJobsStorage": proxy.connection_string(), "RESILIENT_STORAGE_PREFIX": prefix,
                   "RESILIENT_AGENT": "tests.frameworkagents.app_agents:build", "FAKE_MODEL_URL": model.base,
                   "TASKHUB_NAME": "AgentSteps" + prefix[2:]}
            with HostDouble(args.app_dir, env=env, settings=None) as double:
                client = OpenAI(base_url=double.base_url, api_key="local", max_retries=0, timeout=60.0)
                run_workload(client, proxy, "thank you", 1)  # warm-up: first imports, tables created
                print(f"app: {args.app_dir}; {args.runs} runs each; app storage requests (median per response)")
                for name, text, steps in WORKLOADS:
                    if name == "two tools" and "def charge" not in app_tools:
                        continue
                    counts = run_workload(client, proxy, text, args.runs)
                    totals = [sum(c.values()) for c in counts]
                    median = statistics.median(totals)
                    ops = collections.Counter[str]()
                    for c in counts:
                        ops.update(c)
                    detail = ", ".join(f"{op} {n / len(counts):.1f}" for op, n in sorted(ops.items()))
                    print(f"{name:9} steps {steps}: {median:5.1f} per response, {median / steps:5.1f} per step "
                          f"(min {min(totals)}, max {max(totals)}) | {detail}")
    finally:
        proxy.stop()


if __name__ == "__main__":
    main()
