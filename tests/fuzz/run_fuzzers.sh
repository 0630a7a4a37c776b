#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, AddressSanitizer and UBSan (coverage in gyre's own
# code too) and runs each for FUZZ_SECONDS (default 60) on a copy of the committed corpus.
# A crash leaves its input in build-fuzz/findings/<target>/; copy it into
# tests/fuzz/corpus/<target>/ so fuzz_test replays it in every build from then on.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGYRE_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
targets=(frame store handshake client)
ninja -C "$build" -j2 "${targets[@]/#/fuzz_}"
status=0
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  findings="$build/findings/$t"
  mkdir -p "$work" "$findings"
  cp -n tests/fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  echo "== fuzz_$t for ${seconds}s"
  if ! "$build/bin/fuzz_$t" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
      -artifact_prefix="$findings/" -print_final_stats=1 "$work" 2>"$build/fuzz_$t.log"; then
    echo "fuzz_$t found a crash: see $build/fuzz_$t.log and $findings/"
    tail -30 "$build/fuzz_$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build/fuzz_$t.log" | tail -2
  fi
done
exit $status
