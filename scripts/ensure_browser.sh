#!/usr/bin/env bash
# The WebChat console's tests drive Debian's chromium through chromedriver.
# Install them when missing (as root: CI and fresh machines); otherwise say
# which command would.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "naga: installing Debian's chromium and chromium-driver for the browser tests"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver
else
  echo "naga: the browser tests need chromium and chromedriver:" >&2
  echo "  sudo apt-get install -y chromium chromium-driver" >&2
  exit 1
fi
