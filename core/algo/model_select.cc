#include "core/algo/model_select.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "core/base/file_io.h"

namespace gyre::algo {
namespace {

double SharingFactor(int p, int cores) {
  return std::max(1.0, static_cast<double>(p) / std::max(1, cores));
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string Fmt(const char* format, double a, double b = 0, double c = 0, double d = 0,
                double e = 0, double f = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c, d, e, f);
  return buf;
}

double GBpsToSecondsPerByte(double gbps) { return gbps > 0 ? 1e-9 / gbps : 0; }
double SecondsPerByteToGBps(double s) { return s > 0 ? 1e-9 / s : 0; }

// The per-world-size keys, in file order.
constexpr const char* kPointKeys[] = {"alpha_us",        "overhead_us",  "beta_GBps",
                                      "reduce_GBps",     "copy_GBps",    "beta_all_GBps",
                                      "reduce_all_GBps", "copy_all_GBps"};

std::string KnownKeys() {
  std::string out = "cores";
  for (const char* k : kPointKeys) out += std::string(", p<N>.") + k;
  return out;
}

// What a value in the file is: the file holds plain decimal numbers ("12.5", "3", "1e-3"), not
// the hex, "inf" or "nan" forms strtod also takes, and none so near 0 or so large that a
// rate's reciprocal (seconds per byte) would not be a finite double.
enum class ValueKind { kNumber, kNotDecimal, kOutOfRange };

constexpr double kSmallestValue = 1e-300;
constexpr double kLargestValue = 1e300;

ValueKind ParseValue(const std::string& value, double* v) {
  size_t i = 0;
  if (i < value.size() && (value[i] == '+' || value[i] == '-')) ++i;
  const size_t int_begin = i;
  while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i;
  size_t digits = i - int_begin;
  if (i < value.size() && value[i] == '.') {
    const size_t frac_begin = ++i;
    while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i;
    digits += i - frac_begin;
  }
  if (digits == 0) return ValueKind::kNotDecimal;
  if (i < value.size() && (value[i] == 'e' || value[i] == 'E')) {
    ++i;
    if (i < value.size() && (value[i] == '+' || value[i] == '-')) ++i;
    const size_t exp_begin = i;
    while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i;
    if (i == exp_begin) return ValueKind::kNotDecimal;
  }
  if (i != value.size()) return ValueKind::kNotDecimal;
  errno = 0;
  *v = std::strtod(value.c_str(), nullptr);
  const double magnitude = std::fabs(*v);
  if (errno == ERANGE || !std::isfinite(*v) ||
      (magnitude != 0 && (magnitude < kSmallestValue || magnitude > kLargestValue))) {
    return ValueKind::kOutOfRange;
  }
  return ValueKind::kNumber;
}

}  // namespace

MachinePoint MachineModel::At(int p) const {
  if (points.empty()) return MachinePoint{p, 50e-6, 0, 1e-9 / 3, 0, 0, 0, 0, 0};
  const MachinePoint* nearest = &points.front();
  double best = 1e300;
  for (const MachinePoint& q : points) {
    if (q.world_size == p) return q;
    const double d = std::fabs(std::log(static_cast<double>(q.world_size) / std::max(1, p)));
    if (d < best) {
      best = d;
      nearest = &q;
    }
  }
  const double f = SharingFactor(p, cores) / SharingFactor(nearest->world_size, cores);
  MachinePoint m = *nearest;
  m.world_size = p;
  m.alpha_s *= f;
  m.overhead_s *= f;
  m.beta_s_per_byte *= f;
  m.gamma_s_per_byte *= f;
  m.delta_s_per_byte *= f;
  m.beta_all_s_per_byte *= f;
  m.gamma_all_s_per_byte *= f;
  m.delta_all_s_per_byte *= f;
  return m;
}

void MachineModel::SetPoint(const MachinePoint& point) {
  for (MachinePoint& q : points) {
    if (q.world_size == point.world_size) {
      q = point;
      return;
    }
  }
  points.push_back(point);
  std::sort(points.begin(), points.end(), [](const MachinePoint& x, const MachinePoint& y) {
    return x.world_size < y.world_size;
  });
}

// gyre-bench --calibrate --calibration_out (bench/explain.cc) on this machine class: 2 cores,
// loopback TCP, embedded mode, ranks pinned; the median of 3 runs per world size
// (bench/results/2026-12-02-auto.md). Other world sizes scale by the CPU-sharing factor.
constexpr char kBuiltInModel[] = R"(cores = 2
p2.alpha_us = 7.0
p2.overhead_us = 0
p2.beta_GBps = 3.72
p2.reduce_GBps = 16.35
p2.copy_GBps = 16.73
p2.beta_all_GBps = 2.49
p2.reduce_all_GBps = 14.01
p2.copy_all_GBps = 14.78
p4.alpha_us = 13.3
p4.overhead_us = 13.3
p4.beta_GBps = 3.54
p4.reduce_GBps = 16.67
p4.copy_GBps = 16.75
p4.beta_all_GBps = 1.02
p4.reduce_all_GBps = 5.92
p4.copy_all_GBps = 5.99
p8.alpha_us = 40.8
p8.overhead_us = 19.1
p8.beta_GBps = 3.44
p8.reduce_GBps = 16.93
p8.copy_GBps = 17.13
p8.beta_all_GBps = 0.47
p8.reduce_all_GBps = 2.79
p8.copy_all_GBps = 2.78
)";

