#include "core/exec/executor.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>

#include "core/base/dtype.h"
#include "core/base/large_memory.h"
#include "core/exec/monitor.h"

namespace gyre {

int64_t OpCounters::bytes_sent() const {
  int64_t t = 0;
  for (const auto& p : peers) t += p.bytes_sent;
  return t;
}
int64_t OpCounters::msgs_sent() const {
  int64_t t = 0;
  for (const auto& p : peers) t += p.msgs_sent;
  return t;
}
int64_t OpCounters::bytes_recv() const {
  int64_t t = 0;
  for (const auto& p : peers) t += p.bytes_recv;
  return t;
}
int64_t OpCounters::msgs_recv() const {
  int64_t t = 0;
  for (const auto& p : peers) t += p.msgs_recv;
  return t;
}
void OpCounters::Add(const OpCounters& o) {
  if (peers.size() < o.peers.size()) peers.resize(o.peers.size());
  for (size_t i = 0; i < o.peers.size(); ++i) {
    peers[i].bytes_sent += o.peers[i].bytes_sent;
    peers[i].msgs_sent += o.peers[i].msgs_sent;
    peers[i].bytes_recv += o.peers[i].bytes_recv;
    peers[i].msgs_recv += o.peers[i].msgs_recv;
  }
  bytes_reduced += o.bytes_reduced;
  bytes_copied += o.bytes_copied;
}

namespace {

// "4 B", "1.5 KiB", "64.0 MiB": one decimal above a KiB, rounded to nearest (no byte count
// is ever exactly halfway, since units are powers of two). Integer arithmetic: this runs on
// every call, and snprintf of a double was a tenth of a small call's bookkeeping.
void AppendSize(std::string* out, uint64_t bytes) {
  uint64_t unit = 1;
  const char* suffix = " B";
  if (bytes >= (uint64_t{1} << 20)) {
    unit = uint64_t{1} << 20;
    suffix = " MiB";
  } else if (bytes >= 1024) {
    unit = 1024;
    suffix = " KiB";
  }
  if (unit == 1) {
    *out += std::to_string(bytes);
  } else {
    const unsigned __int128 tenths = (static_cast<unsigned __int128>(bytes) * 10 + unit / 2) / unit;
    *out += std::to_string(static_cast<uint64_t>(tenths / 10));
    *out += '.';
    *out += static_cast<char>('0' + static_cast<int>(tenths % 10));
  }
  *out += suffix;
}

}  // namespace

std::string OpName(const OpDesc& d, uint64_t seq) {
  std::string name;
  name.reserve(64);
  const bool known = d.collective < algo::kNumCollectives;
  const auto c = static_cast<algo::Collective>(d.collective);
  const bool closing = c == algo::Collective::kAlltoall && d.root == algo::kClosingExchangeRoot;
  const bool agreeing = c == algo::Collective::kAllreduce && d.root == algo::kTuningAgreementRoot;
  name += closing    ? "close"
          : agreeing ? "tuning agreement"
          : known    ? algo::CollectiveName(c)
                     : "operation";
  name += " seq=";
  name += std::to_string(seq);
  name += " (";
  name += algo::AlgorithmName(static_cast<algo::Algorithm>(d.algorithm));
  if (known && c != algo::Collective::kBarrier) {
    name += ", ";
    const bool dtype_ok = IsValidDataType(d.dtype);
    const size_t esize = dtype_ok ? DataTypeSize(static_cast<DataType>(d.dtype)) : 1;
    AppendSize(&name, static_cast<uint64_t>(d.count) * esize);
    name += ' ';
    name += dtype_ok ? DataTypeName(static_cast<DataType>(d.dtype)) : "?";
  }
  name += ')';
  return name;
}

// Completions arrive from transport threads. The queue is shared with the callbacks, so a
// callback that runs late (after the OpRun is gone) touches nothing freed.
struct OpRun::Queue {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, Status>> items;

  void Push(int step, Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      items.emplace_back(step, std::move(s));
    }
    cv.notify_one();
  }
};

struct OpRun::Storage {
  std::shared_ptr<Queue> queue;
  std::vector<int> remaining;
  std::vector<int> dependents_begin;
  std::vector<int> dependents;
  std::vector<int> ready;
  std::vector<char> pending;
  std::vector<uint64_t> issued_order;
  std::vector<int64_t> op_bytes_from;
  std::vector<uint64_t> progress_mark;
  std::vector<std::pair<int, Status>> batch;  // completions being applied
  std::vector<int> local;                     // ServeTransfers' local steps
  OpCounters counters;
};

