#!/usr/bin/env bash
# Bring up everything the tests use, idempotently: Redis (Celery reward backend), the Docker engine and the
# offline sandbox image (code rewards), headless Chromium (the leaderboard page) and the real SGLang server's
# virtualenv. Installs what is missing (apt-get, pip; needs root for apt and dockerd), starts what is not
# running, and is quick when all of it is there already: one line per part. Needs .venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_install() {  # quiet apt-get install (the package lists refreshed once if needed); its output only on failure
  local log
  log=$(mktemp)
  if ! { $SUDO apt-get install -y -qq --no-install-recommends "$@" \
         || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "$@"; }; } >"$log" 2>&1; then
    echo "error: apt-get could not install $*:" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
  rm -f "$log"
}

bash scripts/start-redis.sh
bash sandbox/scripts/start-docker.sh

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  echo "chromium: installed"
else
  apt_install chromium chromium-driver
  echo "chromium: installed $(/usr/bin/chromium --version 2>/dev/null || echo '(version unknown)')"
fi

if .venv/bin/areal sandbox status --json 2>/dev/null | grep -q '"image_state": "ok"'; then
  echo "sandbox image: up to date"
else
  log=$(mktemp)
  if ! .venv/bin/areal sandbox build-image >"$log" 2>&1; then
    echo "error: areal sandbox build-image failed:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "sandbox image: $(tail -n 1 "$log")"
  rm -f "$log"
fi

# setup-sglang.sh takes minutes: rerun only when it (or what it installs) changed since the last success.
stamp=.venv-sglang/.areal-setup
wanted=$(sha256sum scripts/setup-sglang.sh | cut -c1-16)
if [ -x .venv-sglang/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
  echo "sglang virtualenv: ready"
else
  log=$(mktemp)
  if ! bash scripts/setup-sglang.sh >"$log" 2>&1; then
    echo "error: scripts/setup-sglang.sh failed:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "sglang virtualenv: $(grep 'ready (torch' "$log" | sed 's/^.*: //') in $(tail -n 1 "$log" | awk '{print $3}')"
  rm -f "$log"
  echo "$wanted" > "$stamp"
fi
