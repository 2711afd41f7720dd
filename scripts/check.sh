#!/usr/bin/env bash
# Lint, type-check and test. Expects .venv (scripts/setup.sh) and Azurite on 127.0.0.1 (scripts/azurite.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export AzureWebJobsStorage="${AzureWebJobsStorage:-UseDevelopmentStorage=true}"
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
