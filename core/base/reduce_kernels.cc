// The baseline build of the reduction kernels (reduce_kernels_impl.h), the choice between it
// and the AVX2 build, and the average's final division.
#include "core/base/reduce_kernels.h"

#include <string>

#if defined(GYRE_AVX2_KERNELS)
#include <cpuid.h>
#endif

#include "core/base/reduce_kernels_impl.h"

namespace gyre {
namespace {

// AVX2 (which also tells that the OS saves the vector registers) and F16C (CPUID leaf 1,
// ECX bit 29; asked directly, as not every compiler's __builtin_cpu_supports knows it).
bool CpuHasAvx2() {
#if defined(GYRE_AVX2_KERNELS)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return has;
#else
  return false;
#endif
}

Status IsaUnavailable(KernelIsa isa) {
  return InvalidArgumentError(std::string("reduce kernels built for ") + KernelIsaName(isa) +
                              " are not available: this build or this CPU has none");
}

}  // namespace

const char* KernelIsaName(KernelIsa isa) { return isa == KernelIsa::kAvx2 ? "avx2" : "baseline"; }

KernelIsa ReduceKernelIsa() { return CpuHasAvx2() ? KernelIsa::kAvx2 : KernelIsa::kBaseline; }

bool KernelIsaAvailable(KernelIsa isa) { return isa == KernelIsa::kBaseline || CpuHasAvx2(); }

StatusOr<ReduceFn> GetReduceFnFor(DataType t, ReduceOp op, KernelIsa isa) {
  GYRE_RETURN_IF_ERROR(CheckReduceSupported(t, op));
  if (!KernelIsaAvailable(isa)) {
    return IsaUnavailable(isa);
  }
  ReduceFn fn = nullptr;
#if defined(GYRE_AVX2_KERNELS)
  fn = isa == KernelIsa::kAvx2 ? internal::Avx2ReduceKernel(t, op) : KernelFor(t, op);
#else
  fn = KernelFor(t, op);
#endif
  if (fn == nullptr) return InternalError("no reduce kernel for a supported (dtype, op) pair");
  return fn;
}

StatusOr<ReduceFn> GetReduceFn(DataType t, ReduceOp op) {
  return GetReduceFnFor(t, op, ReduceKernelIsa());
}

StatusOr<ScaleFn> GetScaleFnFor(DataType t, KernelIsa isa) {
  if (!IsValidDataType(static_cast<int>(t)) || !IsFloating(t)) {
    return InvalidArgumentError(std::string("average of ") +
                                (IsValidDataType(static_cast<int>(t)) ? DataTypeName(t) : "?") +
                                " is not defined: avg needs a floating dtype");
  }
  if (!KernelIsaAvailable(isa)) {
    return IsaUnavailable(isa);
  }
#if defined(GYRE_AVX2_KERNELS)
  if (isa == KernelIsa::kAvx2) return internal::Avx2ScaleKernel(t);
#endif
  return ScaleKernelFor(t);
}

Status ScaleForAverage(DataType t, void* data, size_t n, int divisor) {
  GYRE_ASSIGN_OR_RETURN(ScaleFn fn, GetScaleFnFor(t, ReduceKernelIsa()));
  if (divisor <= 0) return InvalidArgumentError("average divisor must be positive");
  fn(data, n, divisor);
  return Status::Ok();
}

}  // namespace gyre
