#!/usr/bin/env bash
# One command from a fresh clone to a running service on http://localhost:7071 :
# venv + installs, Azurite started, local.settings.json created from the sample if missing, then
# `func start` — or, where Azure Functions Core Tools are not installed, the host double
# (tests/hostdouble), which runs the same function_app.py. The offline research agent needs no model.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-7071}
bash scripts/setup.sh
bash scripts/azurite.sh start
trap 'bash scripts/azurite.sh stop' EXIT
if command -v func >/dev/null 2>&1 && [ -z "${RESILIENT_USE_HOST_DOUBLE:-}" ]; then
  echo "run: func start on port $PORT"
  # Core Tools use the active Python: put the project's venv first.
  PATH="$PWD/.venv/bin:$PATH" VIRTUAL_ENV="$PWD/.venv" func start --port "$PORT"
else
  echo "run: Azure Functions Core Tools not found; starting the host double on port $PORT"
  .venv/bin/python -m tests.hostdouble --port "$PORT" --app-dir . --settings local.settings.json
fi