OpRun::OpRun(const algo::RankSchedule& schedule, const algo::CollectiveSpec& spec,
             const OpContext& ctx, OpBuffers buffers, unsigned char* scratch, Transport* transport,
             bool phantom, Storage* storage)
    : steps_(schedule.steps),
      spec_(spec),
      ctx_(ctx),
      buffers_(buffers),
      scratch_(scratch),
      transport_(transport),
      phantom_(phantom),
      esize_(DataTypeSize(spec.dtype)),
      own_storage_(storage == nullptr ? std::make_unique<Storage>() : nullptr),
      storage_(storage == nullptr ? *own_storage_ : *storage),
      queue_(storage_.queue),
      remaining_(storage_.remaining),
      dependents_begin_(storage_.dependents_begin),
      dependents_(storage_.dependents),
      ready_(storage_.ready),
      pending_(storage_.pending),
      issued_order_(storage_.issued_order),
      op_bytes_from_(storage_.op_bytes_from),
      progress_mark_(storage_.progress_mark),
      counters_(storage_.counters) {
  // A queue still held by a late callback of an earlier run is left to it.
  if (queue_ == nullptr || queue_.use_count() != 1) queue_ = std::make_shared<Queue>();
  queue_->items.clear();
  const int n = static_cast<int>(steps_.size());
  const int p = transport_->size();
  remaining_.assign(n, 0);
  pending_.assign(n, 0);
  issued_order_.assign(n, 0);
  ready_.clear();
  dependents_begin_.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    remaining_[i] = static_cast<int>(steps_[i].deps.size());
    for (int32_t d : steps_[i].deps) ++dependents_begin_[d + 1];
  }
  for (int i = 0; i < n; ++i) dependents_begin_[i + 1] += dependents_begin_[i];
  dependents_.resize(dependents_begin_[n]);
  // Filled in program order, as the steps list them; the cursor borrows `local`.
  std::vector<int>& cursor = storage_.local;
  cursor.assign(dependents_begin_.begin(), dependents_begin_.end() - 1);
  for (int i = 0; i < n; ++i) {
    for (int32_t d : steps_[i].deps) dependents_[cursor[d]++] = i;
  }
  cursor.clear();
  op_bytes_from_.assign(p, 0);
  progress_mark_.assign(2 * static_cast<size_t>(p), 0);  // received from q, then sent to q
  counters_.peers.assign(p, PeerCounters{});
  counters_.bytes_reduced = 0;
  counters_.bytes_copied = 0;
  storage_.batch.clear();
  start_time_ = last_progress_ = transport_->clock().Now();
}

OpRun::~OpRun() = default;

Status OpRun::Prepare() {
  const int self = transport_->rank();
  if (algo::IsReducing(spec_.collective)) {
    auto fn = GetReduceFn(spec_.dtype, spec_.op);
    if (!fn.ok()) return fn.status().WithContext(ctx_.Name());
    reduce_fn_ = *fn;
  }
  if (phantom_) return Status::Ok();
  const int64_t in_count = algo::InputCount(spec_, self);
  const int64_t out_count = algo::OutputCount(spec_, self);
  if (in_count > 0 && buffers_.input == nullptr) {
    return InvalidArgumentError(ctx_.Name() + ": the input buffer is null but must hold " +
                                std::to_string(in_count) + " elements");
  }
  if (out_count > 0 && buffers_.output == nullptr) {
    return InvalidArgumentError(ctx_.Name() + ": the output buffer is null but must hold " +
                                std::to_string(out_count) + " elements");
  }
  return Status::Ok();
}

void OpRun::Start() {
  const int p = transport_->size();
  for (int q = 0; q < p; ++q) {
    progress_mark_[q] = transport_->BytesReceivedFrom(q, ctx_.seq);
    progress_mark_[p + q] = transport_->BytesSentTo(q, ctx_.seq);
  }
  // ready_ is a stack; pushed last to first, so steps ready together are issued in program
  // order: a rank sends its pieces first to last and posts its receives in the order the
  // peer sends them, so they land directly instead of waiting as early messages.
  for (int i = static_cast<int>(steps_.size()) - 1; i >= 0; --i) {
    if (remaining_[i] == 0) ready_.push_back(i);
  }
  Issue();
}

bool OpRun::finished() const {
  if (!failure_.ok()) return outstanding_ == 0;
  return completed_ == static_cast<int>(steps_.size());
}

