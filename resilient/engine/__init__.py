"""The engine: everything between an HTTP request and storage that decides what happens to a run.

Its folders are its concerns:

* ``orchestration/``: the deterministic orchestrator (a plain generator, no I/O) and the terms it shares
  with everything that starts or signals it.
* ``run/``: one phase attempt from plan to conclusion; read ``run/phase.py`` top-down.
* ``chain/``: a turn's place on its chain (steering, the chain lock), what a new turn may refer to, the
  Conversations API's rules, and reading, cancelling and deleting a response.
* ``heal/``: runs whose worker or orchestration died, and what runs leave behind (retention, ``store=false``).

``activities.py`` is the facade the Functions bindings call (:class:`~resilient.engine.activities.Engine`);
``worker_state.py`` is what one worker process keeps in memory about runs, and what each part may see stale.
"""
