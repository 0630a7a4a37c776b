// Which build of the reduction kernels runs. GetReduceFn (dtype.h) gives the AVX2 build's
// kernel on a CPU that has AVX2 and F16C, and the baseline x86-64 build's otherwise; the two
// give the same bits (reduce_kernels_impl.h). Tests and benchmarks name a build to check or time
// it.
#pragma once

#include "core/base/dtype.h"

namespace gyre {

enum class KernelIsa { kBaseline, kAvx2 };

const char* KernelIsaName(KernelIsa isa);

// The build GetReduceFn uses on this CPU.
KernelIsa ReduceKernelIsa();

// Whether this binary has the build for `isa` and this CPU can run it.
bool KernelIsaAvailable(KernelIsa isa);

// The kernel for (t, op) from the build for `isa`: InvalidArgument as GetReduceFn for a
// pair it refuses, and when KernelIsaAvailable(isa) is false.
StatusOr<ReduceFn> GetReduceFnFor(DataType t, ReduceOp op, KernelIsa isa);

// The average's last step (ScaleForAverage), data[i] /= divisor, for a floating type, from
// the build for `isa`: InvalidArgument for an integer type or a build that cannot run here.
using ScaleFn = void (*)(void* data, size_t n, int divisor);
StatusOr<ScaleFn> GetScaleFnFor(DataType t, KernelIsa isa);

namespace internal {
// reduce_kernels_avx2.cc's lookups, present only when GYRE_AVX2_KERNELS is defined.
ReduceFn Avx2ReduceKernel(DataType t, ReduceOp op);
ScaleFn Avx2ScaleKernel(DataType t);
}  // namespace internal

}  // namespace gyre
