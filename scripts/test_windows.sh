#!/usr/bin/env bash
# scripts/test_windows.sh — the Windows half of the platform checks (docs/operations/running.md, "Windows").
#
# On this Linux machine, with Debian's mingw-w64 C compiler and Wine (installed here when missing):
#   1. cross-compiles the Go test suites of every engine/ package, capi/ (tag dccflow_cabitest)
#      and tests/go with GOOS=windows GOARCH=amd64 CGO_ENABLED=1 into .exe test binaries, and runs
#      each under Wine from its package folder; every one must pass;
#   2. builds dccflow.dll (-buildmode=c-shared) and tests/c/abi_smoke.c, a C program that loads it
#      with LoadLibrary, and runs it under Wine.
#
# Two shims make Debian 12's Wine 8.0 run Go 1.26 programs; both are for these tests only and
# neither goes into dccflow.dll or a wheel:
#   - scripts/windows/bcryptprimitives.c: Go programs load bcryptprimitives.dll (ProcessPrng,
#     Windows 10+) at start-up; Wine 8.0 has none. Built here and copied into the prefix's System32.
#   - scripts/windows/wine_deleteat_test.go.in, added to each test binary with -overlay: os.RemoveAll
#     (t.TempDir's cleanup) deletes with FILE_DISPOSITION_POSIX_SEMANTICS, which Wine 8.0 refuses
#     with "Invalid function"; the file makes Go use its own fallback for older Windows/FAT32.
#
# Environment: DCCFLOW_WIN_WORK (default build/windows: binaries, logs, the Wine prefix),
# WINEPREFIX (default $DCCFLOW_WIN_WORK/wineprefix), DCCFLOW_WIN_PACKAGES (Go packages to test,
# default engine/... capi tests/go), DCCFLOW_WIN_SKIP_C=1 (skip step 2).
# Usage: scripts/test_windows.sh [WHEEL] — with a win_amd64 wheel (make test-wheels passes it), step 2
# runs the C program on the dccflow.dll inside that wheel instead of building one.
# Exit status: 0 when everything passed, 1 otherwise (the failing logs are printed).
set -euo pipefail
WHEEL=${1:-}
if [ -n "$WHEEL" ]; then WHEEL=$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL"); fi
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${DCCFLOW_WIN_WORK:-$ROOT/build/windows}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
export WINEPREFIX=${WINEPREFIX:-$WORK/wineprefix}
export WINEDEBUG=-all
CC_WIN=x86_64-w64-mingw32-gcc
GO=${GO:-go}
t0=$(date +%s)
say() { printf '== %s (%ds)\n' "$*" $(($(date +%s) - t0)); }

