"""A run, one phase attempt at a time: what an activity does between the orchestrator's calls.

Read in this order:

* ``planning``: a turn's plan, persisted once; the run moves to ``in_progress``.
* ``phase``: one attempt of one phase, top to bottom: read what is left, claim the log, stream, checkpoint.
* ``claim`` (with ``logtail``, ``recovery`` and ``liveness``): taking the end of the event log for this
  attempt, and what a recovered attempt appends first (the reset) or waits for (a live duplicate).
* ``pump`` (with ``batching`` and ``phase_items``): the agent's outputs into items and events, appended in
  group commits, with the control flags read on the way.
* ``steps``: open plans, where each step decides whether another follows.
* ``conclude``: the one terminal transition and the single terminal event.
* ``progress``: what a step keeps as it goes (a model's decision, each tool's result), for its next attempt.
* ``agent_request``, ``runmemo``, ``shutdown``: what the agent is given, what this worker remembers of the
  run, and stopping on SIGTERM.
"""
