#!/usr/bin/env bash
# Install (if missing) and start a Docker engine in the background, idempotently, then wait until
# `docker info` answers. For machines without systemd (CI, development VMs); needs root.
#
#   bash sandbox/scripts/start-docker.sh            # log: $AREAL_DOCKERD_LOG (default /var/log/areal-dockerd.log)
#
# Exit status 0 when the engine answers, 1 when it could not be installed or started (the log's tail is printed).
set -euo pipefail

LOG="${AREAL_DOCKERD_LOG:-/var/log/areal-dockerd.log}"
WAIT_S="${AREAL_DOCKERD_WAIT_S:-90}"

engine_up() { docker info >/dev/null 2>&1; }

if engine_up; then
    echo "start-docker: the Docker engine is already running"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "start-docker: dockerd is not installed and installing it needs root (apt-get install -y docker.io)" >&2
        exit 1
    fi
    echo "start-docker: installing docker.io with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt_log=$(mktemp)
    if ! { apt-get update -qq && apt-get install -y -qq docker.io; } >"$apt_log" 2>&1; then
        echo "start-docker: apt-get could not install docker.io:" >&2
        tail -n 20 "$apt_log" >&2
        exit 1
    fi
    rm -f "$apt_log"
fi
if ! command -v docker >/dev/null 2>&1; then
    echo "start-docker: the docker client is missing after installing docker.io" >&2
    exit 1
fi

# A live dockerd (not a zombie left by a killed one) that is still starting up is waited for.
dockerd_alive() { ps -C dockerd -o stat= 2>/dev/null | tr -d ' ' | grep -qv '^Z'; }

if ! dockerd_alive; then
    if [ "$(id -u)" != 0 ]; then
        echo "start-docker: dockerd is not running and starting it needs root" >&2
        exit 1
    fi
    # Pid files of an engine that died (killed, or the machine restarted) make dockerd refuse to start
    # or wait a minute for a containerd that is gone (or a zombie): remove those whose process is not
    # a live one.
    for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
        if [ -f "$pidfile" ]; then
            pid="$(cat "$pidfile" 2>/dev/null || true)"
            state="$(ps -o stat= -p "${pid:-0}" 2>/dev/null | tr -d ' ' || true)"
            if [ -z "$state" ] || [ "${state#Z}" != "$state" ]; then
                rm -f "$pidfile"
            fi
        fi
    done
    mkdir -p "$(dirname "$LOG")"
    echo "start-docker: starting dockerd in the background (log: $LOG)"
    # setsid + nohup: the engine outlives this script and the shell that called it.
    setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
fi

for _ in $(seq 1 "$WAIT_S"); do
    if engine_up; then
        echo "start-docker: the Docker engine is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
        exit 0
    fi
    sleep 1
done
echo "start-docker: the Docker engine did not answer within ${WAIT_S}s; last lines of $LOG:" >&2
tail -n 30 "$LOG" >&2 || true
exit 1
