"""Everything one worker process keeps in memory about runs, behind one object (:class:`WorkerState`):
its caches, the repair throttle, and the shutdown signal and background tasks it owns.

Each cache is an optimisation that lets this process skip a storage read. None of them is shared with
other workers (on this host instance or another), so each may be stale about what another did; this is
what each may see stale, for how long, and why that is still correct:

* ``runs`` (:class:`~resilient.engine.run.runmemo.RunMemory`): the row, agent request and checkpoints of a
  run this process drove. The row's ETag goes stale as soon as anyone else writes the row; that only loses
  a compare-and-swap, which reads again. The memo is trusted only together with the run's kept log writer.
* ``kept`` (:class:`~resilient.storage.kept.KeptWriters`), the log writers kept between a run's
  activities: a writer's idea of the end of the log is stale once another instance appends. Appends are
  fenced on the blob's append position, so a stale writer's append fails without writing and the caller
  opens a fresh one: staleness costs a retry, never a wrong event.
* ``controls`` (:class:`~resilient.storage.controls.ControlBoard`): the last control columns (status,
  cancel flag, pending inputs) seen here. A change made elsewhere is seen by the next read, which a phase
  makes once its snapshot is older than its control interval: that interval bounds the staleness of a
  cancel or steer, exactly as a polling phase would.
* ``feed`` (:class:`~resilient.storage.feed.CommittedFeed`), with the recent-log cache
  (:mod:`resilient.storage.recent`) inside it: blocks committed here, handed to readers here. A reader
  polls storage for what other instances write, and a remembered log is a true prefix of the stored log
  (any block not seen here forgets it; a row check on every reconnect sees deletions elsewhere), served for
  a bounded time. The "writing here / expected here" marks only pace readers; a wrong one costs latency.
* ``repair_checks`` (:class:`~resilient.engine.heal.repair.Throttle`, a throttle kept beside the caches):
  when a client's read here last made this process check a response's orchestration. Other instances keep
  their own, so a run is checked on demand at most once per check interval per instance; a check reads
  storage and Durable and changes nothing when the run is alive, so a second check elsewhere costs only its
  reads.

A worker that dies takes all of it with it: its successor reads storage, as any other instance does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from resilient.engine.heal.repair import Throttle
from resilient.engine.heal.unstored import Detached
from resilient.engine.run.batching import expect_next_activity, load_factor
from resilient.engine.run.runmemo import RunMemory
from resilient.engine.run.shutdown import Shutdown
from resilient.protocol import events as ev
from resilient.storage.controls import ControlBoard
from resilient.storage.feed import CommittedFeed
from resilient.storage.kept import KeptWriters
from resilient.storage.ports import CommittedBlock

if TYPE_CHECKING:
    from resilient.storage.factory import Storage


@dataclass
class WorkerState:
    """What one worker keeps in memory, every field:

    * ``feed``: blocks committed here, handed to readers here (a cache; with the recent-log cache inside);
    * ``controls``: the last control columns seen here (a cache);
    * ``runs``: what this process remembers of the runs it drives (a cache);
    * ``kept``: the log writers kept between a run's activities (a cache);
    * ``repair_checks``: when a read here last checked a run's orchestration (a throttle, not a cache);
    * ``shutdown``: the SIGTERM signal its running steps watch (they stop and run again elsewhere);
    * ``detached``: the background tasks it started, kept referenced until they finish.

    The module doc says what each cache may see stale. Each object owns all of them; nothing is kept at
    module level. The wiring (:func:`resilient.bootstrap.bootstrap`) builds one per worker event loop and
    hands it to storage (the feed, the control board and the kept writers, which storage reports to), the
    engine and the service alike (each names it ``worker``). :meth:`sharing` builds one over storage opened
    elsewhere: another engine or service of the same process, with its own run memo."""

    feed: CommittedFeed = field(default_factory=CommittedFeed)
    controls: ControlBoard = field(default_factory=ControlBoard)
    runs: RunMemory = field(default_factory=RunMemory)
    kept: KeptWriters = field(default_factory=KeptWriters)
    shutdown: Shutdown = field(default_factory=Shutdown)  # SIGTERM: running steps stop and run elsewhere
    repair_checks: Throttle = field(default_factory=Throttle)  # on-demand repair checks made here
    detached: Detached = field(default_factory=Detached)  # background work started here, kept referenced

    @classmethod
    def sharing(cls, storage: Storage) -> WorkerState:
        """A worker state over the feed and the control board ``storage`` reports to (the rest new)."""
        return cls(feed=storage.feed, controls=storage.controls)

    def load_factor(self) -> float:
        """How much time-based paces stretch in this process (see :func:`resilient.engine.run.batching.load_factor`)."""
        return load_factor(self.feed)

    def expect_next_activity(self, response_id: str) -> None:
        """Tell readers here that the run's next activity will probably append in this process soon."""
        expect_next_activity(response_id, self.feed)

    def run_here(self, response_id: str) -> bool:
        """A phase of the run streams here, or its next activity is expected here: evidence of a live run."""
        return self.feed.writing_here(response_id) or self.feed.expected_here(response_id)

    def remembered_log(self, response_id: str, starting_after: int) -> CommittedBlock | None:
        """A reconnect's first events from this process's memory of the log (a true prefix of the stored log,
        see ``resilient/storage/recent.py``), when that prefix is the whole log (it ends with the terminal
        event) or the run is being written here (the rest then arrives through the feed). Otherwise None: the
        first events are read from storage. The response's row is checked either way."""
        block = self.feed.recent(response_id, starting_after)
        if block is None or not block.events:
            return None
        if block.events[-1].type in ev.TERMINAL_EVENT_TYPES:
            return block
        if self.run_here(response_id):
            return block
        return None
