#include "daemon/workloads.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "bench/bench_common.h"
#include "core/algo/formulas.h"
#include "core/comm/selfcheck.h"

namespace gyre::daemon {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

bool Stopped(const WorkloadOptions& options) {
  return options.stop != nullptr && options.stop->load();
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Each rank contributes `mine` (n int64 values); rank 0 gets everyone's, rank-major. `what`
// names the results for the failure note.
std::vector<int64_t> GatherToZero(Communicator& comm, const std::vector<int64_t>& mine,
                                  const std::string& what, Status* status, FirstFailure* failure) {
  std::vector<int64_t> all(comm.rank() == 0 ? mine.size() * comm.size() : 0);
  CallOptions o;
  o.algorithm = Algorithm::kLinear;
  Status s = comm.Gather(mine.data(), all.empty() ? nullptr : all.data(),
                         static_cast<int64_t>(mine.size()), DataType::kInt64, 0, o);
  failure->Note("gather of " + what + " to rank 0", s);
  if (!s.ok() && status->ok()) *status = s;
  return all;
}

// "allreduce ring, int32, count 4003, root 3" (", deterministic" when asked).
std::string Describe(const CollectiveSpec& spec, bool deterministic) {
  return std::string(algo::CollectiveName(spec.collective)) + " " +
         algo::AlgorithmName(spec.algorithm) + ", " + DataTypeName(spec.dtype) + ", count " +
         std::to_string(spec.count) + ", root " + std::to_string(spec.root) +
         (deterministic ? ", deterministic" : "");
}

struct CheckRow {
  std::string collective, algorithm, result;
  bool ok;
};

// One (collective, algorithm) check; every rank compares its own output with the reference.
// Returns -1 on success, the first wrong element, or -2 when the call itself failed.
int64_t CheckOne(Communicator& comm, const CollectiveSpec& spec, bool deterministic,
                 std::string* error) {
  const int p = comm.size();
  const int r = comm.rank();
  std::vector<std::vector<unsigned char>> inputs;
  for (int q = 0; q < p; ++q) inputs.push_back(MakeInput(spec, q));
  std::vector<unsigned char> want = Reference(spec, inputs, r);
  std::vector<unsigned char> out(want.size(), 0xCD);
  CallOptions o;
  o.algorithm = spec.algorithm;
  o.deterministic = deterministic ? 1 : 0;
  Status s = comm.Run(spec, inputs[r].empty() ? nullptr : inputs[r].data(),
                      out.empty() ? nullptr : out.data(), o);
  if (!s.ok()) {
    *error = s.ToString();
    return -2;
  }
  return FirstDifferentElement(spec, out, want);
}

bool VerificationTable(Communicator& comm, std::ostream& report, const WorkloadOptions& options,
                       bool* fatal, FirstFailure* failure) {
  const int p = comm.size();
  struct Item {
    CollectiveSpec spec;
    bool deterministic;
  };
  std::vector<Item> items;
  for (int c = 0; c < algo::kNumCollectives; ++c) {
    const Collective coll = static_cast<Collective>(c);
    std::vector<Algorithm> algos = algo::AlgorithmsFor(coll);
    for (Algorithm a : algos) {
      CollectiveSpec s;
      s.collective = coll;
      s.algorithm = a;
      s.world_size = p;
      // An uneven count (not divisible by p) and a non-zero root exercise the edge cases.
      s.count = coll == Collective::kAllreduce || coll == Collective::kBroadcast ||
                        coll == Collective::kReduce
                    ? 1000 * p + 3
                    : 1003;
      s.dtype = algo::IsReducing(coll) ? DataType::kInt32 : DataType::kFloat32;
      s.op = ReduceOp::kSum;
      s.root = p - 1;
      items.push_back({s, false});
    }
    if (algo::IsReducing(coll)) {
      CollectiveSpec s = items.back().spec;
      s.algorithm = Algorithm::kCanonical;
      s.dtype = DataType::kFloat32;
      items.push_back({s, true});
    }
  }
  std::vector<int64_t> results;
  std::string first_error;
  for (const Item& it : items) {
    if (Stopped(options)) {
      // The other ranks may be gone already: no gather of the results.
      if (comm.rank() == 0) {
        report << "1. Verification: stopped by a signal after " << results.size() << " of "
               << items.size() << " checks\n\n";
      }
      *fatal = true;
      return false;
    }
    std::string err;
    results.push_back(CheckOne(comm, it.spec, it.deterministic, &err));
    if (!err.empty() && first_error.empty()) first_error = err;
    if (results.back() >= 0) {
      failure->Note("check of " + Describe(it.spec, it.deterministic),
                    "wrong result at element " + std::to_string(results.back()));
    }
    if (results.back() == -2) {
      failure->Note(Describe(it.spec, it.deterministic), err);
      // A failed call leaves the ranks out of step; stop here.
      *fatal = true;
      break;
    }
  }
  results.resize(items.size(), -3);  // -3: not run
  Status gs;
  std::vector<int64_t> all = GatherToZero(comm, results, "the verification results", &gs, failure);
  if (!gs.ok()) {
    // The gather usually fails because of an earlier failure: name that one first.
    if (!failure->empty())
      report << "verification: first failure on this rank: " << failure->text() << "\n";
    report << "verification: cannot collect results: " << gs.ToString() << "\n";
    return false;
  }
  bool ok = first_error.empty();
  if (comm.rank() == 0) {
    report << "1. Verification: every collective x algorithm on " << p
           << " ranks, checked on every rank against a sequential reference (int32 bit-exact;\n"
           << "   deterministic rows on float32), uneven counts, root " << p - 1 << "\n\n";
    report << std::left << std::setw(16) << "collective" << std::setw(22) << "algorithm"
           << std::setw(10) << "count"
           << "result\n";
    for (size_t i = 0; i < items.size(); ++i) {
      std::string result = "ok";
      for (int r = 0; r < p; ++r) {
        const int64_t v = all[r * items.size() + i];
        if (v == -1) continue;
        ok = false;
        if (v == -2)
          result = "FAILED on rank " + std::to_string(r);
        else if (v == -3)
          result = "not run";
        else
          result = "WRONG: rank " + std::to_string(r) + " element " + std::to_string(v);
        break;
      }
      std::string name = algo::AlgorithmName(items[i].spec.algorithm);
      if (items[i].deterministic) name = "deterministic";
      report << std::left << std::setw(16) << algo::CollectiveName(items[i].spec.collective)
             << std::setw(22) << name << std::setw(10) << items[i].spec.count << result << "\n";
    }
    if (!first_error.empty()) report << "first error (rank 0): " << first_error << "\n";
    report << "\n";
  }
  return ok;
}

bool CountersTable(Communicator& comm, std::ostream& report, FirstFailure* failure) {
  const int p = comm.size();
  const int64_t n = int64_t{1} << 18;  // elements; p | n for p a power of two
  const int64_t count = n - n % p;     // divisible by p so the formulas are exact
  std::vector<float> in(count, 1.0f), out(count);
  CallOptions ring;
  ring.algorithm = Algorithm::kRing;
  ring.segment_bytes = 0;
  Status s = comm.Allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, ring);
  const OpCounters rc = comm.last().counters;
  CallOptions direct;
  direct.algorithm = Algorithm::kDirect;
  Status s2 = s.ok() ? comm.Allreduce(in.data(), out.data(), count, DataType::kFloat32,
                                      ReduceOp::kSum, direct)
                     : s;
  const OpCounters dc = comm.last().counters;
  failure->Note("allreduce ring, float32, count " + std::to_string(count) + " (counters)", s);
  failure->Note("allreduce direct, float32, count " + std::to_string(count) + " (counters)", s2);
  std::vector<int64_t> mine = {rc.msgs_sent(), rc.msgs_recv(),      rc.bytes_sent() / 4,
                               dc.msgs_sent(), dc.bytes_sent() / 4, s.ok() && s2.ok()};
  Status gs;
  std::vector<int64_t> all = GatherToZero(comm, mine, "the counters", &gs, failure);
  if (!gs.ok()) return false;
  if (comm.rank() != 0) return true;
  bool ok = true;
  const int64_t msgs_theory = 4 * (p - 1);
  const int64_t elems_theory = 2 * (p - 1) * count / p;
  const int64_t direct_theory = count * (p - 1);
  report << "2. Counters: ring allreduce of n = " << count << " float32 elements per rank, "
         << "measured by the executor\n"
         << "   theory: 4(p-1) = " << msgs_theory << " messages (2(p-1) sent + 2(p-1) received), "
         << "2(p-1)n/p = " << elems_theory << " elements sent;\n"
         << "   direct scheme: n(p-1) = " << direct_theory << " elements sent, 2(p-1) messages\n\n";
  report << std::left << std::setw(6) << "rank" << std::setw(18) << "ring msgs s+r" << std::setw(14)
         << "theory" << std::setw(18) << "ring elems sent" << std::setw(14) << "theory"
         << std::setw(20) << "direct elems sent" << std::setw(14) << "theory"
         << "check\n";
  for (int r = 0; r < p; ++r) {
    const int64_t* v = &all[r * mine.size()];
    const bool row_ok =
        v[5] == 1 && v[0] + v[1] == msgs_theory && v[2] == elems_theory && v[4] == direct_theory;
    ok = ok && row_ok;
    if (!row_ok) {
      failure->Note("counters check",
                    "rank " + std::to_string(r) + "'s counters differ from the theory");
    }
    report << std::left << std::setw(6) << r << std::setw(18) << v[0] + v[1] << std::setw(14)
           << msgs_theory << std::setw(18) << v[2] << std::setw(14) << elems_theory << std::setw(20)
           << v[4] << std::setw(14) << direct_theory << (row_ok ? "ok" : "MISMATCH") << "\n";
  }
  report << "\n";
  return ok;
}

bool AssociativityCase(Communicator& comm, std::ostream& report, FirstFailure* failure) {
  const int p = comm.size();
  if (p < 4) {
    if (comm.rank() == 0) {
      report << "3. Float associativity: needs at least 4 ranks (this job has " << p
             << "); skipped\n\n";
    }
    return true;
  }
  const double pattern[4] = {1e16, 1.0, -1e16, 3.0};
  const double mine = comm.rank() < 4 ? pattern[comm.rank()] : 0.0;
  double ring = 0, tree = 0, det_ring = 0, det_tree = 0;
  CallOptions o;
  o.algorithm = Algorithm::kRing;
  o.deterministic = 0;
  Status s = comm.Allreduce(&mine, &ring, 1, DataType::kFloat64, ReduceOp::kSum, o);
  o.algorithm = Algorithm::kTree;
  if (s.ok()) s = comm.Allreduce(&mine, &tree, 1, DataType::kFloat64, ReduceOp::kSum, o);
  o.deterministic = 1;
  o.algorithm = Algorithm::kRing;
  if (s.ok()) s = comm.Allreduce(&mine, &det_ring, 1, DataType::kFloat64, ReduceOp::kSum, o);
  o.algorithm = Algorithm::kTree;
  if (s.ok()) s = comm.Allreduce(&mine, &det_tree, 1, DataType::kFloat64, ReduceOp::kSum, o);
  failure->Note("allreduce float64, count 1 (float associativity case)", s);
  if (comm.rank() != 0) return s.ok();
  const bool ok = s.ok() && ring != tree && det_ring == det_tree;
  if (s.ok() && !ok) {
    failure->Note("float associativity check",
                  "ring " + Fmt("%.17g", ring) + ", tree " + Fmt("%.17g", tree) +
                      ", deterministic ring " + Fmt("%.17g", det_ring) + ", deterministic tree " +
                      Fmt("%.17g", det_tree));
  }
  report << "3. Float associativity: ranks 0-3 hold [1e16, 1, -1e16, 3] (float64; exact sum 4"
         << (p > 4 ? ", other ranks 0" : "") << ")\n\n"
         << "   ring                 " << Fmt("%.17g", ring)
         << "   (((r0+r1)+r2)+r3: the partial sum travels the ring)\n"
         << "   tree                 " << Fmt("%.17g", tree)
         << "   ((r0+r1)+(r2+r3): binomial pairs)\n"
         << "   ring, deterministic  " << Fmt("%.17g", det_ring) << "\n"
         << "   tree, deterministic  " << Fmt("%.17g", det_tree) << "\n"
         << "   "
         << (ok ? "ok: ring and tree differ; deterministic mode gives one answer"
                : "FAILED" + (s.ok() ? std::string() : ": " + s.ToString()))
         << "\n\n";
  return ok;
}

bool Timings(Communicator& comm, std::ostream& report, int runs, const WorkloadOptions& options,
             FirstFailure* failure) {
  const int64_t sizes[3] = {1 << 10, 1 << 20, 16 << 20};
  const Algorithm algos[2] = {Algorithm::kRing, Algorithm::kTree};
  std::vector<double> times;  // [size][algo][run], this rank's
  Status s;
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / 4;
    std::vector<float> in(count, 1.0f), out(count);
    for (Algorithm a : algos) {
      CallOptions o;
      o.algorithm = a;
      for (int w = 0; w < 2 && s.ok(); ++w) {  // warm-up
        if (Stopped(options)) break;
        s = comm.Allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, o);
      }
      for (int i = 0; i < runs; ++i) {
        if (Stopped(options)) {
          // The other ranks may be gone already: no gathering of the times taken so far.
          if (comm.rank() == 0) {
            report << "4. Timings: stopped by a signal after " << times.size() << " of "
                   << 3 * 2 * static_cast<int64_t>(runs) << " timed runs\n\n";
          }
          return false;
        }
        if (s.ok()) s = comm.Barrier();
        auto t0 = std::chrono::steady_clock::now();
        if (s.ok()) {
          s = comm.Allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, o);
        }
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  // The iteration's time is the maximum over ranks, gathered once at the end.
  std::vector<double> worst(times.size());
  if (s.ok()) {
    s = comm.Allreduce(times.data(), worst.data(), static_cast<int64_t>(times.size()),
                       DataType::kFloat64, ReduceOp::kMax);
  }
  failure->Note("allreduce of the timings (ring and tree, 1 KiB to 16 MiB)", s);
  if (comm.rank() != 0) return s.ok();
  report << "4. Timings: allreduce float32 sum, " << runs
         << " runs per cell after 2 warm-ups; each run's time is the max over ranks\n\n";
  report << std::left << std::setw(10) << "size" << std::setw(8) << "algo" << std::right
         << std::setw(12) << "min_us" << std::setw(12) << "median_us" << std::setw(12) << "max_us"
         << std::setw(12) << "busbw_GBps"
         << "\n";
  if (!s.ok()) {
    report << "FAILED: " << s.ToString() << "\n";
    return false;
  }
  const char* names[3] = {"1 KiB", "1 MiB", "16 MiB"};
  const int p = comm.size();
  for (int si = 0; si < 3; ++si) {
    for (int ai = 0; ai < 2; ++ai) {
      std::vector<double> cell(worst.begin() + (si * 2 + ai) * runs,
                               worst.begin() + (si * 2 + ai + 1) * runs);
      std::sort(cell.begin(), cell.end());
      const double median = cell[cell.size() / 2];
      const double busbw = p > 1 ? sizes[si] / median * 2.0 * (p - 1) / p / 1e9 : 0.0;
      report << std::left << std::setw(10) << names[si] << std::setw(8)
             << algo::AlgorithmName(algos[ai]) << std::right << std::setw(12)
             << Fmt("%.1f", cell.front() * 1e6) << std::setw(12) << Fmt("%.1f", median * 1e6)
             << std::setw(12) << Fmt("%.1f", cell.back() * 1e6) << std::setw(12)
             << Fmt("%.3f", busbw) << "\n";
    }
  }
  report << "\n";
  return true;
}

// Everyone learns whether every rank passed.
bool AgreeAll(Communicator& comm, bool mine, FirstFailure* failure) {
  int32_t v = mine ? 1 : 0, all = 0;
  CallOptions o;
  Status s = comm.Allreduce(&v, &all, 1, DataType::kInt32, ReduceOp::kMin, o);
  failure->Note("allreduce of every rank's pass or fail", s);
  return s.ok() && all == 1;
}

// The benchmark method's view of a Communicator.
class CommCollectives final : public bench::Collectives {
 public:
  explicit CommCollectives(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Status Barrier() override { return comm_.Barrier(); }
  Status MaxOverRanks(std::vector<double>* v) override {
    std::vector<double> out(v->size());
    GYRE_RETURN_IF_ERROR(comm_.Allreduce(v->data(), out.data(), static_cast<int64_t>(v->size()),
                                         DataType::kFloat64, ReduceOp::kMax));
    *v = std::move(out);
    return Status::Ok();
  }

 private:
  Communicator& comm_;
};

}  // namespace

void FirstFailure::Note(const std::string& what, const std::string& why) {
  if (text_.empty()) text_ = what + ": " + why;
}

bool RunBench(Communicator& comm, std::ostream& report, int64_t max_bytes,
              const WorkloadOptions& options, FirstFailure* failure) {
  CommCollectives coll(comm);
  const int p = comm.size();
  if (comm.rank() == 0) report << bench::TableHeader("gyred --run bench: allreduce, auto");
  int64_t total_wrong = 0;
  for (int64_t bytes : bench::SizeSeries(4, max_bytes, 4)) {
    if (Stopped(options)) {
      if (comm.rank() == 0) report << "bench: stopped by a signal before " << bytes << " B\n";
      return false;
    }
    const bench::Shape shape = bench::ShapeFor(bench::Op::kAllreduce, bytes, p, 4);
    std::vector<float> in(shape.in_elems), out(shape.out_elems);
    bench::FillInput(DataType::kFloat32, ReduceOp::kSum, comm.rank(), in.data(), shape.in_elems);
    int64_t wrong = 0;
    auto op = [&] {
      return comm.Allreduce(in.data(), out.data(), shape.count, DataType::kFloat32, ReduceOp::kSum);
    };
    auto check = [&] {
      wrong = bench::CountWrong(bench::Op::kAllreduce, DataType::kFloat32, ReduceOp::kSum,
                                comm.rank(), p, 0, shape, out.data());
      return Status::Ok();
    };
    const int warmups = comm.tuning()
                            ? bench::TunedWarmups(bench::DefaultWarmups(bytes), shape.count * 4)
                            : bench::DefaultWarmups(bytes);
    auto cell = bench::TimeCell(coll, op, check, nullptr, warmups, 0, 0.25);
    const std::string what = "allreduce auto, float32, count " + std::to_string(shape.count);
    if (!cell.ok()) {
      failure->Note(what, cell.status());
      report << "bench: " << cell.status().ToString() << "\n";
      return false;
    }
    if (wrong > 0) failure->Note("check of " + what, std::to_string(wrong) + " wrong elements");
    auto all_wrong = bench::SumWrongOverRanks(coll, wrong);
    if (!all_wrong.ok()) {
      failure->Note("sum of the wrong elements over ranks", all_wrong.status());
      return false;
    }
    total_wrong += *all_wrong;
    bench::Result r;
    r.impl = "gyre-daemon";
    r.algo = std::string("auto:") + algo::AlgorithmName(comm.last().spec.algorithm);
    r.ranks = p;
    r.bytes = shape.bytes;
    r.count = shape.count;
    r.iters = cell->iters;
    r.wrong = *all_wrong;
    bench::Summarise(cell->seconds, bench::BusFactor(bench::Op::kAllreduce, p), &r);
    if (comm.rank() == 0) report << bench::TableRow(r);
  }
  return total_wrong == 0;
}

bool RunSelftest(Communicator& comm, std::ostream& report, const WorkloadOptions& options,
                 FirstFailure* failure) {
  bool fatal = false;
  bool ok = VerificationTable(comm, report, options, &fatal, failure);
  if (fatal || Stopped(options)) return false;
  ok = AgreeAll(comm, ok, failure);
  if (comm.rank() == 0) report << (ok ? "selftest: all checks passed\n" : "selftest: FAILED\n");
  return ok;
}

bool RunMainJob(Communicator& comm, std::ostream& report, const WorkloadOptions& options,
                FirstFailure* failure) {
  if (comm.rank() == 0) {
    report << "gyre main job: " << comm.size() << " ranks, each its own gyred process, "
           << "TCP on loopback\n\n";
  }
  bool fatal = false;
  bool ok = VerificationTable(comm, report, options, &fatal, failure);
  if (fatal || Stopped(options)) return false;
  ok = CountersTable(comm, report, failure) && ok;
  if (Stopped(options)) return false;
  ok = AssociativityCase(comm, report, failure) && ok;
  if (Stopped(options)) return false;
  ok = Timings(comm, report, std::max(5, options.timing_runs), options, failure) && ok;
  if (Stopped(options)) return false;
  ok = AgreeAll(comm, ok, failure);
  if (comm.rank() == 0) {
    report << (ok ? "main job: all checks passed\n" : "main job: FAILED (see above)\n");
  }
  return ok;
}

}  // namespace gyre::daemon
