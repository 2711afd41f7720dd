#!/usr/bin/env bash
# Create .venv (Python 3.13 preferred, 3.12 accepted) and install runtime + dev requirements and Azurite.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
  for cand in "${PYTHON:-}" python3.13 "$HOME/.pyenv/versions/3.13.0/bin/python" python3.12 \
              "$HOME/.pyenv/versions/3.12.1/bin/python" python3; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  echo "error: Python 3.12+ is required (set PYTHON=/path/to/python3.13)" >&2; return 1
}

if [ ! -x .venv/bin/python ]; then
  PY="$(pick_python)"
  echo "setup: creating .venv with $("$PY" --version)"
  "$PY" -m venv .venv
elif ! .venv/bin/python -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)'; then
  echo "error: .venv has $(.venv/bin/python --version 2>&1); Python 3.12+ is required: delete .venv and run again" \
       "(set PYTHON=/path/to/python3.13 to choose the interpreter)" >&2
  exit 1
fi
# node_modules: Azurite, and the JavaScript clients tests/clients drives (package.json). Installed again
# whenever it no longer matches package-lock.json (a pull that changed it), checked in one node call.
if [ ! -x node_modules/.bin/azurite ] || ! node scripts/node_deps_current.mjs; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "error: Node.js 18+ (with npm) is required to install Azurite and the tests' JavaScript clients" >&2
    exit 1
  fi
  echo "setup: npm ci (Azurite, AI SDK: package-lock.json)"
  # beside pip's install (each keeps one core busy for about as long), waited for below
  npm ci --no-audit --no-fund --loglevel=error &
  npm_pid=$!
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
if [ -n "${npm_pid:-}" ] && ! wait "$npm_pid"; then
  echo "error: npm ci failed" >&2
  exit 1
fi
if [ ! -f local.settings.json ]; then
  cp local.settings.sample.json local.settings.json
  echo "setup: created local.settings.json from local.settings.sample.json"
fi
echo "setup: ok ($(.venv/bin/python --version))"
