"""CPU of the orchestrator's replays in the worker: the SDK's own timestamp parser vs the standard library's.

Drives whole runs of the app's orchestrator through the real Durable SDK with the replay harness of
``tests/replay`` (every episode replays the whole history, as the worker does), with the history's
timestamps in the host's .NET form, and prints CPU per run and per episode for both parsers, interleaved.
No storage, no host: this isolates what ``resilient/functions/durable_timestamps.py`` changes.

    .venv/bin/python bench/replay_cost.py --runs 200 --phases 3
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from azure.durable_functions.models.history.HistoryEventType import HistoryEventType as History  # noqa: E402
from dateutil.parser import parse as dateutil_parse  # noqa: E402

from resilient.functions import durable_timestamps  # noqa: E402
from tests.fresh_app import fresh_app  # noqa: E402
from tests.replay.harness import Replay, drive, orchestrator_handle  # noqa: E402
from tests.replay.test_orchestrator_healing import Script  # noqa: E402


class NetTimestamps(Replay):
    """History timestamps as the host writes them (7 fraction digits and ``Z``)."""

    def _event(self, event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
        event = super()._event(event_type, event_id, **fields)
        event["Timestamp"] = self.now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"
        return event


def one_run(handle: Any, phases: int) -> int:
    replay = NetTimestamps(handle, {"response_id": "resp_bench"})
    episode = drive(replay, Script(phases=phases))
    assert episode.is_done and episode.error is None
    return sum(1 for event in replay.history if event["EventType"] == History.ORCHESTRATOR_STARTED)  # per episode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--phases", type=int, default=3)
    args = parser.parse_args()
    modules = [importlib.import_module(name) for name in durable_timestamps.SDK_MODULES]
    handle = orchestrator_handle(fresh_app(), "responses_orchestrator")
    one_run(handle, args.phases)  # loads the SDK (and installs the fast parser)
    durable_timestamps.install = lambda: None  # from here on, the loop below chooses the parser
    parsers = {"dateutil (the SDK's own)": dateutil_parse, "fromisoformat": durable_timestamps.parse_timestamp}
    cpu: dict[str, list[float]] = {name: [] for name in parsers}
    episodes = 0
    for _ in range(args.runs):
        for name, parse in parsers.items():
            for module in modules:
                module.dt_parse = parse
            started = time.process_time()
            episodes = one_run(handle, args.phases)
            cpu[name].append(time.process_time() - started)
    print(f"{args.runs} runs of {args.phases} phases, {episodes} episodes each (orchestrator replays only)")
    for name, seconds in cpu.items():
        median = statistics.median(seconds) * 1000
        print(f"  {name:26s} {median:7.2f} ms CPU per run (median), {median / episodes:6.3f} ms per episode")
    slow, fast = (statistics.median(seconds) for seconds in cpu.values())
    print(f"  fromisoformat / dateutil: {fast / slow:.2f}")


if __name__ == "__main__":
    main()
