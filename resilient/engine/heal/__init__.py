"""Runs whose worker or orchestration died, and what a run leaves behind.

* ``repair``: find runs whose orchestration died and resume them from their last checkpoint.
* ``resume_notice``: the line a starting worker logs about unfinished runs.
* ``retention``: delete finished responses after the retention period.
* ``unstored``: ``store=false`` runs leave nothing behind once delivered or abandoned.
"""
