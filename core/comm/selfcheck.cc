#include "core/comm/selfcheck.h"

#include <cstring>
#include <sstream>
#include <vector>

#include "core/base/dtype.h"

namespace gyre {

using algo::Collective;
using algo::CollectiveSpec;

std::vector<unsigned char> MakeInput(const CollectiveSpec& spec, int rank) {
  const int64_t n = algo::InputCount(spec, rank);
  const size_t es = DataTypeSize(spec.dtype);
  std::vector<unsigned char> buf(static_cast<size_t>(n) * es);
  const bool small_float = spec.dtype == DataType::kFloat16 || spec.dtype == DataType::kBfloat16;
  // An average that divides every input by p first (AverageScalesInputs) gets multiples of p,
  // so the divided inputs are small integers again and any order of summing gives one result.
  const double unit = algo::DividesInputsFirst(spec) ? static_cast<double>(spec.world_size) : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (spec.op == ReduceOp::kProd && algo::IsReducing(spec.collective)) {
      v = static_cast<double>((i + rank) % 2 + 1);
    } else if (small_float) {
      v = unit * static_cast<double>((7 * i + 3 * rank + 1) % 8);
    } else {
      v = static_cast<double>((7 * i + 3 * rank + 1) % 1021);
    }
    StoreFromDouble(spec.dtype, buf.data(), static_cast<size_t>(i), v);
  }
  return buf;
}

std::vector<unsigned char> Reference(const CollectiveSpec& spec,
                                     const std::vector<std::vector<unsigned char>>& inputs, int q) {
  const int p = spec.world_size;
  const size_t es = DataTypeSize(spec.dtype);
  const size_t n = static_cast<size_t>(spec.count);
  std::vector<unsigned char> out(static_cast<size_t>(algo::OutputCount(spec, q)) * es);
  auto reduce_all = [&](size_t in_offset, unsigned char* dst) {
    if (n == 0) return;  // nothing to reduce (and empty buffers may have no storage)
    ReduceFn fn = *GetReduceFn(spec.dtype, spec.op);
    const bool divide_first = algo::DividesInputsFirst(spec);
    std::vector<unsigned char> divided(divide_first ? n * es : 0);
    for (int r = 0; r < p; ++r) {
      const unsigned char* in = inputs[r].data() + in_offset * es;
      if (divide_first) {
        std::memcpy(divided.data(), in, n * es);
        ScaleForAverage(spec.dtype, divided.data(), n, p).IgnoreError();
        in = divided.data();
      }
      if (r == 0) {
        std::memcpy(dst, in, n * es);
      } else {
        fn(dst, in, n);
      }
    }
    if (spec.op == ReduceOp::kAvg && !divide_first) {
      ScaleForAverage(spec.dtype, dst, n, p).IgnoreError();
    }
  };
  switch (spec.collective) {
    case Collective::kAllreduce:
      reduce_all(0, out.data());
      break;
    case Collective::kReduce:
      if (q == spec.root) reduce_all(0, out.data());
      break;
    case Collective::kReduceScatter:
      reduce_all(static_cast<size_t>(q) * n, out.data());
      break;
    case Collective::kBroadcast:
      if (n) std::memcpy(out.data(), inputs[spec.root].data(), n * es);
      break;
    case Collective::kAllgather:
      for (int r = 0; r < p; ++r) {
        if (n) std::memcpy(out.data() + r * n * es, inputs[r].data(), n * es);
      }
      break;
    case Collective::kGather:
      if (q == spec.root) {
        for (int r = 0; r < p; ++r) {
          if (n) std::memcpy(out.data() + r * n * es, inputs[r].data(), n * es);
        }
      }
      break;
    case Collective::kScatter:
      if (n) std::memcpy(out.data(), inputs[spec.root].data() + q * n * es, n * es);
      break;
    case Collective::kAlltoall:
      for (int r = 0; r < p; ++r) {
        if (n) std::memcpy(out.data() + r * n * es, inputs[r].data() + q * n * es, n * es);
      }
      break;
    case Collective::kBarrier:
      break;
  }
  return out;
}

std::string FirstDifference(const CollectiveSpec& spec, const std::vector<unsigned char>& got,
                            const std::vector<unsigned char>& want) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  const size_t es = DataTypeSize(spec.dtype);
  for (size_t i = 0; i * es < got.size(); ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      std::ostringstream os;
      os << "element " << i << ": got " << LoadAsDouble(spec.dtype, got.data(), i) << ", want "
         << LoadAsDouble(spec.dtype, want.data(), i);
      return os.str();
    }
  }
  return "differs";
}

int64_t FirstDifferentElement(const CollectiveSpec& spec, const std::vector<unsigned char>& got,
                              const std::vector<unsigned char>& want) {
  if (got.size() != want.size()) return 0;
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) return -1;
  const size_t es = DataTypeSize(spec.dtype);
  for (size_t i = 0; i * es < got.size(); ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      return static_cast<int64_t>(i);
    }
  }
  return 0;
}

}  // namespace gyre