# --- toolchain --------------------------------------------------------------------------------
missing=()
command -v "$CC_WIN" >/dev/null || missing+=(gcc-mingw-w64-x86-64)
command -v wine >/dev/null || missing+=(wine wine64)
if ((${#missing[@]})); then
	say "apt-get install ${missing[*]}"
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	# apt's own temporary folder: a shared machine's /tmp cleaner once removed it mid-install.
	aptTmp=$(mktemp -d "$WORK/apt.XXXXXX")
	$sudo apt-get update -qq
	TMPDIR=$aptTmp $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	rm -rf "$aptTmp"
fi
say "toolchain: $($CC_WIN --version | head -1); $(wine --version)"

# --- Wine prefix and the bcryptprimitives.dll shim -------------------------------------------
mkdir -p "$WORK/bin" "$WORK/logs" "$WORK/overlay"
if [ ! -f "$WINEPREFIX/system.reg" ]; then
	say "creating the Wine prefix $WINEPREFIX (first start is slow)"
	wineboot -i >/dev/null 2>&1 || true
	wineserver -w
fi
sys32="$WINEPREFIX/drive_c/windows/system32"
$CC_WIN -O2 -shared -Wl,--kill-at -o "$WORK/bin/bcryptprimitives.dll" scripts/windows/bcryptprimitives.c -ladvapi32
# Only where Wine has none (Wine >= 9 has its own): never over a DLL this script did not put there.
if [ ! -e "$sys32/bcryptprimitives.dll" ] || [ -e "$WINEPREFIX/.dccflow-bcryptprimitives" ]; then
	cp "$WORK/bin/bcryptprimitives.dll" "$sys32/bcryptprimitives.dll"
	touch "$WINEPREFIX/.dccflow-bcryptprimitives"
fi

# winpath PATH: the absolute Linux PATH as programs under Wine see it. A Wine prefix maps drive Z:
# to / (its dosdevices/z: link), so the name is made from that link when it is there; winepath is
# asked only where it is not, a few times: on a loaded CI machine it once printed nothing, and the
# C program below was handed an empty path (LoadLibrary error 126).
winpath() {
	if [ "$(readlink "$WINEPREFIX/dosdevices/z:" 2>/dev/null)" = / ]; then
		printf 'Z:%s\n' "$(printf '%s' "$1" | tr '/' '\\')"
		return 0
	fi
	local p try
	for try in 1 2 3; do
		if p=$(winepath -w "$1") && [ -n "$p" ]; then
			printf '%s\n' "$p"
			return 0
		fi
		echo "test_windows.sh: winepath -w $1 printed nothing (try $try of 3)" >&2
		sleep 2
	done
	return 1
}

# --- Go test binaries -------------------------------------------------------------------------
export GOOS=windows GOARCH=amd64 CGO_ENABLED=1 CC=$CC_WIN
read -r -a pkgs <<<"${DCCFLOW_WIN_PACKAGES:-./engine/... ./capi ./tests/go}"
listing=$($GO list -tags dccflow_cabitest \
	-f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}} {{.Name}}{{end}}' "${pkgs[@]}")
mapfile -t rows < <(grep . <<<"$listing")
# The overlay adds scripts/windows/wine_deleteat_test.go.in to each package, with its package name.
overlay="$WORK/overlay/overlay.json"
{
	echo '{"Replace": {'
	sep=""
	for row in "${rows[@]}"; do
		read -r ip dir name <<<"$row"
		f="$WORK/overlay/$(echo "$ip" | tr '/.' '__').go"
		sed "s/^package wineshim$/package $name/" scripts/windows/wine_deleteat_test.go.in >"$f"
		printf '%s"%s/zz_wine_deleteat_test.go": "%s"' "$sep" "$dir" "$f"
		sep=$',\n'
	done
	echo '}}'
} >"$overlay"

say "building the mcpserver tool and ${#rows[@]} test binaries for windows/amd64"
$GO build -o "$WORK/bin/mcpserver.exe" ./tests/mcpserver
for row in "${rows[@]}"; do
	read -r ip dir name <<<"$row"
	exe="$WORK/bin/$(echo "${ip#github.com/dcc-flow/dcc-flow/}" | tr '/' '_').test.exe"
	$GO test -c -tags dccflow_cabitest -ldflags=-checklinkname=0 -overlay "$overlay" -o "$exe" "$ip"
done
unset GOOS GOARCH CGO_ENABLED CC
say "running them under Wine"

# --- run them under Wine ---------------------------------------------------------------------
DCCFLOW_TEST_MCPSERVER=$(winpath "$WORK/bin/mcpserver.exe") || {
	echo "test_windows.sh: no Windows name for $WORK/bin/mcpserver.exe: the tests that start it will fail" >&2
	DCCFLOW_TEST_MCPSERVER=
}
export DCCFLOW_TEST_MCPSERVER
fails=0 total_pass=0 total_skip=0
: >"$WORK/logs/skips.txt"
for row in "${rows[@]}"; do
	read -r ip dir name <<<"$row"
	short=${ip#github.com/dcc-flow/dcc-flow/}
	exe="$WORK/bin/$(echo "$short" | tr '/' '_').test.exe"
	log="$WORK/logs/$(echo "$short" | tr '/' '_').log"
	s=$(date +%s)
	rc=0
	(cd "$dir" && wine "$exe" -test.v -test.count=1 -test.timeout=15m) >"$log" 2>&1 || rc=$?
	pass=$(grep -c -E '^ *--- PASS' "$log" || true)
	skip=$(grep -c -E '^ *--- SKIP' "$log" || true)
	total_pass=$((total_pass + pass)) total_skip=$((total_skip + skip))
	# each skipped test with the reason it logged: the last "file.go:N:" line printed under its name
	# (parallel tests interleave, so the name comes from the latest "=== RUN/CONT/NAME/PAUSE name" or
	# "--- PASS/FAIL/SKIP: name" line, not from the line before its --- SKIP)
	awk -v pkg="$short" '
		/^ *=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
		/^ *--- (PASS|FAIL|SKIP): / {
			cur = $3
			if ($2 == "SKIP:") skipped[++n] = cur
			next
		}
		/^ +[^ ]+\.go:[0-9]+: / { line = $0; gsub(/^ +/, "", line); msg[cur] = line }
		END { for (i = 1; i <= n; i++) print pkg ": " skipped[i] ": " (skipped[i] in msg ? msg[skipped[i]] : "(no reason logged)") }' \
		"$log" >>"$WORK/logs/skips.txt"
	# The verdict line: go test's PASS, near the end (a TestMain may print a banner after it, as
	# internal/pgtest does when it skipped the PostgreSQL tests).
	if [ "$rc" = 0 ] && tail -n 8 "$log" | grep -q '^PASS$'; then
		printf 'ok    %-45s %4d passed %3d skipped %4ds\n' "$short" "$pass" "$skip" $(($(date +%s) - s))
	else
		fails=$((fails + 1))
		printf 'FAIL  %-45s exit %s %4ds, log %s\n' "$short" "$rc" $(($(date +%s) - s)) "$log"
		grep -E -B3 -A20 -e '^ *--- FAIL' -e '^panic:' -e 'fatal error' "$log" | head -n 120 || tail -n 60 "$log"
	fi
done
say "Go tests under Wine: $total_pass passed, $total_skip skipped, $fails package(s) failed"
if [ -s "$WORK/logs/skips.txt" ]; then
	echo "skipped tests (test: reason):"
	cat "$WORK/logs/skips.txt"
fi

# --- dccflow.dll and the C program -----------------------------------------------------------
if [ "${DCCFLOW_WIN_SKIP_C:-}" != 1 ]; then
	dll="$WORK/bin/dcc flow/dccflow.dll" # a folder name with a space, as under C:\Program Files
	mkdir -p "$(dirname "$dll")"
	if [ -n "${WHEEL:-}" ]; then
		say "taking dccflow.dll from $WHEEL; building tests/c/abi_smoke.exe"
		python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("dcc_flow/_lib/dccflow.dll"))' \
			"$WHEEL" >"$dll"
	else
		say "building dccflow.dll and tests/c/abi_smoke.exe"
		GOOS=windows GOARCH=amd64 CGO_ENABLED=1 CC=$CC_WIN \
			$GO build -trimpath -ldflags="-s -w" -buildmode=c-shared -o "$dll" ./capi
		rm -f "${dll%.dll}.h"
	fi
	$CC_WIN -O2 -Wall -Wextra -Werror -Icapi -o "$WORK/bin/abi_smoke.exe" tests/c/abi_smoke.c
	rc=0
	if dllWin=$(winpath "$dll"); then
		(cd "$WORK/bin" && wine ./abi_smoke.exe "$dllWin") >"$WORK/logs/abi_smoke.log" 2>&1 || rc=$?
	else
		echo "no Windows name for $dll (winpath printed nothing)" >"$WORK/logs/abi_smoke.log"
		rc=1
	fi
	cat "$WORK/logs/abi_smoke.log"
	if [ "$rc" != 0 ]; then
		fails=$((fails + 1))
		echo "FAIL  tests/c/abi_smoke.c under Wine: exit $rc"
	fi
fi

wineserver -k 2>/dev/null || true
say "done: $fails failure(s)"
[ "$fails" = 0 ]