void OpRun::Release(int i) {
  ++completed_;
  for (int k = dependents_begin_[i + 1]; k-- > dependents_begin_[i];) {
    const int d = dependents_[k];
    if (--remaining_[d] == 0) ready_.push_back(d);
  }
}

TimePoint OpRun::last_progress() const {
  if (progress_unstamped_) {
    last_progress_ = transport_->clock().Now();
    progress_unstamped_ = false;
  }
  return last_progress_;
}

namespace {
// Reductions and copies larger than this run in slices of it, with completions served
// between slices (under 1 ms of work at the ~7 GB/s reduce rate measured for BENCH.md).
constexpr size_t kLocalSliceBytes = size_t{4} << 20;
}  // namespace

unsigned char* OpRun::Address(const algo::Region& r) const {
  if (phantom_) return nullptr;
  unsigned char* base = nullptr;
  switch (r.buffer) {
    case algo::BufferId::kInput:
      base = const_cast<unsigned char*>(static_cast<const unsigned char*>(buffers_.input));
      break;
    case algo::BufferId::kOutput:
      base = static_cast<unsigned char*>(buffers_.output);
      break;
    case algo::BufferId::kScratch:
      base = scratch_;
      break;
  }
  return base + static_cast<size_t>(r.offset) * esize_;
}

void OpRun::IssueTransfer(int i) {
  const algo::Step& st = steps_[i];
  const bool recv = st.kind == algo::StepKind::kRecv;
  const size_t bytes = static_cast<size_t>(recv ? st.dst.count : st.src.count) * esize_;
  MessageHeader h;
  h.seq = ctx_.seq;
  h.tag = st.tag;
  h.desc = ctx_.desc;
  auto q = queue_;
  pending_[i] = 1;
  issued_order_[i] = ++issued_count_;
  ++outstanding_;
  if (recv) {
    transport_->Recv(st.peer, h, Address(st.dst), bytes,
                     [q, i](Status s) { q->Push(i, std::move(s)); });
  } else {
    transport_->Send(st.peer, h, Address(st.src), bytes,
                     [q, i](Status s) { q->Push(i, std::move(s)); });
  }
}

void OpRun::RunLocal(int i) {
  const algo::Step& st = steps_[i];
  const size_t bytes = static_cast<size_t>(st.src.count) * esize_;
  unsigned char* dst = Address(st.dst);
  const unsigned char* src = Address(st.src);
  if (st.kind == algo::StepKind::kCopy && dst == src) {
    Release(i);
    return;
  }
  // Slices of a copy are only independent when its two regions do not overlap.
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  const bool sliced = !phantom_ && bytes > kLocalSliceBytes &&
                      (st.kind == algo::StepKind::kReduce || d + bytes <= s || s + bytes <= d);
  const size_t slice = sliced ? kLocalSliceBytes : bytes;
  for (size_t done = 0; done < bytes && !phantom_; done += slice) {
    const size_t n = std::min(slice, bytes - done);
    if (st.kind == algo::StepKind::kReduce) {
      reduce_fn_(dst + done, src + done, n / esize_);
    } else {
      std::memmove(dst + done, src + done, n);
    }
    if (done + n < bytes) {
      ServeTransfers();
      if (!failure_.ok()) return;  // the operation is over; Issue stops too
    }
  }
  if (st.kind == algo::StepKind::kReduce) {
    counters_.bytes_reduced += static_cast<int64_t>(bytes);
  } else {
    counters_.bytes_copied += static_cast<int64_t>(bytes);
  }
  Release(i);
}

void OpRun::Drain() {
  std::vector<std::pair<int, Status>>& batch = storage_.batch;
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    batch.swap(queue_->items);
  }
  for (auto& [i, s] : batch) ApplyCompletion(i, std::move(s));
  batch.clear();
}

void OpRun::ServeTransfers() {
  Drain();
  if (!failure_.ok()) return;
  std::vector<int>& local = storage_.local;  // left for Issue, in their order on the stack
  local.clear();
  for (size_t k = ready_.size(); k-- > 0;) {  // top of the stack first, as Issue would
    const int i = ready_[k];
    const algo::StepKind kind = steps_[i].kind;
    if (kind == algo::StepKind::kSend || kind == algo::StepKind::kRecv) {
      IssueTransfer(i);
    } else {
      local.push_back(i);
    }
  }
  ready_.assign(local.rbegin(), local.rend());
}