MachineModel DefaultMachineModel() {
  StatusOr<MachineModel> m = ParseMachineModel(kBuiltInModel, "built-in");
  return m.ok() ? *m : MachineModel();  // the unit test holds the text parseable
}

StatusOr<MachineModel> ParseMachineModel(const std::string& text, const std::string& path) {
  const std::string where = "calibration file '" + path + "'";
  MachineModel model;
  model.source = path;
  std::map<int, std::map<std::string, double>> values;
  std::map<std::string, int> seen;  // key -> line
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string line = Trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    const std::string at = where + " line " + std::to_string(line_no);
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return InvalidArgumentError(at + ": expected 'key = value', not '" + Printable(line) + "'");
    }
    const std::string key = Trim(line.substr(0, eq));
    const std::string value = Trim(line.substr(eq + 1));
    auto dup = seen.find(key);
    if (dup != seen.end()) {
      return InvalidArgumentError(at + ": key '" + Printable(key) + "' was already set on line " +
                                  std::to_string(dup->second));
    }
    seen[key] = line_no;
    double v = 0;
    const ValueKind kind = ParseValue(value, &v);
    const bool number = kind == ValueKind::kNumber;
    if (key == "cores") {
      if (!number || v < 1 || v != std::floor(v) || v > 1 << 20) {
        return InvalidArgumentError(at + ": key 'cores' needs a whole number >= 1, not '" +
                                    Printable(value) + "'");
      }
      model.cores = static_cast<int>(v);
      continue;
    }
    const size_t dot = key.find('.');
    int p = 0;
    std::string name;
    if (key.size() > 1 && key[0] == 'p' && dot != std::string::npos && dot > 1) {
      const std::string digits = key.substr(1, dot - 1);
      if (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 8) {
        p = std::atoi(digits.c_str());
      }
      name = key.substr(dot + 1);
    }
    bool known_name = false;
    for (const char* k : kPointKeys) known_name |= name == k;
    if (p < 1 || !known_name) {
      return InvalidArgumentError(at + ": unknown key '" + Printable(key) +
                                  "' (known: " + KnownKeys() + ")");
    }
    const bool positive = name == "beta_GBps";
    if (kind == ValueKind::kOutOfRange) {
      return InvalidArgumentError(at + ": key '" + key + "' has '" + Printable(value) +
                                  "', out of range: want " + (positive ? "" : "0 or ") +
                                  "a number from 1e-300 to 1e300");
    }
    if (!number || v < 0 || (positive && v <= 0)) {
      return InvalidArgumentError(
          at + ": key '" + key + "' needs a " + (positive ? "positive" : "non-negative") +
          " decimal number (like 12.5 or 1e-3), not '" + Printable(value) + "'");
    }
    values[p][name] = v;
  }
  if (values.empty()) {
    return InvalidArgumentError(where + " has no p<N>.alpha_us / p<N>.beta_GBps lines");
  }
  for (const auto& entry : values) {
    // Named, not a structured binding: C++17 lambdas (clang) cannot capture those.
    const int p = entry.first;
    const auto& kv = entry.second;
    for (const char* required : {"alpha_us", "beta_GBps"}) {
      if (!kv.count(required)) {
        return InvalidArgumentError(where + ": world size " + std::to_string(p) + " has no key 'p" +
                                    std::to_string(p) + "." + required + "'");
      }
    }
    auto get = [&](const char* k) {
      auto it = kv.find(k);
      return it == kv.end() ? 0.0 : it->second;
    };
    model.SetPoint(MachinePoint{
        p, get("alpha_us") * 1e-6, get("overhead_us") * 1e-6,
        GBpsToSecondsPerByte(get("beta_GBps")), GBpsToSecondsPerByte(get("reduce_GBps")),
        GBpsToSecondsPerByte(get("copy_GBps")), GBpsToSecondsPerByte(get("beta_all_GBps")),
        GBpsToSecondsPerByte(get("reduce_all_GBps")), GBpsToSecondsPerByte(get("copy_all_GBps"))});
  }
  return model;
}

