#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not installed yet (make wheels,
# make test-wheels, and .ci/run for the browser tests): nothing happens, and apt is not touched, when all
# are there.
set -euo pipefail
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
echo "apt-tools.sh: apt-get install ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
