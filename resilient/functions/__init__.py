"""The Azure Functions bindings, thin adapters to the engine and the HTTP layer: HTTP routes (``http``),
the orchestrator, activities and chain-lock entity (``durable``, declared in ``durable_bindings``), the
timers (``maintenance``), the Durable client behind the engine's ports (``client``, ``history``), who
checks callers (``auth_level``), the SDK's timestamp parsing (``durable_timestamps``) and the per-process
runtime (``runtime``)."""
