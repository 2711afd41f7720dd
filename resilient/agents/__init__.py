"""Agents: the agent API an author writes against (``base``), the sample research agent and its model path
(``research``, ``model``, ``chat_input``, ``chat_params``), choosing the app's agent (``loader``, ``kinds``),
and hosting Agent Framework agents and workflows step by step (``framework/``)."""
