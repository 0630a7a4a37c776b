#include "bench/bench_common.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/comm/tuner.h"

namespace gyre::bench {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = kKiB * 1024;
constexpr int64_t kGiB = kMiB * 1024;
// The largest size accepted, as the largest call gyre's schedules accept.
constexpr int64_t kMaxSizeBytes = int64_t{1} << 60;

// Calls f(T{}) with the C++ type of `dtype`; false for the 16-bit float types, which have
// no native type and go through LoadAsDouble / StoreFromDouble.
template <typename F>
bool WithNativeType(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kInt8:
      f(int8_t{});
      return true;
    case DataType::kUint8:
      f(uint8_t{});
      return true;
    case DataType::kInt32:
      f(int32_t{});
      return true;
    case DataType::kUint32:
      f(uint32_t{});
      return true;
    case DataType::kInt64:
      f(int64_t{});
      return true;
    case DataType::kUint64:
      f(uint64_t{});
      return true;
    case DataType::kFloat32:
      f(float{});
      return true;
    case DataType::kFloat64:
      f(double{});
      return true;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return false;
  }
  return false;
}

// The value function of the test data, with the modulus fixed per (dtype, op).
struct Pattern {
  int64_t modulus = 1021;
  bool prod = false;

  Pattern(DataType dtype, ReduceOp op)
      : modulus(DataTypeSize(dtype) <= 2 ? 8 : 1021), prod(op == ReduceOp::kProd) {}

  // Element i of rank r's input is FromBase((7i + 1) mod M, r): it depends on i only
  // through that, its "base".
  int64_t FromBase(int64_t base, int rank) const {
    const int64_t v = (base + 3 * static_cast<int64_t>(rank)) % modulus;
    return prod ? 1 + (v & 1) : v;
  }
};

double Combine(ReduceOp op, double acc, double v, bool first) {
  if (first) return v;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return acc + v;
    case ReduceOp::kProd:
      return acc * v;
    case ReduceOp::kMin:
      return std::min(acc, v);
    case ReduceOp::kMax:
      return std::max(acc, v);
    case ReduceOp::kBand:
      return static_cast<double>(static_cast<int64_t>(acc) & static_cast<int64_t>(v));
    case ReduceOp::kBor:
      return static_cast<double>(static_cast<int64_t>(acc) | static_cast<int64_t>(v));
    case ReduceOp::kBxor:
      return static_cast<double>(static_cast<int64_t>(acc) ^ static_cast<int64_t>(v));
  }
  return acc;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return "allreduce";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kReduce:
      return "reduce";
    case Op::kAllgather:
      return "allgather";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAlltoall:
      return "alltoall";
    case Op::kGather:
      return "gather";
    case Op::kScatter:
      return "scatter";
    case Op::kBarrier:
      return "barrier";
  }
  return "unknown";
}

StatusOr<Op> ParseOp(const std::string& name) {
  for (Op op : {Op::kAllreduce, Op::kBroadcast, Op::kReduce, Op::kAllgather, Op::kReduceScatter,
                Op::kAlltoall, Op::kGather, Op::kScatter, Op::kBarrier}) {
    if (name == OpName(op)) return op;
  }
  return InvalidArgumentError("unknown --op '" + name +
                              "': want allreduce, broadcast, reduce, allgather, "
                              "reduce_scatter, alltoall, gather, scatter or barrier");
}

StatusOr<int64_t> ParseSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 15) {
    return InvalidArgumentError("size '" + text + "': want a number with an optional K, M or G");
  }
  const int64_t number = std::stoll(text.substr(0, digits));  // 15 digits: no overflow
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int64_t scale = 0;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    scale = kKiB;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    scale = kMiB;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    scale = kGiB;
  } else {
    return InvalidArgumentError("size '" + text + "': unknown unit '" + unit +
                                "' (want K, M or G, powers of 1024)");
  }
  if (number > kMaxSizeBytes / scale) {
    return InvalidArgumentError("size '" + text + "' is too large: sizes stay within 2^60 bytes");
  }
  return number * scale;
}