void OpRun::Issue() {
  while (!ready_.empty() && failure_.ok()) {
    const int i = ready_.back();
    ready_.pop_back();
    switch (steps_[i].kind) {
      case algo::StepKind::kSend:
      case algo::StepKind::kRecv:
        IssueTransfer(i);
        break;
      case algo::StepKind::kReduce:
      case algo::StepKind::kCopy:
        RunLocal(i);
        break;
    }
  }
}

void OpRun::ApplyCompletion(int i, Status s) {
  if (i < 0) {  // an interrupt from another thread
    Fail(std::move(s));
    return;
  }
  const algo::Step& st = steps_[i];
  pending_[i] = 0;
  --outstanding_;
  if (!s.ok()) {
    if (failure_.ok()) {
      Fail(Status(s.code(), ctx_.Name() + " failed on rank " + std::to_string(transport_->rank()) +
                                " at " + DescribeStep(i) + " after " +
                                FormatDuration(transport_->clock().Now() - start_time_) + ": " +
                                s.message()));
    }
    return;
  }
  if (st.kind == algo::StepKind::kSend) {
    counters_.peers[st.peer].bytes_sent += st.src.count * static_cast<int64_t>(esize_);
    counters_.peers[st.peer].msgs_sent += 1;
  } else {
    const int64_t b = st.dst.count * static_cast<int64_t>(esize_);
    counters_.peers[st.peer].bytes_recv += b;
    counters_.peers[st.peer].msgs_recv += 1;
    op_bytes_from_[st.peer] += b;
  }
  progress_unstamped_ = true;
  if (failure_.ok()) Release(i);
}

void OpRun::Poll() {
  Drain();
  Issue();
}

void OpRun::WaitForCompletion(TimePoint until) {
  if (driver_ != nullptr) {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      if (!queue_->items.empty()) return;
    }
    driver_->Drive(until);  // returns at once if `until` has passed
    return;
  }
  std::unique_lock<std::mutex> lock(queue_->mu);
  if (!queue_->items.empty()) return;
  const Duration wait = until - transport_->clock().Now();
  if (wait <= Duration::zero()) return;
  queue_->cv.wait_for(lock, wait, [&] { return !queue_->items.empty(); });
}

void OpRun::Interrupt(Status reason) {
  queue_->Push(-1, std::move(reason));
  if (driver_ != nullptr) driver_->Wake();
}

void OpRun::Fail(Status reason) {
  if (!failure_.ok()) return;
  failure_ = std::move(reason);
  if (!cancelled_) {
    cancelled_ = true;
    transport_->CancelOperation(ctx_.seq, AbortedError(ctx_.Name() + " was cancelled on rank " +
                                                       std::to_string(transport_->rank())));
  }
}

void OpRun::SampleProgress() {
  // Bytes written to a peer count as well as bytes read: a rank that only sends a large
  // message over a slow link completes nothing until the last byte, yet it is moving, and
  // the socket stops taking bytes once a silent peer's buffers are full.
  const int p = transport_->size();
  for (int q = 0; q < 2 * p; ++q) {
    const uint64_t b = q < p ? transport_->BytesReceivedFrom(q, ctx_.seq)
                             : transport_->BytesSentTo(q - p, ctx_.seq);
    if (b != progress_mark_[q]) {
      progress_mark_[q] = b;
      last_progress_ = transport_->clock().Now();
      progress_unstamped_ = false;
    }
  }
}

int OpRun::OldestPendingStep() const {
  int oldest = -1;
  for (int pass = 0; pass < 2 && oldest < 0; ++pass) {
    for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
      if (!pending_[i]) continue;
      if (pass == 0 && steps_[i].kind != algo::StepKind::kRecv) continue;
      if (oldest < 0 || issued_order_[i] < issued_order_[oldest]) oldest = i;
    }
  }
  return oldest;
}

std::string OpRun::DescribeStep(int i) const {
  const algo::Step& st = steps_[i];
  std::ostringstream os;
  os << "step #" << i << " of " << steps_.size() << " ("
     << (st.kind == algo::StepKind::kSend ? "send to " : "receive from ")
     << transport_->DescribePeer(st.peer) << ", " << algo::FormatTag(st.tag) << ", "
     << FormatBytes(static_cast<int64_t>(
            (st.kind == algo::StepKind::kRecv ? st.dst.count : st.src.count) * esize_))
     << ")";
  return os.str();
}

