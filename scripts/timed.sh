#!/usr/bin/env bash
# Times the steps of `make test` and prints them as a table at the end.
#   scripts/timed.sh step FILE NAME COMMAND...   runs COMMAND, appends NAME, seconds and
#                                                 exit code to FILE, exits with its code
#   scripts/timed.sh report FILE                 prints FILE as a table with the total
set -uo pipefail

case "${1:-}" in
  step)
    file=$2 name=$3
    shift 3
    echo "==> $name: $*" >&2
    start=$EPOCHREALTIME
    "$@"
    code=$?
    end=$EPOCHREALTIME
    mkdir -p "$(dirname "$file")"
    awk -v n="$name" -v s="$start" -v e="$end" -v c="$code" 'BEGIN { printf "%s\t%.1f\t%d\n", n, e - s, c }' >>"$file"
    exit "$code"
    ;;
  report)
    file=$2
    [ -s "$file" ] || exit 0
    echo
    echo "time per step ($file):"
    awk -F'\t' '
      { total += $2; status = ($3 == 0) ? "ok" : "FAILED (exit " $3 ")"
        printf "  %-12s %8.1f s  %6.1f min  %s\n", $1, $2, $2 / 60, status }
      END { printf "  %-12s %8.1f s  %6.1f min\n", "total", total, total / 60 }' "$file"
    ;;
  *)
    echo "usage: $0 step FILE NAME COMMAND... | report FILE" >&2
    exit 2
    ;;
esac
