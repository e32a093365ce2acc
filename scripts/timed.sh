#!/bin/bash
# timed.sh — wall-clock times of make test's parts, so a slow run says which part was slow.
#
#   scripts/timed.sh run NAME CMD [ARG...]   run CMD, then log how long it took and its exit status
#   scripts/timed.sh begin NAME              mark NAME's start (a make recipe of several lines)
#   scripts/timed.sh end NAME                log the time since NAME's begin
#   scripts/timed.sh reset                   empty the log
#   scripts/timed.sh show                    print the log (one line a part, in the order they ended)
#
# The log is $DCCFLOW_TIMES (default build/test-times.log); each line: "NAME SECONDS [exit N]".
# CMD's exit status is timed.sh's own. Needs GNU date (%N).
set -u
log=${DCCFLOW_TIMES:-build/test-times.log}
marks=$(dirname "$log")/times
now() { date +%s%N; }
record() { # name, start (ns), exit status
  local ns=$(( $(now) - $2 ))
  mkdir -p "$(dirname "$log")"
  local line
  line=$(printf '%-16s %6d.%01d s' "$1" $((ns / 1000000000)) $(((ns / 100000000) % 10)))
  [ "$3" = 0 ] || line="$line  exit $3"
  echo "$line" >> "$log"
}
case "${1:-}" in
  run)
    name=$2; shift 2
    start=$(now)
    "$@"; rc=$?
    record "$name" "$start" "$rc"
    exit "$rc" ;;
  begin)
    mkdir -p "$marks" && now > "$marks/$2" ;;
  end)
    [ -f "$marks/$2" ] && record "$2" "$(cat "$marks/$2")" 0 && rm -f "$marks/$2" ;;
  reset)
    mkdir -p "$(dirname "$log")" && : > "$log" && rm -rf "$marks" ;;
  show)
    echo "== make test: the wall-clock time of each part (parts on one line of the Makefile ran side by side)"
    cat "$log" 2>/dev/null ;;
  *)
    echo "usage: scripts/timed.sh run NAME CMD... | begin NAME | end NAME | reset | show" >&2
    exit 2 ;;
esac
