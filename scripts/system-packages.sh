#!/usr/bin/env bash
# Debian packages that only some parts need, installed when missing, each with one line saying what and why:
#   chromium    the browser tests (Playwright drives Debian's Chromium; `playwright install` cannot download here)
#   postgresql  Dagster's instance storage in production (`lakehouse postgres up`, and its tests)
# `make test` (and so .ci/run) asks for both, `lakehouse postgres up` for postgresql; the demo and the main job
# need none of them and never call this.
set -euo pipefail

fail() { echo "setup: $*" >&2; exit 1; }

present() {
  case "$1" in
    chromium) [ -x /usr/bin/chromium ] ;;
    postgresql) ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 ;;
    *) fail "unknown package '$1' (known: chromium, postgresql)" ;;
  esac
}

why() {
  case "$1" in
    chromium) echo "the browser tests drive it through Playwright" ;;
    postgresql) echo "Dagster's instance storage on PostgreSQL: lakehouse postgres up and its tests" ;;
  esac
}

missing=()
for package in "$@"; do
  present "$package" || missing+=("$package")
done
[ ${#missing[@]} -gt 0 ] || exit 0
for package in "${missing[@]}"; do
  echo "setup: installing Debian's $package, once ($(why "$package"))"
done
apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
[ "$(id -u)" -eq 0 ] || apt=(sudo "${apt[@]}")
log="$(cd "$(dirname "$0")/.." && pwd)/.cache/apt-install.log"
mkdir -p "$(dirname "$log")"
{ "${apt[@]}" update -qq && "${apt[@]}" install -y -qq "${missing[@]}"; } >"$log" 2>&1 \
  || fail "could not install Debian's ${missing[*]} ('apt-get install -y ${missing[*]}' failed; see $log)"
for package in "${missing[@]}"; do
  present "$package" || fail "Debian's $package was installed but is not where expected (see $log)"
done
