#!/bin/sh
# Installs Debian's chromium for the browser tests. Needs root (CI runs as root).
set -e
if [ "$(id -u)" != "0" ]; then
  echo "chromium is not installed: run 'sudo apt-get install chromium' to enable the browser test" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "installed $(chromium --version)"
