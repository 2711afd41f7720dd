"""Samples of agents to plug in with ``RESILIENT_AGENT`` (see README, "Bring your own agent")."""