std::string FormatSize(int64_t bytes) {
  char buf[32];
  if (bytes >= kGiB && bytes % kGiB == 0) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 " GiB", bytes / kGiB);
  } else if (bytes >= kMiB && bytes % kMiB == 0) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 " MiB", bytes / kMiB);
  } else if (bytes >= kKiB && bytes % kKiB == 0) {
    std::snprintf(buf, sizeof(buf), "%" PRId64 " KiB", bytes / kKiB);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRId64 " B", bytes);
  }
  return buf;
}

std::vector<int64_t> SizeSeries(int64_t min_bytes, int64_t max_bytes, int64_t factor) {
  std::vector<int64_t> sizes;
  if (factor <= 1 || min_bytes <= 0) return {std::max<int64_t>(min_bytes, 0)};
  for (int64_t s = min_bytes; s <= max_bytes; s *= factor) {
    sizes.push_back(s);
    if (s > max_bytes / factor) break;  // the next size is past max (and might overflow)
  }
  return sizes;
}

StatusOr<std::vector<int64_t>> SizesFromFlags(const std::string& list, const std::string& min,
                                              const std::string& max, int64_t factor) {
  if (!list.empty()) {
    std::vector<int64_t> sizes;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = std::min(list.find(',', start), list.size());
      StatusOr<int64_t> bytes = ParseSize(list.substr(start, comma - start));
      if (!bytes.ok()) return bytes.status().WithContext("--sizes " + list);
      sizes.push_back(*bytes);
      start = comma + 1;
    }
    return sizes;
  }
  StatusOr<int64_t> min_bytes = ParseSize(min);
  if (!min_bytes.ok()) return min_bytes.status().WithContext("-b " + min);
  StatusOr<int64_t> max_bytes = ParseSize(max);
  if (!max_bytes.ok()) return max_bytes.status().WithContext("-e " + max);
  if (*max_bytes < *min_bytes) {
    return InvalidArgumentError("-e " + max + " is below -b " + min);
  }
  // A series that cannot grow would measure -b alone and drop the rest without a word.
  if (*max_bytes > *min_bytes && factor < 2) {
    return InvalidArgumentError("-f " + std::to_string(factor) +
                                ": the factor between sizes must be at least 2 when -e " + max +
                                " is above -b " + min);
  }
  if (*max_bytes > *min_bytes && *min_bytes < 1) {
    return InvalidArgumentError("-b " + min +
                                ": a series from 0 never grows; -b must be at least 1 when -e " +
                                max + " is above it");
  }
  return SizeSeries(*min_bytes, *max_bytes, factor);
}

Shape ShapeFor(Op op, int64_t bytes, int world_size, size_t elem_size) {
  Shape s;
  const int64_t p = world_size;
  const int64_t e = static_cast<int64_t>(elem_size);
  switch (op) {
    case Op::kAllreduce:
    case Op::kBroadcast:
    case Op::kReduce:
      s.count = std::max<int64_t>(1, bytes / e);
      s.in_elems = s.out_elems = s.count;
      s.bytes = s.count * e;
      break;
    case Op::kAllgather:
    case Op::kGather:  // every rank's output is allocated alike; only the root's is written
      s.count = std::max<int64_t>(1, bytes / e / p);
      s.in_elems = s.count;
      s.out_elems = p * s.count;
      s.bytes = p * s.count * e;
      break;
    case Op::kReduceScatter:
    case Op::kScatter:  // likewise every rank's input; only the root's is read
      s.count = std::max<int64_t>(1, bytes / e / p);
      s.in_elems = p * s.count;
      s.out_elems = s.count;
      s.bytes = p * s.count * e;
      break;
    case Op::kAlltoall:
      s.count = std::max<int64_t>(1, bytes / e / p);
      s.in_elems = s.out_elems = p * s.count;
      s.bytes = p * s.count * e;
      break;
    case Op::kBarrier:
      break;
  }
  return s;
}

double BusFactor(Op op, int world_size) {
  const double p = world_size;
  switch (op) {
    case Op::kAllreduce:
      return 2.0 * (p - 1) / p;
    case Op::kAllgather:
    case Op::kReduceScatter:
    case Op::kAlltoall:
    case Op::kGather:
    case Op::kScatter:
      return (p - 1) / p;
    case Op::kBroadcast:
    case Op::kReduce:
      return 1.0;
    case Op::kBarrier:
      return 0.0;
  }
  return 0.0;
}

