"""Crash-resilient OpenAI-style Responses service on Azure Durable Functions.

Sub-packages, one concern each:
  protocol/  the wire format (response object, items, stream events, SSE, errors, request validation)
  storage/   Azure Tables + Blobs behind small Protocols (responses, items, event log)
  engine/    the deterministic orchestrator, the activities, the chain-lock entity logic
  agents/    the agent API (phases) and the sample research agent
  http/      host-agnostic endpoint logic
  functions/ the Azure Functions bindings (df.Blueprint objects)
"""
