#!/bin/sh
# Runs a command and passes only if it exits 0 AND its output holds the expected text:
#   expect_output.sh 'rank 1 of 2' build/bin/gyrerun -n 2 -- python3 x.py
# (CTest's PASS_REGULAR_EXPRESSION alone would ignore the exit code.)
want="$1"
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "expect_output: the command exited $rc" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -qE "$want"; then
  echo "expect_output: no line matches '$want'" >&2
  exit 1
fi
