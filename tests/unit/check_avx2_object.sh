#!/bin/sh
# The AVX2 build of the reduction kernels must export its two lookups and nothing the linker
# could merge with another file's copy (a weak symbol: an inline function or a template
# instantiation), or code built for AVX2 could end up run by a CPU without it.
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
symbols=$(nm -C "$obj") || { echo "nm could not read $obj" >&2; exit 1; }
if ! printf '%s\n' "$symbols" | grep -q ' T gyre::internal::Avx2ReduceKernel'; then
  echo "$obj does not define gyre::internal::Avx2ReduceKernel" >&2
  exit 1
fi
weak=$(printf '%s\n' "$symbols" | grep -E ' [WVu] ' || true)
if [ -n "$weak" ]; then
  echo "$obj defines weak symbols another file's copy could be replaced by:" >&2
  printf '%s\n' "$weak" >&2
  exit 1
fi
echo "$obj: only its own lookups, no weak symbols"
