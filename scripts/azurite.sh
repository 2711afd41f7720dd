#!/usr/bin/env bash
# start|stop Azurite on 127.0.0.1 (blob 10000, queue 10001, table 10002 unless AZURITE_*_PORT are set).
# Data goes to a temporary folder (or $AZURITE_LOCATION); the PID is kept in .azurite/pid.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .azurite
PIDFILE=.azurite/pid
BLOB=${AZURITE_BLOB_PORT:-10000}; QUEUE=${AZURITE_QUEUE_PORT:-10001}; TABLE=${AZURITE_TABLE_PORT:-10002}

case "${1:-}" in
  start)
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then echo "azurite: already running"; exit 0; fi
    LOCATION=${AZURITE_LOCATION:-$(mktemp -d -t azurite.XXXXXX)}
    node_modules/.bin/azurite --silent --skipApiVersionCheck --disableTelemetry --loose \
      --blobHost 127.0.0.1 --queueHost 127.0.0.1 --tableHost 127.0.0.1 \
      --blobPort "$BLOB" --queuePort "$QUEUE" --tablePort "$TABLE" \
      --location "$LOCATION" > .azurite/log 2>&1 &
    echo $! > "$PIDFILE"
    for _ in $(seq 1 100); do
      if (exec 3<>/dev/tcp/127.0.0.1/"$TABLE") 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/"$BLOB") 2>/dev/null; then
        echo "azurite: running (pid $(cat "$PIDFILE"), data in $LOCATION)"; exit 0
      fi
      sleep 0.1
    done
    echo "azurite: did not start"; cat .azurite/log; exit 1 ;;
  stop)
    if [ -f "$PIDFILE" ]; then
      PID=$(cat "$PIDFILE")
      kill "$PID" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$PID" 2>/dev/null || true
      rm -f "$PIDFILE"; echo "azurite: stopped"
    fi ;;
  *) echo "usage: $0 start|stop"; exit 2 ;;
esac
