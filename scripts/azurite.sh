#!/usr/bin/env bash
# A local Azurite (storage emulator) per checkout and per use, on 127.0.0.1 only.
#
#   bash scripts/azurite.sh start NAME [--fresh] [--temporary]   start instance NAME (no-op if it runs)
#   bash scripts/azurite.sh stop NAME                            stop it (only the process it started)
#   bash scripts/azurite.sh connection-string NAME               AzureWebJobsStorage for it
#   bash scripts/azurite.sh status NAME
#
# Each instance lives in .azurite/NAME/ (git-ignored): data/, pid, ports, log. Its data stays there
# across restarts; --fresh wipes it first; --temporary keeps the data in memory only and removes the whole
# folder on stop (tests).
# Ports: AZURITE_BLOB_PORT / AZURITE_QUEUE_PORT / AZURITE_TABLE_PORT when all three are set; otherwise
# the ports this instance used last time, when they are free; otherwise three free ports, remembered.
# So `scripts/run.sh` (instance "run") and `.ci/run` (its own instance) never share ports or data, and
# two checkouts never collide.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ACCOUNT=devstoreaccount1
# Azurite's fixed, public development key (what UseDevelopmentStorage=true means); not a secret.
KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

usage() { echo "usage: $0 start|stop|status|connection-string NAME [--fresh] [--temporary]" >&2; exit 2; }
say() { echo "azurite[$NAME]: $*" >&2; }

COMMAND=${1:-}; NAME=${2:-}
[ -n "$COMMAND" ] && [ -n "$NAME" ] || usage
case "$NAME" in *[!A-Za-z0-9_.-]*|.*) echo "azurite: bad instance name '$NAME'" >&2; exit 2 ;; esac
shift 2
FRESH=0; TEMPORARY=0
for arg in "$@"; do
  case "$arg" in --fresh) FRESH=1 ;; --temporary) TEMPORARY=1 ;; *) usage ;; esac
done

DIR="$ROOT/.azurite/$NAME"
PIDFILE="$DIR/pid"; PORTFILE="$DIR/ports"; DATA="$DIR/data"; LOG="$DIR/log"

