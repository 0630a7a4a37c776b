#include "core/exec/executor.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>

#include "core/base/dtype.h"

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

// Completions arrive from transport threads; the state is shared so a callback that runs
// after Run() returned (it must not, by the transport contract, but a late one is harmless)
// touches nothing freed.
struct CompletionQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, Status>> items;

  void Push(int step, Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      items.emplace_back(step, std::move(s));
    }
    cv.notify_one();
  }
};

std::string FormatBytes(int64_t b) {
  char buf[64];
  if (b >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / 1048576.0);
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(b));
  }
  return buf;
}

}  // namespace

Status Executor::Run(const algo::RankSchedule& schedule, const algo::CollectiveSpec& spec,
                     const OpContext& ctx, OpBuffers buffers, Transport* transport,
                     const ExecOptions& options, OpCounters* counters_out) {
  using algo::BufferId;
  using algo::StepKind;
  const int p = transport->size();
  const int self = transport->rank();
  const size_t esize = DataTypeSize(spec.dtype);
  const auto& steps = schedule.steps;
  const int n = static_cast<int>(steps.size());
  const Clock& clock = transport->clock();
  const TimePoint start_time = clock.Now();

  OpCounters counters;
  counters.peers.assign(p, PeerCounters{});
  auto finish = [&](Status s) {
    if (counters_out) *counters_out = counters;
    return s;
  };

  ReduceFn reduce_fn = nullptr;
  if (algo::IsReducing(spec.collective)) {
    auto fn = GetReduceFn(spec.dtype, spec.op);
    if (!fn.ok()) return finish(fn.status().WithContext(ctx.name));
    reduce_fn = *fn;
  }
  const int64_t in_count = algo::InputCount(spec, self);
  const int64_t out_count = algo::OutputCount(spec, self);
  if (in_count > 0 && buffers.input == nullptr) {
    return finish(InvalidArgumentError(ctx.name + ": the input buffer is null but must hold " +
                                       std::to_string(in_count) + " elements"));
  }
  if (out_count > 0 && buffers.output == nullptr) {
    return finish(InvalidArgumentError(ctx.name + ": the output buffer is null but must hold " +
                                       std::to_string(out_count) + " elements"));
  }
  const size_t scratch_bytes = static_cast<size_t>(schedule.scratch_count) * esize;
  if (scratch_.size() < scratch_bytes) scratch_.resize(scratch_bytes);
  unsigned char* scratch = scratch_.data();

  auto ptr = [&](const algo::Region& r) -> unsigned char* {
    unsigned char* base = nullptr;
    switch (r.buffer) {
      case BufferId::kInput:
        base = const_cast<unsigned char*>(static_cast<const unsigned char*>(buffers.input));
        break;
      case BufferId::kOutput:
        base = static_cast<unsigned char*>(buffers.output);
        break;
      case BufferId::kScratch:
        base = scratch;
        break;
    }
    return base + static_cast<size_t>(r.offset) * esize;
  };

  std::vector<int> remaining(n, 0);
  std::vector<std::vector<int>> dependents(n);
  for (int i = 0; i < n; ++i) {
    remaining[i] = static_cast<int>(steps[i].deps.size());
    for (int32_t d : steps[i].deps) dependents[d].push_back(i);
  }

  auto queue = std::make_shared<CompletionQueue>();
  MessageHeader header;
  header.seq = ctx.seq;
  header.desc = ctx.desc;
  int outstanding = 0;
  int completed = 0;
  std::vector<char> pending(n, 0);  // issued to the transport, not completed
  std::vector<TimePoint> issued_at(n);
  std::vector<int64_t> op_bytes_from(p, 0);  // payload received from each peer in this op
  std::vector<uint64_t> progress_mark(p, 0);
  for (int q = 0; q < p; ++q) progress_mark[q] = transport->BytesReceivedFrom(q);
  TimePoint last_progress = start_time;

  std::vector<int> work;
  for (int i = 0; i < n; ++i) {
    if (remaining[i] == 0) work.push_back(i);
  }
  auto release = [&](int i) {
    ++completed;
    for (int d : dependents[i]) {
      if (--remaining[d] == 0) work.push_back(d);
    }
  };
  // Issues everything in `work`; local steps run here and may release more.
  auto drain_work = [&]() {
    while (!work.empty()) {
      int i = work.back();
      work.pop_back();
      const algo::Step& st = steps[i];
      const size_t bytes =
          static_cast<size_t>(st.kind == StepKind::kRecv ? st.dst.count : st.src.count) * esize;
      switch (st.kind) {
        case StepKind::kSend: {
          MessageHeader h = header;
          h.tag = st.tag;
          pending[i] = 1;
          issued_at[i] = clock.Now();
          ++outstanding;
          auto q = queue;
          transport->Send(st.peer, h, ptr(st.src), bytes,
                          [q, i](Status s) { q->Push(i, std::move(s)); });
          break;
        }
        case StepKind::kRecv: {
          MessageHeader h = header;
          h.tag = st.tag;
          pending[i] = 1;
          issued_at[i] = clock.Now();
          ++outstanding;
          auto q = queue;
          transport->Recv(st.peer, h, ptr(st.dst), bytes,
                          [q, i](Status s) { q->Push(i, std::move(s)); });
          break;
        }
        case StepKind::kReduce:
          reduce_fn(ptr(st.dst), ptr(st.src), static_cast<size_t>(st.dst.count));
          counters.bytes_reduced += static_cast<int64_t>(bytes);
          release(i);
          break;
        case StepKind::kCopy: {
          unsigned char* dst = ptr(st.dst);
          const unsigned char* src = ptr(st.src);
          if (dst != src) {
            std::memmove(dst, src, bytes);
            counters.bytes_copied += static_cast<int64_t>(bytes);
          }
          release(i);
          break;
        }
      }
    }
  };

  auto describe_step = [&](int i) {
    const algo::Step& st = steps[i];
    std::ostringstream os;
    os << "step #" << i << " of " << n << " ("
       << (st.kind == StepKind::kSend ? "send to " : "receive from ")
       << transport->DescribePeer(st.peer) << ", " << algo::FormatTag(st.tag) << ", "
       << FormatBytes(static_cast<int64_t>(
              (st.kind == StepKind::kRecv ? st.dst.count : st.src.count) * esize))
       << ")";
    return os.str();
  };

  Status failure;
  drain_work();
  while (completed < n && failure.ok()) {
    std::deque<std::pair<int, Status>> batch;
    {
      std::unique_lock<std::mutex> lock(queue->mu);
      if (queue->items.empty()) {
        TimePoint wake = last_progress + options.progress_timeout;
        if (!options.total_deadline.infinite()) {
          wake = std::min(wake, options.total_deadline.when());
        }
        // Wait in slices so a transport whose bytes keep arriving (progress without a
        // completed message) is noticed.
        TimePoint slice = clock.Now() + std::min<Duration>(options.progress_timeout, Seconds(1));
        TimePoint until = std::min(wake, slice);
        Duration wait = until - clock.Now();
        if (wait > Duration::zero()) {
          queue->cv.wait_for(lock, wait, [&] { return !queue->items.empty(); });
        }
      }
      batch.swap(queue->items);
    }
    for (auto& [i, s] : batch) {
      const algo::Step& st = steps[i];
      pending[i] = 0;
      --outstanding;
      if (!s.ok()) {
        if (failure.ok()) {
          failure =
              Status(s.code(), ctx.name + " failed on rank " + std::to_string(self) + " at " +
                                   describe_step(i) + " after " +
                                   FormatDuration(clock.Now() - start_time) + ": " + s.message());
        }
        continue;
      }
      if (st.kind == StepKind::kSend) {
        counters.peers[st.peer].bytes_sent += st.src.count * static_cast<int64_t>(esize);
        counters.peers[st.peer].msgs_sent += 1;
      } else {
        const int64_t b = st.dst.count * static_cast<int64_t>(esize);
        counters.peers[st.peer].bytes_recv += b;
        counters.peers[st.peer].msgs_recv += 1;
        op_bytes_from[st.peer] += b;
        last_progress = clock.Now();
      }
      if (st.kind == StepKind::kSend && outstanding == 0) last_progress = clock.Now();
      if (failure.ok()) release(i);
    }
    if (!failure.ok()) break;
    drain_work();
    if (completed == n) break;

    const TimePoint now = clock.Now();
    // Bytes still streaming in count as progress.
    for (int q = 0; q < p; ++q) {
      uint64_t b = transport->BytesReceivedFrom(q);
      if (b != progress_mark[q]) {
        progress_mark[q] = b;
        last_progress = now;
      }
    }
    if (!options.total_deadline.infinite() && now >= options.total_deadline.when()) {
      failure = DeadlineExceededError(ctx.name + " on rank " + std::to_string(self) +
                                      " exceeded its operation deadline after " +
                                      FormatDuration(now - start_time));
      break;
    }
    if (now - last_progress >= options.progress_timeout) {
      // Name the receive that has waited longest (the peer this rank depends on).
      int oldest = -1;
      for (int i = 0; i < n; ++i) {
        if (pending[i] && steps[i].kind == StepKind::kRecv &&
            (oldest < 0 || issued_at[i] < issued_at[oldest])) {
          oldest = i;
        }
      }
      if (oldest < 0) {
        for (int i = 0; i < n; ++i) {
          if (pending[i] && (oldest < 0 || issued_at[i] < issued_at[oldest])) oldest = i;
        }
      }
      std::ostringstream os;
      os << ctx.name << " on rank " << self << ": no progress for "
         << FormatDuration(now - last_progress) << " (progress timeout "
         << FormatDuration(options.progress_timeout) << ", " << FormatDuration(now - start_time)
         << " into the operation)";
      if (oldest >= 0) {
        const int peer = steps[oldest].peer;
        os << ": waiting for " << transport->DescribePeer(peer) << " at " << describe_step(oldest)
           << "; received " << FormatBytes(op_bytes_from[peer]) << " from it in this operation";
      }
      int others = 0;
      for (int i = 0; i < n; ++i) others += (pending[i] && i != oldest) ? 1 : 0;
      if (others > 0) os << "; " << others << " more step(s) pending";
      os << "; " << completed << " of " << n << " steps done";
      failure = DeadlineExceededError(os.str());
      break;
    }
  }

  if (!failure.ok()) {
    transport->CancelOperation(
        ctx.seq, AbortedError(ctx.name + " was cancelled on rank " + std::to_string(self)));
    // Collect the cancelled completions (the transport delivers them during or right after
    // CancelOperation); bounded so a broken transport cannot hang us.
    const TimePoint give_up = clock.Now() + Seconds(10);
    while (outstanding > 0 && clock.Now() < give_up) {
      std::unique_lock<std::mutex> lock(queue->mu);
      queue->cv.wait_for(lock, Millis(50), [&] { return !queue->items.empty(); });
      outstanding -= static_cast<int>(queue->items.size());
      queue->items.clear();
    }
    return finish(failure);
  }
  if (spec.op == ReduceOp::kAvg && algo::IsReducing(spec.collective) && out_count > 0) {
    GYRE_RETURN_IF_ERROR(
        ScaleForAverage(spec.dtype, buffers.output, static_cast<size_t>(out_count), p));
  }
  return finish(Status::Ok());
}

}  // namespace gyre
