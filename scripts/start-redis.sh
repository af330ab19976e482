#!/usr/bin/env bash
# Start the Redis server the Celery reward backend uses (broker and result store), idempotently:
# installs redis-server with apt-get when it is missing, starts it when nothing answers on the port,
# and returns once it answers PING. Safe to run again; CI runs it before the tests.
#   REDIS_PORT=6379 (default)    the port to serve on
set -euo pipefail
PORT=${REDIS_PORT:-6379}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  apt_log=$(mktemp)
  if ! { $SUDO apt-get install -y --no-install-recommends redis-server \
         || { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends redis-server; }; } >"$apt_log" 2>&1; then
    echo "error: apt-get could not install redis-server:" >&2
    tail -n 20 "$apt_log" >&2
    exit 1
  fi
  rm -f "$apt_log"
fi

if [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = "PONG" ]; then
  echo "redis already answering on port $PORT"
  exit 0
fi

redis-server --daemonize yes --port "$PORT" --save '' --appendonly no >/dev/null

for _ in $(seq 1 100); do
  if [ "$(redis-cli -p "$PORT" ping 2>/dev/null)" = "PONG" ]; then
    echo "redis started on port $PORT"
    exit 0
  fi
  sleep 0.1
done
echo "error: redis-server did not answer PING on port $PORT within 10s" >&2
exit 1
