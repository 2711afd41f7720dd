"""The deterministic control flow: one orchestration per response, a plain generator with no I/O.

* ``orchestrator``: the run's control flow and failure policy.
* ``terms``: the names and keys the orchestrator, its activities, the HTTP layer and repair agree on.
* ``turnqueue``: a queued turn's wait for its chain's lock.
* ``failures``: which activity failures mean the worker went away.
"""