python_bin() { if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python"; else echo python3; fi; }

port_free() {  # true when nothing listens on 127.0.0.1:$1 and it can be bound
  "$(python_bin)" - "$1" <<'PY'
import socket, sys
port = int(sys.argv[1])
with socket.socket() as probe:
    probe.settimeout(0.5)
    if probe.connect_ex(("127.0.0.1", port)) == 0:
        sys.exit(1)
with socket.socket() as sock:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sys.exit(1)
PY
}

free_ports() {  # three distinct free ports, chosen by the kernel
  "$(python_bin)" - <<'PY'
import socket
socks = [socket.socket() for _ in range(3)]
for sock in socks:
    sock.bind(("127.0.0.1", 0))
print(" ".join(str(sock.getsockname()[1]) for sock in socks))
for sock in socks:
    sock.close()
PY
}

our_pid() {  # the recorded PID, only if that process is still the Azurite started with our data folder
  [ -f "$PIDFILE" ] || return 1
  local pid; pid=$(cat "$PIDFILE")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  local command; command=$(ps -ww -o command= -p "$pid" 2>/dev/null) || return 1  # -ww: COLUMNS must not cut it
  if [[ "$command" == *"--location $DATA" ]]; then echo "$pid"; return 0; fi
  # a temporary instance has no data folder: it is ours if it serves our blob port (one process per port)
  local blob; read -r blob _ < "$PORTFILE" 2>/dev/null || return 1
  [[ "$command" == *"--inMemoryPersistence"* && "$command" == *"--blobPort $blob "* ]] || return 1
  echo "$pid"
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

connection_string() {
  read -r BLOB QUEUE TABLE < "$PORTFILE"
  echo "DefaultEndpointsProtocol=http;AccountName=$ACCOUNT;AccountKey=$KEY;BlobEndpoint=http://127.0.0.1:$BLOB/$ACCOUNT;QueueEndpoint=http://127.0.0.1:$QUEUE/$ACCOUNT;TableEndpoint=http://127.0.0.1:$TABLE/$ACCOUNT;"
}

choose_ports() {
  if [ -n "${AZURITE_BLOB_PORT:-}" ] && [ -n "${AZURITE_QUEUE_PORT:-}" ] && [ -n "${AZURITE_TABLE_PORT:-}" ]; then
    for port in "$AZURITE_BLOB_PORT" "$AZURITE_QUEUE_PORT" "$AZURITE_TABLE_PORT"; do
      if ! port_free "$port"; then
        say "port $port is already in use (AZURITE_*_PORT); pick other ports or unset them to get free ones"
        exit 1
      fi
    done
    echo "$AZURITE_BLOB_PORT $AZURITE_QUEUE_PORT $AZURITE_TABLE_PORT" > "$PORTFILE"; return
  fi
  if [ -f "$PORTFILE" ]; then
    read -r BLOB QUEUE TABLE < "$PORTFILE" || true
    if [ -n "${TABLE:-}" ] && port_free "$BLOB" && port_free "$QUEUE" && port_free "$TABLE"; then return; fi
  fi
  free_ports > "$PORTFILE"
}

start() {
  if pid=$(our_pid); then say "already running (pid $pid)"; return 0; fi
  if ! command -v node >/dev/null 2>&1; then
    say "Node.js is not installed; Azurite needs Node.js 18+ (then run: bash scripts/setup.sh)"; exit 1
  fi
  if [ ! -x node_modules/.bin/azurite ]; then say "Azurite is not installed: run bash scripts/setup.sh"; exit 1; fi
  mkdir -p "$DIR"
  if [ "$FRESH" = 1 ]; then rm -rf "$DATA"; say "wiped its data (--fresh)"; fi
  mkdir -p "$DATA"
  choose_ports
  read -r BLOB QUEUE TABLE < "$PORTFILE"
  # A temporary instance (removed when stopped) keeps its data in memory: nothing would read it back, and
  # Azurite's disk persistence rewrites its whole metadata database every few seconds, a cost that grows with
  # what the instance holds (a test run's thousands of history rows and blobs).
  local storage=(--location "$DATA") where="data in ${DATA#"$ROOT"/}"
  if [ "$TEMPORARY" = 1 ]; then touch "$DIR/temporary"; storage=(--inMemoryPersistence); where="data in memory"; fi
  # Keep-alive 120 s (Azurite's default is 5 s): Azure Storage keeps idle connections open for minutes, so
  # a client that calls it every few seconds (the Durable pollers, lease renewals) reuses its connections.
  # Its own process group (same session): Ctrl-C in a terminal signals the foreground process group, and
  # storage must outlive the host it serves, so whoever started it (scripts/run.sh) stops it last.
  "$(python_bin)" -c 'import os, sys; os.setpgid(0, 0); os.execvp(sys.argv[1], sys.argv[1:])' \
    node_modules/.bin/azurite --silent --skipApiVersionCheck --disableTelemetry --loose \
    --blobHost 127.0.0.1 --queueHost 127.0.0.1 --tableHost 127.0.0.1 \
    --blobPort "$BLOB" --queuePort "$QUEUE" --tablePort "$TABLE" \
    --blobKeepAliveTimeout 120 --queueKeepAliveTimeout 120 --tableKeepAliveTimeout 120 \
    "${storage[@]}" > "$LOG" 2>&1 &
  local pid=$!
  echo "$pid" > "$PIDFILE"
  for _ in $(seq 1 200); do
    if ! kill -0 "$pid" 2>/dev/null; then
      say "did not start; its log ($LOG):"; tail -n 20 "$LOG" >&2; rm -f "$PIDFILE"; exit 1
    fi
    if listening "$BLOB" && listening "$QUEUE" && listening "$TABLE"; then
      say "running (pid $pid) on 127.0.0.1 blob $BLOB, queue $QUEUE, table $TABLE; $where"
      return 0
    fi
    sleep 0.1
  done
  say "not listening after 20 s; its log ($LOG):"; tail -n 20 "$LOG" >&2
  kill "$pid" 2>/dev/null || true; rm -f "$PIDFILE"; exit 1
}

stop() {
  if pid=$(our_pid); then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    say "stopped (pid $pid)"
  fi
  rm -f "$PIDFILE"
  if [ -f "$DIR/temporary" ]; then rm -rf "$DIR"; fi
}

case "$COMMAND" in
  start) start ;;
  stop) stop ;;
  status) if pid=$(our_pid); then say "running (pid $pid), ports $(cat "$PORTFILE")"; else say "not running"; exit 1; fi ;;
  connection-string) [ -f "$PORTFILE" ] || { say "never started"; exit 1; }; connection_string ;;
  *) usage ;;
esac
