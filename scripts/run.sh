#!/usr/bin/env bash
# Run the service locally: bash scripts/run.sh [--fresh]
#
# Sets up .venv and Azurite if needed, starts this checkout's own Azurite (instance "run": its data is
# kept in .azurite/run/data, so responses survive a restart; --fresh wipes it first), then serves
# function_app.py on http://localhost:$PORT (default 7071) with `func start`, or with the host double
# (tests/hostdouble) where Azure Functions Core Tools are not installed or RESILIENT_USE_HOST_DOUBLE=1.
# The storage connection string reaches the host through the environment (AzureWebJobsStorage), which
# wins over local.settings.json for both. Ctrl-C (SIGINT), SIGTERM or SIGHUP stops everything it
# started: the host, its worker and Azurite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "$(trap -p INT)" ] && [ -z "${RESILIENT_RUN_SIGINT_RESTORED:-}" ]; then
  # Started in the background by a non-interactive shell, SIGINT arrives ignored, and bash cannot trap a
  # signal ignored at entry: restart this script once with SIGINT back to its default, so it can be
  # stopped with SIGINT like from a terminal.
  PY=$(command -v python3 || command -v python) || { echo "run: Python 3 is required" >&2; exit 1; }
  export RESILIENT_RUN_SIGINT_RESTORED=1
  exec "$PY" -c 'import os, signal, sys; [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE, signal.SIGXFSZ)]; os.execvp(sys.argv[1], sys.argv[1:])' \
    bash "$0" "$@"
fi
PORT=${PORT:-7071}
STOP_GRACE_S=${RESILIENT_STOP_GRACE_S:-8}
AZURITE_INSTANCE=${RESILIENT_AZURITE_INSTANCE:-run}  # .azurite/NAME: data, ports, pid
FRESH=()
for arg in "$@"; do
  case "$arg" in
    --fresh) FRESH=(--fresh) ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run: unknown option '$arg' (usage: bash scripts/run.sh [--fresh])" >&2; exit 2 ;;
  esac
done
case "$PORT" in ''|*[!0-9]*) echo "run: PORT must be a number, got '$PORT'" >&2; exit 2 ;; esac

if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  echo "run: port $PORT is already in use (another run of this service?). Stop it, or pick another" \
       "port: PORT=7072 bash scripts/run.sh" >&2
  exit 1
fi

bash scripts/setup.sh

HOST_PID=""
AZURITE_STARTED=""
group_gone_within() {  # seconds: true once no process of the host's group is left
  for _ in $(seq 1 $(($1 * 10))); do
    kill -0 -- "-$HOST_PID" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 -- "-$HOST_PID" 2>/dev/null
}
cleanup() {
  trap - INT TERM HUP EXIT
  if [ -n "$HOST_PID" ]; then
    # The host runs in its own process group (set -m below). Ask the host to stop (it stops its worker),
    # then make sure nothing of the group is left.
    kill -TERM "$HOST_PID" 2>/dev/null || true
    group_gone_within "$STOP_GRACE_S" || {
      echo "run: the host did not stop within ${STOP_GRACE_S}s; stopping its process group" >&2
      kill -TERM -- "-$HOST_PID" 2>/dev/null || true
      group_gone_within 2 || kill -KILL -- "-$HOST_PID" 2>/dev/null || true
    }
    wait "$HOST_PID" 2>/dev/null || true
  fi
  if [ -n "$AZURITE_STARTED" ]; then bash scripts/azurite.sh stop "$AZURITE_INSTANCE" || true; fi
  echo "run: stopped" >&2
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP
trap 'cleanup' EXIT

AZURITE_STARTED=1
bash scripts/azurite.sh start "$AZURITE_INSTANCE" ${FRESH[@]+"${FRESH[@]}"}
AzureWebJobsStorage="$(bash scripts/azurite.sh connection-string "$AZURITE_INSTANCE")"
export AzureWebJobsStorage
export PYTHONUNBUFFERED=1
# host.json names the task hub "%TASKHUB_NAME%" (an app setting; the host refuses to start without it).
# A local.settings.json copied from an older sample may lack it: use the local default then.
if [ -z "${TASKHUB_NAME:-}" ] && ! .venv/bin/python -c \
     'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("Values", {}).get("TASKHUB_NAME") else 1)' \
     local.settings.json 2>/dev/null; then
  export TASKHUB_NAME=ResilientResponsesLocal
  echo "run: TASKHUB_NAME is not in local.settings.json; using the local task hub '$TASKHUB_NAME'"
fi

set -m  # the host gets its own process group: a signal to this script reaches it only through cleanup
if command -v func >/dev/null 2>&1 && [ -z "${RESILIENT_USE_HOST_DOUBLE:-}" ]; then
  echo "run: func start on http://localhost:$PORT"
  # Core Tools use the active Python: put the project's venv first.
  PATH="$PWD/.venv/bin:$PATH" VIRTUAL_ENV="$PWD/.venv" func start --port "$PORT" < /dev/null &
else
  echo "run: Azure Functions Core Tools not found; serving with the host double on http://localhost:$PORT"
  .venv/bin/python -m tests.hostdouble --port "$PORT" --app-dir . --settings local.settings.json < /dev/null &
fi
HOST_PID=$!
set +m
STATUS=0
wait "$HOST_PID" || STATUS=$?
echo "run: the host exited (status $STATUS)" >&2
exit "$STATUS"
