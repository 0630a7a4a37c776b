// The measurement method of BENCH.md, shared by gyre-bench and the peer programs (Gloo,
// Open MPI) so that every implementation is timed, checked and printed the same way: sizes,
// buffer shapes per collective, the test data and its expected result, the warm-up / timed
// loop, statistics, CPU pinning, and the table and JSONL output. It depends only on gyre's
// base library, never on gyre's communication layers, so a peer program measures the peer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"

namespace gyre::bench {

enum class Op {
  kAllreduce,
  kBroadcast,
  kReduce,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kGather,
  kScatter,
  kBarrier
};

const char* OpName(Op op);  // "reduce_scatter"
StatusOr<Op> ParseOp(const std::string& name);

// "4", "1K", "64M", "1G" (powers of 1024; "KB", "KiB", "MB", "MiB" ... accepted too).
StatusOr<int64_t> ParseSize(const std::string& text);
// "4 B", "64 KiB", "16 MiB"; sizes that are not a whole unit stay in the smaller one.
std::string FormatSize(int64_t bytes);
// min, min*f, min*f^2, ... up to max (nccl-tests' -b/-e/-f); f <= 1 gives {min}.
// ParseSize refuses sizes above 2^60 bytes, so no size overflows.
std::vector<int64_t> SizeSeries(int64_t min_bytes, int64_t max_bytes, int64_t factor);
// The sizes of a run: the comma-separated `list` ("4,64K,1M") if not empty, else the
// series from `min`, `max`, `factor`. Errors name the flag (--sizes, -b, -e, -f); a series
// with max above min needs factor >= 2 and min >= 1.
StatusOr<std::vector<int64_t>> SizesFromFlags(const std::string& list, const std::string& min,
                                              const std::string& max, int64_t factor);

// The buffers of one cell. `bytes` follows nccl-tests: each rank's buffer for allreduce,
// broadcast and reduce, the output of allgather and gather (the root's), the input of
// reduce_scatter, alltoall and scatter (the root's).
// A size that does not divide into p parts is rounded down to whole elements per rank (at
// least one), so `bytes` may differ from the size asked for; every implementation rounds
// the same way, so cells line up.
struct Shape {
  int64_t count = 0;     // the `count` argument in the NCCL convention (see gyre.h)
  int64_t in_elems = 0;  // elements of this rank's input buffer
  int64_t out_elems = 0;
  int64_t bytes = 0;  // the size reported
};
Shape ShapeFor(Op op, int64_t bytes, int world_size, size_t elem_size);

// busbw / algbw: 2(p-1)/p for allreduce, (p-1)/p for allgather, reduce_scatter, alltoall,
// gather and scatter, 1 for broadcast and reduce (nccl-tests' factors).
double BusFactor(Op op, int world_size);

// Test data: rank r, element i holds (7i + 3r + 1) mod M, with M small enough that every
// sum over ranks is exact in the type (1021 for 32- and 64-bit types, 8 for 8- and 16-bit
// ones); for prod the values are 1 or 2, so products stay exact too.
void FillInput(DataType dtype, ReduceOp op, int rank, void* data, int64_t elems);
// Elements of `out` that differ from the expected result of `op` on `rank` (0 where the
// rank has no defined output: reduce and gather off the root). Broadcast, reduce, gather and
// scatter use `root`.
int64_t CountWrong(Op op, DataType dtype, ReduceOp redop, int rank, int world_size, int root,
                   const Shape& shape, const void* out);

// What the timing method needs from the implementation under test, outside the timed part.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Status Barrier() = 0;
  // Element-wise maximum over ranks, in place; every rank ends with the same values.
  virtual Status MaxOverRanks(std::vector<double>* values) = 0;
};

// Timed iterations when a typical warm-up iteration took `fastest_seconds`: about
// `cell_seconds` in total, clamped to [5, 1000].
int IterationsFor(double fastest_seconds, double cell_seconds);
// The warm-up time N is chosen from: the lower median (the 3rd of 5, the faster of 2).
// BENCH.md says the fastest; an implementation whose times are bimodal (Gloo at 2 ranks and
// 4 B: 62 us fastest, 3.6 ms typical) then ran 1000 iterations of 3.6 ms, 3.6 s a cell
// instead of 0.25, which put the full comparison over its time budget.
double TypicalWarmup(std::vector<double> warm_seconds);
// 5 warm-up iterations up to 1 MiB, 2 above.
int DefaultWarmups(int64_t bytes);
// The warm-up of an automatic call of `call_bytes` (its count x element size) under online
// tuning: `warmups`, or enough to cover the tuner's trials and agreement where it tunes, so
// that the timed calls run what it kept.
int TunedWarmups(int warmups, int64_t call_bytes);

