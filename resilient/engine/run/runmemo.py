"""What this process remembers of the runs it drives, so a run's next activity here need not read it back."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from resilient.agents.base import AgentRequest
from resilient.storage.ports import JsonDict, ResponseRecord

REMEMBERED_RUNS = 1024


@dataclass
class RunMemo:
    """What this process learnt about a run while driving it, so that the run's next activity here does
    not read it back: the row (its document is fixed once planned; its ETag may go stale, which only costs
    a lost CAS), the agent request (input items and chain history never change), and the checkpoints this
    process wrote. Trusted only together with the run's kept log writer, whose fenced append proves that
    no other process advanced the run meanwhile."""

    record: ResponseRecord
    request: AgentRequest
    checkpoints: list[JsonDict]
    state: Any = None  # the agent state the run's last step left (its document here predates it)


class RunMemory:
    """The remembered runs of this process, newest kept: bounded so a busy worker's memory stays flat."""

    def __init__(self, capacity: int = REMEMBERED_RUNS) -> None:
        self._capacity = capacity
        self._runs: OrderedDict[str, RunMemo] = OrderedDict()

    def remember(self, memo: RunMemo) -> None:
        rid = memo.record.response_id
        self._runs[rid] = memo
        self._runs.move_to_end(rid)
        while len(self._runs) > self._capacity:
            self._runs.popitem(last=False)

    def pop(self, response_id: str) -> RunMemo | None:
        """Take the run's memo: whoever uses it remembers it again once its own activity has moved the run on."""
        return self._runs.pop(response_id, None)

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._runs
