"""Crash-resilient OpenAI-style Responses service on Azure Durable Functions.

Rooms, one concern each, lowest layer first: a room imports only from its own line or the lines above
(docs/ARCHITECTURE.md, "Where things live", has the table; tests/unit/test_house_rules.py checks it):
  ids, limits, settings, logs, typed_answers  ids, time limits, app settings, log context, typed answers
  protocol/   the wire format (request validation, items, response object, stream events, SSE, errors,
              Conversations bodies)
  telemetry/  spans and counters through the OpenTelemetry API
  storage/    Azure Tables + Blobs behind small Protocols (rows, items, chains, the event log)
  agents/     the agent API (phases), the sample agent, hosting Agent Framework agents and workflows
  checkpoints Agent Framework workflow checkpoints in Table and Blob storage
  engine/     what happens to a run: orchestration/, run/, chain/, heal/, and the Engine facade
  http/       host-agnostic endpoint logic
  bootstrap   wiring one worker
  functions/  the Azure Functions bindings
"""