// Walks i = first, first + 1, ... yielding (7i + 1) mod M, the pattern's base, with an add
// and a compare per element instead of a 64-bit division: filling and checking 64 MiB on
// 8 ranks sharing 2 cores took longer than the collective itself with the division.
class BaseWalk {
 public:
  BaseWalk(int64_t first, int64_t modulus)
      : base_((7 * (first % modulus) + 1) % modulus), modulus_(modulus) {}
  int64_t Next() {
    const int64_t b = base_;
    base_ += 7;  // 7 < modulus, so one subtraction wraps it
    if (base_ >= modulus_) base_ -= modulus_;
    return b;
  }

 private:
  int64_t base_, modulus_;
};

// Pattern::FromBase(b, rank) for every base b.
std::vector<double> RankTable(const Pattern& pattern, int rank) {
  std::vector<double> table(static_cast<size_t>(pattern.modulus));
  for (int64_t b = 0; b < pattern.modulus; ++b) {
    table[static_cast<size_t>(b)] = static_cast<double>(pattern.FromBase(b, rank));
  }
  return table;
}

void FillInput(DataType dtype, ReduceOp op, int rank, void* data, int64_t elems) {
  const Pattern pattern(dtype, op);
  const std::vector<double> table = RankTable(pattern, rank);
  const bool native = WithNativeType(dtype, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> typed(table.size());
    for (size_t b = 0; b < table.size(); ++b) typed[b] = static_cast<T>(table[b]);
    T* p = static_cast<T*>(data);
    BaseWalk walk(0, pattern.modulus);
    for (int64_t i = 0; i < elems; ++i) p[i] = typed[static_cast<size_t>(walk.Next())];
  });
  if (!native) {
    BaseWalk walk(0, pattern.modulus);
    for (int64_t i = 0; i < elems; ++i) {
      StoreFromDouble(dtype, data, static_cast<size_t>(i), table[static_cast<size_t>(walk.Next())]);
    }
  }
}

int64_t CountWrong(Op op, DataType dtype, ReduceOp redop, int rank, int world_size, int root,
                   const Shape& shape, const void* out) {
  if (op == Op::kBarrier || ((op == Op::kReduce || op == Op::kGather) && rank != root)) return 0;
  const Pattern pattern(dtype, redop);
  const int64_t c = shape.count;
  double tolerance = 0;
  if (redop == ReduceOp::kAvg) {
    tolerance = DataTypeSize(dtype) <= 2 ? 1e-2 : (dtype == DataType::kFloat32 ? 1e-5 : 1e-12);
  }
  // The reduced value depends only on an element's base, so it is tabulated once.
  std::vector<double> reduced_by_base(static_cast<size_t>(pattern.modulus));
  for (int64_t b = 0; b < pattern.modulus; ++b) {
    double acc = 0;
    for (int q = 0; q < world_size; ++q) {
      acc = Combine(redop, acc, static_cast<double>(pattern.FromBase(b, q)), q == 0);
    }
    reduced_by_base[static_cast<size_t>(b)] = redop == ReduceOp::kAvg ? acc / world_size : acc;
  }
  // The output as blocks: output elements [k0, k0 + len) hold pattern elements i0, i0 + 1,
  // ... whose value by base is `table`.
  struct Block {
    int64_t k0, len, i0;
    std::vector<double> table;
  };
  std::vector<Block> blocks;
  switch (op) {
    case Op::kAllreduce:
    case Op::kReduce:
      blocks.push_back({0, shape.out_elems, 0, reduced_by_base});
      break;
    case Op::kReduceScatter:
      blocks.push_back({0, shape.out_elems, static_cast<int64_t>(rank) * c, reduced_by_base});
      break;
    case Op::kBroadcast:
      blocks.push_back({0, shape.out_elems, 0, RankTable(pattern, root)});
      break;
    case Op::kScatter:
      // Block `rank` of the root's input.
      blocks.push_back(
          {0, shape.out_elems, static_cast<int64_t>(rank) * c, RankTable(pattern, root)});
      break;
    case Op::kAllgather:
    case Op::kAlltoall:
    case Op::kGather:
      // Block q comes from rank q: its elements 0.. (allgather, gather) or rank * c..
      // (alltoall).
      for (int64_t k0 = 0, q = 0; c > 0 && k0 < shape.out_elems; k0 += c, ++q) {
        blocks.push_back({k0, std::min(c, shape.out_elems - k0),
                          op == Op::kAlltoall ? static_cast<int64_t>(rank) * c : 0,
                          RankTable(pattern, static_cast<int>(q))});
      }
      break;
    case Op::kBarrier:
      break;
  }
  auto differs = [&](double got, double want) {
    if (tolerance == 0) return got != want;
    return !(std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want)));
  };
  int64_t wrong = 0;
  auto count = [&](auto load) {
    for (const Block& blk : blocks) {
      BaseWalk walk(blk.i0, pattern.modulus);
      for (int64_t j = 0; j < blk.len; ++j) {
        if (differs(load(blk.k0 + j), blk.table[static_cast<size_t>(walk.Next())])) ++wrong;
      }
    }
  };
  const bool native = WithNativeType(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* p = static_cast<const T*>(out);
    count([p](int64_t k) { return static_cast<double>(p[k]); });
  });
  if (!native) {
    count([&](int64_t k) { return LoadAsDouble(dtype, out, static_cast<size_t>(k)); });
  }
  return wrong;
}

