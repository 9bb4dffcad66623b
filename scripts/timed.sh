#!/usr/bin/env bash
# Times the steps of `make test` and prints them as a table at the end.
#   scripts/timed.sh step FILE NAME COMMAND...   runs COMMAND, appends NAME, seconds, exit
#                                                 code and the cores kept busy on average
#                                                 (whole machine, from /proc/stat) to FILE,
#                                                 exits with its code
#   scripts/timed.sh report FILE                 prints FILE as a table with the total
set -uo pipefail

# Busy and all CPU ticks of the whole machine so far (idle and iowait are not busy).
# The average of busy cores over a step says whether it waits (well under the core
# count: room to run more at once) or computes (at the core count).
cpu_ticks() {
  awk '/^cpu / { all = 0; for (i = 2; i <= NF; i++) all += $i; print all - $5 - $6, all; exit }' /proc/stat
}

case "${1:-}" in
  step)
    file=$2 name=$3
    shift 3
    echo "==> $name: $*" >&2
    start=$EPOCHREALTIME
    read -r busy_before all_before < <(cpu_ticks)
    "$@"
    code=$?
    end=$EPOCHREALTIME
    read -r busy_after all_after < <(cpu_ticks)
    mkdir -p "$(dirname "$file")"
    awk -v n="$name" -v s="$start" -v e="$end" -v c="$code" -v cores="$(nproc)" \
      -v busy=$((busy_after - busy_before)) -v all=$((all_after - all_before)) \
      'BEGIN { printf "%s\t%.1f\t%d\t%.2f\n", n, e - s, c, (all > 0 ? cores * busy / all : 0) }' >>"$file"
    exit "$code"
    ;;
  report)
    file=$2
    [ -s "$file" ] || exit 0
    echo
    echo "time per step ($file; cores busy: the machine's average, of $(nproc)):"
    awk -F'\t' '
      { total += $2; status = ($3 == 0) ? "ok" : "FAILED (exit " $3 ")"
        printf "  %-12s %8.1f s  %6.1f min  %5.2f cores busy  %s\n", $1, $2, $2 / 60, $4, status }
      END { printf "  %-12s %8.1f s  %6.1f min\n", "total", total, total / 60 }' "$file"
    ;;
  *)
    echo "usage: $0 step FILE NAME COMMAND... | report FILE" >&2
    exit 2
    ;;
esac
