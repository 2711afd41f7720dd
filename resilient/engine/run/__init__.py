"""A run, one phase attempt at a time: what an activity does between the orchestrator's calls.

Read in this order:

* ``planning``: a turn's plan, persisted once; the run moves to ``in_progress``.
* ``phase``: one attempt of one phase, top to bottom (its module doc lists the parts in call order); it
  calls, each once or twice:
  * ``phase_record``: where the phase stands in its turn (read once from the row) and what it writes to
    the row (its progress while it streams, its record just before its checkpoint); open plans' rules;
  * ``claim`` (with ``recovery`` and ``liveness``): where the log ends (a crash to recover from, another
    attempt still writing), and the fenced first append that claims it;
  * ``agent_request``: what the agent is given (its request and the phase's context);
  * ``pump`` (with ``batching`` and ``phase_items``): the agent's outputs into items and events, appended
    in group commits, with the control flags read on the way.
* ``conclude``: the one terminal transition and the single terminal event.
* ``runmemo``, ``shutdown``: what this worker remembers of the runs it drives, and stopping on SIGTERM.
"""