double TypicalWarmup(std::vector<double> warm_seconds) {
  if (warm_seconds.empty()) return 0;
  const size_t lower_median = (warm_seconds.size() - 1) / 2;
  std::nth_element(warm_seconds.begin(), warm_seconds.begin() + lower_median, warm_seconds.end());
  return warm_seconds[lower_median];
}

int IterationsFor(double fastest_seconds, double cell_seconds) {
  constexpr int kMin = 5, kMax = 1000;
  if (!(fastest_seconds > 0)) return kMax;
  const double n = std::floor(cell_seconds / fastest_seconds);
  if (n < kMin) return kMin;
  if (n > kMax) return kMax;
  return static_cast<int>(n);
}

int DefaultWarmups(int64_t bytes) { return bytes <= kMiB ? 5 : 2; }

int TunedWarmups(int warmups, int64_t call_bytes) {
  return call_bytes >= OnlineTuner::kMinBytes ? std::max(warmups, OnlineTuner::kTrialCalls + 1)
                                              : warmups;
}

StatusOr<CellTiming> TimeCell(Collectives& coll, const std::function<Status()>& op,
                              const std::function<Status()>& check,
                              const std::function<void()>& after, int warmups, int fixed_iters,
                              double cell_seconds) {
  using Clock = std::chrono::steady_clock;
  if ((fixed_iters <= 0 || check) && warmups < 1) warmups = 1;
  // Whole iterations, barrier included: that is what a cell's wall time is made of.
  std::vector<double> warm(static_cast<size_t>(std::max(warmups, 0)));
  for (size_t i = 0; i < warm.size(); ++i) {
    const auto begin = Clock::now();
    GYRE_RETURN_IF_ERROR(coll.Barrier().WithContext("barrier before a warm-up iteration"));
    GYRE_RETURN_IF_ERROR(op().WithContext("warm-up iteration"));
    warm[i] = std::chrono::duration<double>(Clock::now() - begin).count();
    if (i == 0 && check) GYRE_RETURN_IF_ERROR(check());
  }
  CellTiming timing;
  if (fixed_iters > 0) {
    timing.iters = fixed_iters;
  } else {
    // The warm-up times taken over ranks are the same on every rank, and so is N; the
    // second maximum only makes that agreement explicit.
    GYRE_RETURN_IF_ERROR(coll.MaxOverRanks(&warm).WithContext("combining warm-up times"));
    std::vector<double> agreed = {
        static_cast<double>(IterationsFor(TypicalWarmup(warm), cell_seconds))};
    GYRE_RETURN_IF_ERROR(coll.MaxOverRanks(&agreed).WithContext("agreeing on N"));
    timing.iters = static_cast<int>(agreed[0]);
  }
  timing.seconds.resize(static_cast<size_t>(timing.iters));
  for (int i = 0; i < timing.iters; ++i) {
    // No string is built between the barrier and the clock: the context only on failure.
    const Status b = coll.Barrier();
    if (!b.ok()) return b.WithContext("barrier before iteration " + std::to_string(i));
    const auto start = Clock::now();
    Status s = op();
    // The clock stops before anything else runs: the error's context is built after it.
    timing.seconds[static_cast<size_t>(i)] =
        std::chrono::duration<double>(Clock::now() - start).count();
    GYRE_RETURN_IF_ERROR(s.WithContext("timed iteration " + std::to_string(i)));
    if (after) after();
  }
  GYRE_RETURN_IF_ERROR(coll.MaxOverRanks(&timing.seconds).WithContext("gathering times"));
  return timing;
}

