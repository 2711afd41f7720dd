"""The engine: everything between an HTTP request and storage that decides what happens to a run.

Its folders are its concerns, lowest first (each imports only from the ones before it):

* ``orchestration/``: the deterministic orchestrator (a plain generator, no I/O) and the terms it shares
  with everything that starts or signals it.
* ``heal/``: runs whose worker or orchestration died, and what runs leave behind (retention, ``store=false``).
* ``chain/``: a turn's place on its chain (steering, the chain lock), what a new turn may refer to, the
  Conversations API's rules, and reading, cancelling and deleting a response.
* ``run/``: one phase attempt from plan to conclusion; read ``run/phase.py`` top-down. With it,
  ``worker_state.py``: what one worker process keeps in memory about runs, and what each part may see stale.

``activities.py`` is the facade the Functions bindings call (:class:`~resilient.engine.activities.Engine`).
"""