Executor::Executor() : storage_(std::make_unique<OpRun::Storage>()) {}
Executor::~Executor() = default;

unsigned char* Executor::Scratch::Reserve(size_t bytes) {
  if (bytes <= size_ && data_ != nullptr) return data_.get();
  data_.reset();
  size_ = 0;
  if (bytes == 0) return nullptr;
  data_ = AllocateLarge(bytes);
  if (data_ == nullptr) return nullptr;
  size_ = bytes;
  return data_.get();
}

Status Executor::Run(const algo::RankSchedule& schedule, const algo::CollectiveSpec& spec,
                     const OpContext& ctx, OpBuffers buffers, Transport* transport,
                     const ExecOptions& options, OpCounters* counters_out) {
  const int self = transport->rank();
  const Clock& clock = transport->clock();
  const size_t scratch_bytes =
      static_cast<size_t>(schedule.scratch_count) * DataTypeSize(spec.dtype);
  unsigned char* scratch = scratch_.Reserve(scratch_bytes);
  if (scratch == nullptr && scratch_bytes > 0) {
    if (counters_out) *counters_out = OpCounters{};
    return ResourceExhaustedError(ctx.Name() + " on rank " + std::to_string(self) +
                                  ": cannot allocate " +
                                  FormatBytes(static_cast<int64_t>(scratch_bytes)) + " of scratch");
  }
  // A float16 average sums the inputs divided by p (AverageScalesInputs). The user's input
  // stays as it was: the divided copy goes to the output where the output can hold it (an
  // allreduce, a reduce's root), which then runs in place, and to scratch of its own otherwise.
  const bool scales_inputs = algo::DividesInputsFirst(spec);
  if (scales_inputs) {
    const int64_t in_count = algo::InputCount(spec, self);
    if (in_count > 0 && buffers.input != nullptr) {
      const size_t bytes = static_cast<size_t>(in_count) * DataTypeSize(spec.dtype);
      void* dst = algo::OutputCount(spec, self) >= in_count ? buffers.output : nullptr;
      if (dst == nullptr) dst = scaled_input_.Reserve(bytes);
      if (dst == nullptr) {
        if (counters_out) *counters_out = OpCounters{};
        return ResourceExhaustedError(
            ctx.Name() + " on rank " + std::to_string(self) + ": cannot allocate " +
            FormatBytes(static_cast<int64_t>(bytes)) + " for the float16 average's divided input");
      }
      if (dst != buffers.input) std::memcpy(dst, buffers.input, bytes);
      Status scaled =
          ScaleForAverage(spec.dtype, dst, static_cast<size_t>(in_count), transport->size());
      if (!scaled.ok()) {
        if (counters_out) *counters_out = OpCounters{};
        return scaled;
      }
      buffers.input = dst;
    }
  }
  OpRun run(schedule, spec, ctx, buffers, scratch, transport, /*phantom=*/false, storage_.get());
  auto finish = [&](Status s) {
    if (counters_out) *counters_out = run.counters();
    return s;
  };
  GYRE_RETURN_IF_ERROR(finish(run.Prepare()));
  // Holding the lease for the whole operation (not per wait) keeps the transport's own
  // thread out of the way between messages, so it need not be woken and parked each time.
  struct DriverLease {
    DrivenTransport* driver = nullptr;
    ~DriverLease() {
      if (driver != nullptr) driver->ReleaseDriver();
    }
  } lease;
  size_t largest = 0;
  size_t sent = 0;
  for (const algo::Step& st : schedule.steps) {
    if (st.kind == algo::StepKind::kSend || st.kind == algo::StepKind::kRecv) {
      const int64_t count = st.kind == algo::StepKind::kRecv ? st.dst.count : st.src.count;
      const size_t bytes = static_cast<size_t>(count) * DataTypeSize(spec.dtype);
      largest = std::max(largest, bytes);
      if (st.kind == algo::StepKind::kSend) sent += bytes;
    }
  }
  transport->ExpectSend(sent);
  if (auto* driven = dynamic_cast<DrivenTransport*>(transport)) {
    if (driven->AcquireDriver(largest)) {
      lease.driver = driven;
      run.SetDriver(driven);
    }
  }
  const TimePoint start = run.start_time();
  OpMonitor* monitor = options.monitor;
  if (monitor != nullptr) {
    int64_t expected = 0;
    for (const algo::Step& st : schedule.steps) {
      if (st.kind == algo::StepKind::kRecv) {
        expected += st.dst.count * static_cast<int64_t>(DataTypeSize(spec.dtype));
      }
    }
    Status pending = monitor->Begin(&run, ctx, expected);
    if (!pending.ok()) {
      monitor->End(ctx.seq, pending);
      return finish(pending);
    }
  }
  struct EndGuard {
    OpMonitor* m;
    const OpRun& run;
    uint64_t seq;
    ~EndGuard() {
      if (m != nullptr) m->End(seq, run.status());
    }
  } end_guard{monitor, run, ctx.seq};
  // When the progress timeout runs out: not counting what this process spent stopped (a
  // Ctrl-Z of the whole job), which the freeze watchdog tells the monitor.
  // Nor, while the stall probe finds the ranks this one waits on still moving in this
  // operation (the chain of waits runs through a slow hop elsewhere), the time since they last
  // moved.
  auto progress_due = [&](TimePoint now) {
    const TimePoint last = run.last_progress();
    return monitor != nullptr ? monitor->ProgressDue(last, options.progress_timeout, now, ctx.seq)
                              : last + options.progress_timeout;
  };
  run.Start();
  while (!run.finished()) {
    run.Poll();
    if (monitor != nullptr) monitor->Update(run);
    if (run.finished()) break;
    if (!run.status().ok()) {
      // Failed: collect the cancelled completions, bounded so a broken transport cannot
      // hold us here.
      const TimePoint give_up = clock.Now() + Seconds(10);
      while (!run.finished() && clock.Now() < give_up) {
        run.WaitForCompletion(clock.Now() + Millis(50));
        run.Poll();
      }
      break;
    }
    // Wait in slices of at most a second (a quarter of T when T is short) so bytes still
    // streaming (progress without a completed message) are noticed, and the progress this
    // rank reports to the others' stall probes is never much older than it is.
    TimePoint wake = progress_due(clock.Now());
    if (!options.total_deadline.infinite()) wake = std::min(wake, options.total_deadline.when());
    wake =
        std::min(wake, clock.Now() + std::min<Duration>(options.progress_timeout / 4, Seconds(1)));
    run.WaitForCompletion(wake);
    run.Poll();
    if (run.finished() || !run.status().ok()) continue;
    run.SampleProgress();
    if (monitor != nullptr) monitor->Update(run);
    const TimePoint now = clock.Now();
    if (!options.total_deadline.infinite() && now >= options.total_deadline.when()) {
      run.Fail(DeadlineExceededError(ctx.Name() + " on rank " + std::to_string(self) +
                                     " exceeded its operation deadline after " +
                                     FormatDuration(now - start)));
      continue;
    }
    if (now >= progress_due(now)) {
      const int oldest = run.OldestPendingStep();
      std::ostringstream os;
      os << ctx.Name() << " on rank " << self << ": no progress for "
         << FormatDuration(now - run.last_progress()) << " (progress timeout "
         << FormatDuration(options.progress_timeout) << ", " << FormatDuration(now - start)
         << " into the operation";
      if (monitor != nullptr) {
        if (const auto moved = monitor->MovedElsewhere(ctx.seq);
            moved && moved->when > run.last_progress()) {
          os << "; rank " << moved->rank << ", on which this rank's wait depends, last moved "
             << FormatDuration(SteadyClock::Get()->Now() - moved->when) << " ago";
        }
      }
      os << ")";
      if (oldest >= 0) {
        const int peer = run.PeerOfStep(oldest);
        os << ": waiting for " << transport->DescribePeer(peer) << " at "
           << run.DescribeStep(oldest) << "; received "
           << FormatBytes(run.bytes_received_from(peer)) << " from it in this operation";
      }
      const int others = run.outstanding() - (oldest >= 0 ? 1 : 0);
      if (others > 0) os << "; " << others << " more step(s) pending";
      os << "; " << run.completed_steps() << " of " << run.total_steps() << " steps done";
      run.Fail(DeadlineExceededError(os.str()));
    }
  }
  if (!run.status().ok()) return finish(run.status());
  const int64_t out_count = algo::OutputCount(spec, self);
  if (spec.op == ReduceOp::kAvg && algo::IsReducing(spec.collective) && !scales_inputs &&
      out_count > 0) {
    GYRE_RETURN_IF_ERROR(finish(ScaleForAverage(
        spec.dtype, buffers.output, static_cast<size_t>(out_count), transport->size())));
  }
  return finish(Status::Ok());
}

}  // namespace gyre