void Summarise(const std::vector<double>& seconds, double bus_factor, Result* r) {
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  r->iters = static_cast<int>(sorted.size());
  if (sorted.empty()) return;
  const size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  r->min_us = sorted.front() * 1e6;
  r->median_us = median * 1e6;
  r->max_us = sorted.back() * 1e6;
  r->algbw_gbps = median > 0 ? static_cast<double>(r->bytes) / median / 1e9 : 0;
  r->busbw_gbps = r->algbw_gbps * bus_factor;
}

std::string ToJsonLine(const Result& r) {
  char nums[512];
  std::snprintf(nums, sizeof(nums),
                "\"ranks\": %d, \"bytes\": %" PRId64
                ", \"dtype\": %s, \"iters\": %d, \"min_us\": %.1f, \"median_us\": %.1f, "
                "\"max_us\": %.1f, \"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f, \"ok\": %s}",
                r.ranks, r.bytes, JsonString(r.dtype).c_str(), r.iters, r.min_us, r.median_us,
                r.max_us, r.algbw_gbps, r.busbw_gbps,
                r.wrong < 0 ? "null" : (r.wrong == 0 ? "true" : "false"));
  return "{\"impl\": " + JsonString(r.impl) + ", \"algo\": " + JsonString(r.algo) +
         ", \"op\": " + JsonString(OpName(r.op)) + ", " + nums;
}

std::string TableHeader(const std::string& title) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "# %s\n"
                "#%11s %12s %8s %6s %24s %5s %10s %10s %10s %8s %8s %7s\n"
                "#%11s %12s %8s %6s %24s %5s %10s %10s %10s %8s %8s %7s\n",
                title.c_str(), "size", "count", "type", "redop", "algo", "iters", "min", "median",
                "max", "algbw", "busbw", "#wrong", "(B)", "(elements)", "", "", "", "", "(us)",
                "(us)", "(us)", "(GB/s)", "(GB/s)", "");
  return buf;
}

std::string TableRow(const Result& r) {
  char buf[512];
  const std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  std::snprintf(buf, sizeof(buf),
                "%12" PRId64 " %12" PRId64
                " %8s %6s %24s %5d %10.1f %10.1f %10.1f %8.3f %8.3f %7s\n",
                r.bytes, r.count, r.dtype.c_str(), r.redop.c_str(), r.algo.c_str(), r.iters,
                r.min_us, r.median_us, r.max_us, r.algbw_gbps, r.busbw_gbps, wrong.c_str());
  return buf;
}

StatusOr<int64_t> SumWrongOverRanks(Collectives& coll, int64_t local_wrong) {
  std::vector<double> wrong(static_cast<size_t>(coll.size()), 0.0);
  wrong[static_cast<size_t>(coll.rank())] = static_cast<double>(local_wrong);
  GYRE_RETURN_IF_ERROR(coll.MaxOverRanks(&wrong).WithContext("combining the check"));
  int64_t total = 0;
  for (double w : wrong) total += static_cast<int64_t>(w);
  return total;
}

