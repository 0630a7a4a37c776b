#!/bin/sh
# The AVX2 build of the reduction kernels must export its two lookups and nothing else: no
# other function another file could call, and nothing the linker could merge with another
# file's copy (a weak symbol: an inline function or a template instantiation), or code built
# for AVX2 could end up run by a CPU without it.
# Usage: check_avx2_object.sh OBJECT...   (the objects of gyre_base; the AVX2 one is picked)
set -u
obj=""
for f in "$@"; do
  case "$f" in *reduce_kernels_avx2*) obj="$f" ;; esac
done
if [ -z "$obj" ]; then
  echo "no reduce_kernels_avx2 object among: $*" >&2
  exit 1
fi
defined=$(nm -C --defined-only --extern-only "$obj") ||
  { echo "nm could not read $obj" >&2; exit 1; }
for lookup in Avx2ReduceKernel Avx2ScaleKernel; do
  if ! printf '%s\n' "$defined" | grep -q " T gyre::internal::$lookup("; then
    echo "$obj does not define gyre::internal::$lookup" >&2
    exit 1
  fi
done
others=$(printf '%s\n' "$defined" | grep -v -E ' T gyre::internal::Avx2(Reduce|Scale)Kernel\(' || true)
if [ -n "$others" ]; then
  echo "$obj defines symbols beyond its two lookups (weak ones could replace another file's copy):" >&2
  printf '%s\n' "$others" >&2
  exit 1
fi
echo "$obj: its two lookups and nothing else"