StatusOr<MachineModel> ReadMachineModel(const std::string& path) {
  // A model has a few lines per world size: a path that names /dev/zero or a huge file must
  // not take the host's memory.
  GYRE_ASSIGN_OR_RETURN(std::string text,
                        ReadSmallFile(path, kMaxCalibrationFileBytes, "calibration file"));
  return ParseMachineModel(text, path);
}

std::string FormatMachineModel(const MachineModel& model) {
  std::string out = "# gyre machine model (gyre-bench --calibrate); see core/algo/model_select.h\n";
  out += "cores = " + std::to_string(model.cores) + "\n";
  for (const MachinePoint& q : model.points) {
    const std::string p = "p" + std::to_string(q.world_size) + ".";
    out += Fmt((p + "alpha_us = %.2f\n").c_str(), q.alpha_s * 1e6);
    out += Fmt((p + "overhead_us = %.2f\n").c_str(), q.overhead_s * 1e6);
    out += Fmt((p + "beta_GBps = %.4f\n").c_str(), SecondsPerByteToGBps(q.beta_s_per_byte));
    out += Fmt((p + "reduce_GBps = %.4f\n").c_str(), SecondsPerByteToGBps(q.gamma_s_per_byte));
    out += Fmt((p + "copy_GBps = %.4f\n").c_str(), SecondsPerByteToGBps(q.delta_s_per_byte));
    out += Fmt((p + "beta_all_GBps = %.4f\n").c_str(), SecondsPerByteToGBps(q.beta_all_s_per_byte));
    out +=
        Fmt((p + "reduce_all_GBps = %.4f\n").c_str(), SecondsPerByteToGBps(q.gamma_all_s_per_byte));
    out +=
        Fmt((p + "copy_all_GBps = %.4f\n").c_str(), SecondsPerByteToGBps(q.delta_all_s_per_byte));
  }
  return out;
}

