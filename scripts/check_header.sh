#!/usr/bin/env bash
# scripts/check_header.sh GENERATED_HEADER: checks that capi/dccflow.h, the header shipped to C
# hosts, declares exactly the exports of the library, with the types cgo gave them.
# GENERATED_HEADER is the header `go build -buildmode=c-shared` writes beside the library
# (libdccflow.h); it declares every //export of capi with the C types of the Go parameters.
#   1. Both headers are compiled into one translation unit with -Wall -Wextra -Werror: a parameter
#      that differs (`char *` against `const char *`) is a "conflicting types" error.
#   2. The names of the exported functions are the same in both.
# Called by `make lib`; exit status 1 with the difference on stderr.
set -euo pipefail
gen=${1:?usage: scripts/check_header.sh path/to/libdccflow.h}
root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$gen" "$tmp/libdccflow.h"
printf '#include "libdccflow.h"\n#include "dccflow.h"\n' >"$tmp/both.c"
if ! "$cc" -fsyntax-only -Wall -Wextra -Werror -I"$tmp" -I"$root/capi" "$tmp/both.c"; then
	echo "check_header: capi/dccflow.h does not match the exports of capi (the types above differ)" >&2
	exit 1
fi
names() { grep -oE '\bdccflow_[a-z_]+[[:space:]]*\(' "$1" | tr -d ' (' | sort -u; }
if ! diff <(names "$gen") <(names "$root/capi/dccflow.h") >"$tmp/diff"; then
	echo "check_header: the exports differ (< only in the library, > only in capi/dccflow.h):" >&2
	cat "$tmp/diff" >&2
	exit 1
fi
