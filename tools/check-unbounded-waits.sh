#!/usr/bin/env bash
# Lists every wait in gyre's code that has no deadline of its own: a condition-variable wait
# without _for/_until, poll() with an infinite timeout, or Deadline::Infinite() passed to a
# call. Each must say why it ends anyway, in a "bounded:" comment on its line or the three
# lines above. Exits 1 naming any that do not, so a new unbounded wait fails the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='\.wait\((lock|l)\)|\.wait\([a-z_]+, \[|poll\([^;]*, -1\)|Deadline::Infinite\(\)[,)]'
bad=0
total=0
while IFS=: read -r file line _; do
  total=$((total + 1))
  start=$((line > 3 ? line - 3 : 1))
  if ! sed -n "${start},${line}p" "$file" | grep -q "bounded:"; then
    echo "unbounded wait without a reason: $file:$line: $(sed -n "${line}p" "$file" | sed 's/^ *//')"
    bad=$((bad + 1))
  fi
done < <(grep -rnE "$pattern" --include='*.cc' --include='*.h' core daemon client launcher tools \
           | grep -v '_test\.cc' || true)
echo "check-unbounded-waits: $total waits without a deadline of their own, $bad without a reason"
[ "$bad" -eq 0 ]