Status WriteMachineModel(const std::string& path, const MachineModel& model) {
  // Written beside it and renamed over it: a write that fails (a full disk) leaves the file
  // as it was, never empty or cut short, which every later run would refuse.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    const std::string message = "cannot " + what + " calibration file '" + path +
                                "': " + std::strerror(err) + " (the file is unchanged)";
    return err == ENOSPC || err == EDQUOT ? ResourceExhaustedError(message)
                                          : InvalidArgumentError(message);
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("write", errno);
  const std::string text = FormatMachineModel(model);
  if (const int err = WriteFully(fd, text.data(), text.size()); err != 0) {
    ::close(fd);
    return fail("write", err);
  }
  if (::close(fd) != 0) return fail("write", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("replace", errno);
  return Status::Ok();
}

CostParams CostParamsOf(const MachinePoint& point) {
  CostParams c;
  c.alpha_s = point.alpha_s;
  c.beta_s_per_byte = point.beta_s_per_byte;
  c.gamma_s_per_byte = point.gamma_s_per_byte;
  c.delta_s_per_byte = point.delta_s_per_byte;
  return c;
}

SharedCosts SharedCostsOf(const MachinePoint& point, int cores) {
  SharedCosts c;
  c.cores = cores;
  c.overhead_s_per_msg = point.overhead_s;
  c.beta_all_s_per_byte = point.beta_all_s_per_byte;
  c.gamma_all_s_per_byte = point.gamma_all_s_per_byte;
  c.delta_all_s_per_byte = point.delta_all_s_per_byte;
  return c;
}

std::string DescribePoint(const MachinePoint& q) {
  return "p=" + std::to_string(q.world_size) +
         Fmt(": alpha %.1f us/round, overhead %.1f us/msg; one rank alone %.2f GB/s, reduce "
             "%.2f GB/s, copy %.2f GB/s",
             q.alpha_s * 1e6, q.overhead_s * 1e6, SecondsPerByteToGBps(q.beta_s_per_byte),
             SecondsPerByteToGBps(q.gamma_s_per_byte), SecondsPerByteToGBps(q.delta_s_per_byte)) +
         Fmt("; every rank at once %.2f GB/s, reduce %.2f GB/s, copy %.2f GB/s",
             SecondsPerByteToGBps(q.beta_all_s_per_byte),
             SecondsPerByteToGBps(q.gamma_all_s_per_byte),
             SecondsPerByteToGBps(q.delta_all_s_per_byte));
}

bool SpansHosts(const CollectiveSpec& spec) {
  return spec.local_size > 1 && spec.local_size < spec.world_size;
}

std::vector<Estimate> RankCandidates(const CollectiveSpec& spec, const MachineModel& model) {
  CollectiveSpec s = spec;
  if (!SpansHosts(s)) s.local_size = 0;
  const MachinePoint q = model.At(s.world_size);
  return EstimateAlgorithms(s, CostParamsOf(q), SharedCostsOf(q, model.cores));
}

std::string ExplainChoice(const CollectiveSpec& spec, const MachineModel& model,
                          const std::vector<Estimate>& candidates) {
  if (candidates.empty()) return "no algorithm can run this call";
  const Estimate& w = candidates.front();
  std::string out = std::string(AlgorithmName(w.algorithm)) +
                    Fmt(" has the lowest estimate, %.1f us", w.seconds * 1e6);
  if (candidates.size() == 1) return out + " (the only candidate)";
  out += w.throughput_s > w.walk_s ? " (bound by the total work with every rank at once)"
                                   : " (bound by the critical path of the walk)";
  const Estimate& r = candidates[1];
  if (r.seconds <= w.seconds * (1 + 1e-9)) {
    return out + ", the same as " + AlgorithmName(r.algorithm) +
           " (a tie: the first in the collective's algorithm order runs)";
  }
  out += Fmt(", %.2fx below ", r.seconds / std::max(1e-12, w.seconds)) +
         AlgorithmName(r.algorithm) + Fmt(" (%.1f us)", r.seconds * 1e6);
  // Each term alone: the walk under one parameter, and the per-message overhead.
  CollectiveSpec s = spec;
  if (!SpansHosts(s)) s.local_size = 0;
  const MachinePoint q = model.At(s.world_size);
  struct Term {
    const char* name;
    double w, r;
  };
  auto walk_with = [&](const Estimate& e, const CostParams& c) {
    CollectiveSpec t = s;
    t.algorithm = e.algorithm;
    StatusOr<Estimate> x = EstimateAlgorithm(t, c);
    return x.ok() ? x->walk_s : 0.0;
  };
  CostParams latency, bandwidth, compute;
  latency.alpha_s = q.alpha_s;
  latency.beta_s_per_byte = 0;
  bandwidth.alpha_s = 0;
  bandwidth.beta_s_per_byte = q.beta_s_per_byte;
  compute.alpha_s = 0;
  compute.beta_s_per_byte = 0;
  compute.gamma_s_per_byte = q.gamma_s_per_byte;
  compute.delta_s_per_byte = q.delta_s_per_byte;
  const Term terms[] = {
      {"latency (rounds x alpha)", walk_with(w, latency), walk_with(r, latency)},
      {"per-message overhead", w.overhead_s, r.overhead_s},
      {"bandwidth (bytes on the critical path)", walk_with(w, bandwidth), walk_with(r, bandwidth)},
      {"reduction and copies", walk_with(w, compute), walk_with(r, compute)},
      {"total work with every rank at once (throughput bound)", w.throughput_s, r.throughput_s},
  };
  const Term* biggest = &terms[0];
  for (const Term& t : terms) {
    if (t.r - t.w > biggest->r - biggest->w) biggest = &t;
  }
  out += std::string("; it saves most on ") + biggest->name +
         Fmt(": %.1f us against %.1f us", biggest->w * 1e6, biggest->r * 1e6);
  out += Fmt(" (%.0f rounds, %.0f messages on the busiest rank, against %.0f and %.0f)",
             static_cast<double>(w.rounds), static_cast<double>(w.max_msgs),
             static_cast<double>(r.rounds), static_cast<double>(r.max_msgs));
  return out;
}

ModelSelector::ModelSelector(MachineModel model, SelectionThresholds across_hosts)
    : model_(std::move(model)), across_hosts_(across_hosts) {}

int64_t ModelSelector::BucketCount(int64_t count) {
  if (count < 64) return count;
  int k = 63;
  while (!(static_cast<uint64_t>(count) >> k & 1)) --k;
  const int low = k - 2;  // keep the leading bit and the next two
  return static_cast<int64_t>(static_cast<uint64_t>(count) >> low << low);
}

ModelSelector::Key ModelSelector::KeyOf(const CollectiveSpec& spec) {
  const uint64_t local = SpansHosts(spec) ? static_cast<uint32_t>(spec.local_size) : 0;
  Key k;
  k.a = static_cast<uint64_t>(spec.collective) << 56 |
        static_cast<uint64_t>(DataTypeSize(spec.dtype) & 0xff) << 48 |
        (static_cast<uint64_t>(BucketCount(spec.count)) & ((uint64_t{1} << 48) - 1));
  k.b = static_cast<uint64_t>(static_cast<uint32_t>(spec.world_size)) << 32 | local;
  k.segment_elems = spec.segment_elems;
  k.grid_rows = spec.grid_rows;
  return k;
}

ModelSelector::Choice ModelSelector::Decide(const CollectiveSpec& spec) const {
  if (SpansHosts(spec) || spec.world_size > kMaxModelRanks) {
    const Algorithm a = SelectAlgorithm(spec, across_hosts_);
    return {a, a == Algorithm::kHierarchical ? spec.local_size : 0};
  }
  CollectiveSpec s = spec;
  s.count = BucketCount(spec.count);
  s.root = 0;  // decided at root 0: every pattern is the same relative to its root
  const std::vector<Estimate> est = RankCandidates(s, model_);
  if (est.empty()) return {SelectAlgorithm(spec, across_hosts_), 0};
  return {est.front().algorithm, 0};
}

CollectiveSpec ModelSelector::ChooseUncached(const CollectiveSpec& spec) const {
  const Choice c = Decide(spec);
  CollectiveSpec out = spec;
  out.algorithm = c.algorithm;
  out.local_size = c.local_size;
  return out;
}

CollectiveSpec ModelSelector::Choose(const CollectiveSpec& spec) {
  const Key key = KeyOf(spec);
  Choice c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      c = it->second;
    } else {
      c = Decide(spec);  // under the lock: a bucket is walked once
      if (cache_.size() >= 4096) cache_.clear();
      cache_.emplace(key, c);
    }
  }
  CollectiveSpec out = spec;
  out.algorithm = c.algorithm;
  out.local_size = c.local_size;
  return out;
}

size_t ModelSelector::cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

}  // namespace gyre::algo