StatusOr<std::unique_ptr<Reporter>> Reporter::Open(bool printer, const std::string& format,
                                                   const std::string& jsonl_path) {
  if (format != "table" && format != "jsonl") {
    return InvalidArgumentError("--format must be table or jsonl, not '" + format + "'");
  }
  std::unique_ptr<Reporter> r(new Reporter());
  r->printer_ = printer;
  r->table_ = format == "table";
  if (printer && !jsonl_path.empty()) {
    r->jsonl_path_ = jsonl_path;
    r->jsonl_ = std::fopen(jsonl_path.c_str(), "a");
    if (r->jsonl_ == nullptr) {
      return InvalidArgumentError("cannot open --jsonl " + jsonl_path + ": " +
                                  std::strerror(errno));
    }
  }
  return r;
}

Reporter::~Reporter() {
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

void Reporter::Wrote(bool ok, const std::string& where) {
  if (ok || !write_error_.ok()) return;
  write_error_ =
      ResourceExhaustedError("cannot write the results to " + where + ": " + std::strerror(errno));
}

void Reporter::Header(const std::string& title) {
  if (!printer_ || !table_) return;
  const bool ok = std::fputs(TableHeader(title).c_str(), stdout) >= 0;
  Wrote(ok && std::fflush(stdout) == 0, "stdout");
}

void Reporter::Emit(const Result& r) {
  if (!printer_) return;
  const std::string line = ToJsonLine(r) + "\n";
  if (jsonl_ != nullptr) {
    const bool ok = std::fputs(line.c_str(), jsonl_) >= 0;
    Wrote(ok && std::fflush(jsonl_) == 0, "--jsonl " + jsonl_path_);
  }
  const bool ok = std::fputs(table_ ? TableRow(r).c_str() : line.c_str(), stdout) >= 0;
  Wrote(ok && std::fflush(stdout) == 0, "stdout");
}

void Reporter::Footer(int64_t total_wrong) {
  if (!printer_ || !table_) return;
  const bool ok = std::printf("# wrong elements in total: %" PRId64 "\n", total_wrong) >= 0;
  Wrote(ok && std::fflush(stdout) == 0, "stdout");
}

Status Reporter::Close() {
  if (jsonl_ != nullptr) {
    const bool ok = std::fclose(jsonl_) == 0;
    jsonl_ = nullptr;
    Wrote(ok, "--jsonl " + jsonl_path_);
  }
  return write_error_;
}

StatusOr<int> PinToRankCpu(int rank) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return InternalError(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  if (cpus.empty()) return InternalError("sched_getaffinity returned no CPU");
  const int cpu = cpus[static_cast<size_t>(rank) % cpus.size()];
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) {
    return InternalError("sched_setaffinity to CPU " + std::to_string(cpu) + ": " +
                         std::strerror(errno));
  }
  return cpu;
}

Status PinProcess(pid_t pid, int cpu) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = opendir(dir.c_str());
  if (tasks == nullptr) {
    return NotFoundError("cannot list " + dir + ": " + std::strerror(errno));
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  int pinned = 0;
  std::string failures;
  while (dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const pid_t tid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (sched_setaffinity(tid, sizeof(one), &one) == 0) {
      ++pinned;
    } else if (errno != ESRCH) {  // a thread that just ended is not a failure
      failures += " " + std::to_string(tid) + ": " + std::strerror(errno);
    }
  }
  closedir(tasks);
  if (!failures.empty()) {
    return InternalError("pinning threads of pid " + std::to_string(pid) + " to CPU " +
                         std::to_string(cpu) + " failed:" + failures);
  }
  if (pinned == 0) return NotFoundError("pid " + std::to_string(pid) + " has no threads");
  return Status::Ok();
}

namespace {

std::string ProcPath(pid_t pid, const char* file) {
  return "/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/" + file;
}

}  // namespace

RssSample ReadRss(pid_t pid) {
  RssSample sample;
  std::FILE* f = std::fopen(ProcPath(pid, "status").c_str(), "r");
  if (f == nullptr) return sample;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) sample.rss_bytes = kib * kKiB;
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) sample.peak_bytes = kib * kKiB;
  }
  std::fclose(f);
  return sample;
}

Status ResetPeakRss(pid_t pid) {
  const std::string path = ProcPath(pid, "clear_refs");
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return InternalError("cannot open " + path + ": " + std::strerror(errno));
  const bool ok = std::fputs("5", f) >= 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return InternalError("cannot reset the peak RSS through " + path);
  return Status::Ok();
}

}  // namespace gyre::bench