struct CellTiming {
  int iters = 0;
  std::vector<double> seconds;  // per iteration, the maximum over ranks
};
// BENCH.md's loop: `warmups` warm-up iterations, then N timed iterations of barrier, clock,
// `op`, clock. `check` (may be empty) runs once, right after the first warm-up, on the
// result of the first call on fresh data; with a check, or with N to choose, there is at
// least one warm-up. N is `fixed_iters`, or chosen so that N whole iterations (barrier
// included) of a typical warm-up (TypicalWarmup) take about `cell_seconds`; the warm-up times are
// taken over ranks first, so every rank picks the same N. `after` (may be empty) runs after each
// timed iteration's clock stops. Per-rank times are combined only at the end.
StatusOr<CellTiming> TimeCell(Collectives& coll, const std::function<Status()>& op,
                              const std::function<Status()>& check,
                              const std::function<void()>& after, int warmups, int fixed_iters,
                              double cell_seconds);

struct Result {
  std::string impl, algo;
  Op op = Op::kAllreduce;
  int ranks = 0;
  int64_t bytes = 0, count = 0;
  std::string dtype = "float32", redop = "sum";
  int iters = 0;
  double min_us = 0, median_us = 0, max_us = 0;
  double algbw_gbps = 0, busbw_gbps = 0;
  int64_t wrong = -1;  // -1: not checked
};
// Fills min/median/max and the bandwidths from the per-iteration times.
void Summarise(const std::vector<double>& seconds, double bus_factor, Result* r);
// One line of BENCH.md's format (no trailing newline); "ok" is null when not checked.
std::string ToJsonLine(const Result& r);
// nccl-tests-style table: a header of '#' lines, then one row per cell.
std::string TableHeader(const std::string& title);
std::string TableRow(const Result& r);

// The sum over ranks of each rank's count of wrong elements (through MaxOverRanks).
StatusOr<int64_t> SumWrongOverRanks(Collectives& coll, int64_t local_wrong);

// Where results go: on the printing rank, the table (or JSONL) on stdout and, if a path is
// given, JSONL appended to that file; elsewhere nothing.
class Reporter {
 public:
  // `format` is "table" or "jsonl".
  static StatusOr<std::unique_ptr<Reporter>> Open(bool printer, const std::string& format,
                                                  const std::string& jsonl_path);
  ~Reporter();
  void Header(const std::string& title);
  void Emit(const Result& r);
  void Footer(int64_t total_wrong);
  // Flushes and closes the JSONL file: the first write that failed (on stdout or the file),
  // named, or OK. Results that did not reach their file are an error, not a quiet loss.
  Status Close();

 private:
  Reporter() = default;
  void Wrote(bool ok, const std::string& where);
  bool printer_ = false;
  bool table_ = true;
  std::FILE* jsonl_ = nullptr;
  std::string jsonl_path_;
  Status write_error_;
};

// Pins the calling thread (and so every thread it starts later) to the (rank mod n)-th CPU
// of the current affinity mask. Returns the CPU chosen.
StatusOr<int> PinToRankCpu(int rank);
// Pins every thread of process `pid` to `cpu` (for a helper process that already runs).
Status PinProcess(pid_t pid, int cpu);

// Resident memory of process `pid` (0: this one) from /proc/<pid>/status: VmRSS now and
// VmHWM, its peak since it started or since the last ResetPeakRss. -1 where unreadable.
struct RssSample {
  int64_t rss_bytes = -1;
  int64_t peak_bytes = -1;
};
RssSample ReadRss(pid_t pid);
// Starts a new peak-RSS window (writes 5 to /proc/<pid>/clear_refs; Linux 4.0+).
Status ResetPeakRss(pid_t pid);

}  // namespace gyre::bench
