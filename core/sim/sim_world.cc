#include "core/sim/sim_world.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>
#include <tuple>

namespace gyre::sim {

bool SimWorld::StepKey::operator<(const StepKey& o) const {
  return std::tie(tag, peer, kind) < std::tie(o.tag, o.peer, o.kind);
}

std::string SimTransport::DescribePeer(int peer) const {
  const Network& net = *world_->network_;
  return "rank " + std::to_string(peer) + " (device " + std::to_string(net.mapping()[peer]) +
         " of " + net.topology().name() + ")";
}

SimWorld::SimWorld(Network* network, int world_size, SimWorldOptions options)
    : network_(network), options_(options) {
  endpoints_.resize(world_size);
  info_.resize(world_size);
  dirty_.assign(world_size, 0);
  for (int r = 0; r < world_size; ++r) {
    transports_.push_back(std::unique_ptr<SimTransport>(new SimTransport(this, r)));
  }
  if (options_.byte_scale < 1) options_.byte_scale = 1;
}

SimWorld::~SimWorld() = default;

Transport* SimWorld::transport(int rank) { return transports_[rank].get(); }

void SimWorld::SetSchedule(int rank, const algo::RankSchedule* schedule, size_t elem_bytes) {
  RankInfo& info = info_[rank];
  info.schedule = schedule;
  info.elem_bytes = elem_bytes;
  info.steps.clear();
  const auto& steps = schedule->steps;
  info.reduce_elems.assign(steps.size(), 0);
  info.depth.assign(steps.size(), -1);
  info.dep_begin.assign(1, 0);
  info.deps.clear();
  endpoints_[rank].slots.assign(steps.size(), Slot{});
  for (size_t i = 0; i < steps.size(); ++i) {
    const algo::Step& st = steps[i];
    info.deps.insert(info.deps.end(), st.deps.begin(), st.deps.end());
    info.dep_begin.push_back(static_cast<int32_t>(info.deps.size()));
    if (st.kind == algo::StepKind::kSend || st.kind == algo::StepKind::kRecv) {
      info.steps.push_back(StepKey{st.tag, st.peer, st.kind == algo::StepKind::kSend ? 0 : 1,
                                   static_cast<int32_t>(i)});
    } else if (st.kind == algo::StepKind::kReduce) {
      for (int32_t d : st.deps) {
        if (steps[d].kind == algo::StepKind::kRecv) info.reduce_elems[d] += st.dst.count;
      }
    }
  }
  std::sort(info.steps.begin(), info.steps.end());
}

int SimWorld::FindStep(int rank, int peer, uint64_t tag, int kind) const {
  const RankInfo& info = info_[rank];
  if (info.schedule == nullptr) return -1;
  const StepKey want{tag, peer, kind, 0};
  auto it = std::lower_bound(info.steps.begin(), info.steps.end(), want);
  if (it == info.steps.end() || it->tag != tag || it->peer != peer || it->kind != kind) return -1;
  return it->step;
}

int SimWorld::DepsDepth(int rank, int step) {
  const RankInfo& info = info_[rank];
  int d = 0;
  for (int32_t k = info.dep_begin[step]; k < info.dep_begin[step + 1]; ++k) {
    d = std::max(d, Depth(rank, info.deps[k]));
  }
  return d;
}

int SimWorld::Depth(int rank, int step) {
  RankInfo& info = info_[rank];
  if (info.depth[step] >= 0) return info.depth[step];
  // A reduction or copy (or a step not timed here) is as deep as its deepest input.
  const int d = DepsDepth(rank, step);
  info.depth[step] = d;
  return d;
}

int SimWorld::NewMessage() {
  int id;
  if (!free_messages_.empty()) {
    id = free_messages_.back();
    free_messages_.pop_back();
  } else {
    id = static_cast<int>(messages_pool_.size());
    messages_pool_.emplace_back();
  }
  Message& m = messages_pool_[id];
  m.live = true;
  m.refs = 2;
  m.has_payload = false;
  m.payload.clear();
  m.send_done = nullptr;
  m.send_step = -1;
  m.depth = 0;
  return id;
}

void SimWorld::Release(int id) {
  Message& m = messages_pool_[id];
  if (--m.refs > 0) return;
  m.live = false;
  m.payload.clear();
  m.send_done = nullptr;
  free_messages_.push_back(id);
}

void SimWorld::Push(int64_t time, EventKind kind, int id) {
  queue_.push(Event{time, order_++, kind, id});
}

void SimWorld::MarkDirty(int rank) {
  if (dirty_[rank]) return;
  dirty_[rank] = 1;
  dirty_list_.push_back(rank);
}

void SimWorld::Complete(int rank, DoneCallback done, Status status) {
  if (done) done(std::move(status));
  MarkDirty(rank);
}

void SimWorld::Send(int rank, int peer, const MessageHeader& h, const void* data, size_t bytes,
                    DoneCallback done) {
  if (peer < 0 || peer >= size() || peer == rank) {
    Complete(
        rank, std::move(done),
        InvalidArgumentError("rank " + std::to_string(rank) + " cannot send to rank " +
                             std::to_string(peer) + " in a world of " + std::to_string(size())));
    return;
  }
  if (endpoints_[rank].closed) {
    Complete(rank, std::move(done),
             UnavailableError("rank " + std::to_string(rank) + " is shut down"));
    return;
  }
  const int id = NewMessage();
  Message& m = messages_pool_[id];
  m.src = rank;
  m.dst = peer;
  m.header = h;
  m.bytes = bytes;
  // The sender's buffer stays valid only until its completion, so the payload is taken now,
  // as a NIC would read it.
  if (data != nullptr && bytes > 0) {
    const auto* p = static_cast<const unsigned char*>(data);
    m.payload.assign(p, p + bytes);
    m.has_payload = true;
  }
  m.send_done = std::move(done);
  m.send_step = FindStep(rank, peer, h.tag, 0);
  pending_sends_.push_back(PendingSend{rank, m.send_step, order_++, id});
}

void SimWorld::Recv(int rank, int peer, const MessageHeader& h, void* data, size_t bytes,
                    DoneCallback done) {
  Endpoint& e = endpoints_[rank];
  if (e.closed) {
    Complete(rank, std::move(done),
             UnavailableError("rank " + std::to_string(rank) + " is shut down"));
    return;
  }
  PostedRecv r{data, bytes, h.desc, std::move(done), FindStep(rank, peer, h.tag, 1)};
  Slot* slot = r.step >= 0 ? &e.slots[r.step] : nullptr;
  if (slot != nullptr && slot->message >= 0 && messages_pool_[slot->message].header.seq == h.seq) {
    const int id = slot->message;
    slot->message = -1;
    Match(rank, id, std::move(r));
    return;
  }
  if (slot != nullptr && slot->message < 0 && !slot->has_recv && e.arrived.empty()) {
    slot->has_recv = true;
    slot->seq = h.seq;
    slot->recv = std::move(r);
    return;
  }
  const Key key{peer, h.seq, h.tag};
  auto it = e.arrived.find(key);
  if (it != e.arrived.end()) {
    const int id = it->second;
    e.arrived.erase(it);
    Match(rank, id, std::move(r));
    return;
  }
  e.posted.emplace(key, std::move(r));
}

// Sends that became ready at this instant take their links in step order per rank (ranks
// in order), which is the cost model's "sends are served in the order they become ready".
void SimWorld::FlushSends() {
  if (pending_sends_.empty()) return;
  std::vector<PendingSend> batch;
  batch.swap(pending_sends_);
  std::sort(batch.begin(), batch.end(), [](const PendingSend& a, const PendingSend& b) {
    const int sa = a.step < 0 ? INT_MAX : a.step;
    const int sb = b.step < 0 ? INT_MAX : b.step;
    return std::tie(a.rank, sa, a.order) < std::tie(b.rank, sb, b.order);
  });
  for (const PendingSend& ps : batch) {
    Message& m = messages_pool_[ps.message];
    if (!m.live) continue;
    if (ps.step >= 0) {
      m.depth = DepsDepth(ps.rank, ps.step);
      info_[ps.rank].depth[ps.step] = m.depth;
    }
    const int64_t timed = static_cast<int64_t>(m.bytes) * options_.byte_scale;
    network_->Start(m.src, m.dst, timed, now_ns_, &m.flight);
    ++messages_;
    const int hops = static_cast<int>(m.flight.path.size());
    hops_total_ += hops;
    hops_max_ = std::max(hops_max_, hops);
    Fly(ps.message);
    Push(m.flight.sent_ns, EventKind::kSendDone, ps.message);
  }
}

void SimWorld::Fly(int id) {
  Flight& f = messages_pool_[id].flight;
  if (network_->Advance(&f)) {
    Push(f.tail_in_ns, EventKind::kArrive, id);
  } else {
    Push(f.head_ns, EventKind::kHop, id);
  }
}

void SimWorld::Apply(const Event& ev) {
  switch (ev.kind) {
    case EventKind::kSendDone: {
      Message& m = messages_pool_[ev.id];
      if (m.send_done) {
        DoneCallback done = std::move(m.send_done);
        m.send_done = nullptr;
        Complete(m.src, std::move(done), Status::Ok());
      }
      Release(ev.id);
      break;
    }
    case EventKind::kHop:
      Fly(ev.id);
      break;
    case EventKind::kArrive:
      Deliver(ev.id);
      break;
    case EventKind::kRecvDone: {
      Completion c = std::move(completions_[ev.id]);
      completions_[ev.id] = Completion{};
      free_completions_.push_back(ev.id);
      if (c.done) Complete(c.rank, std::move(c.done), std::move(c.status));
      break;
    }
  }
}

void SimWorld::Deliver(int id) {
  Message& m = messages_pool_[id];
  Endpoint& e = endpoints_[m.dst];
  if (e.closed || e.cancelled.count(m.header.seq)) {
    Release(id);
    return;
  }
  e.bytes_from[m.src] += m.bytes;
  const int step = FindStep(m.dst, m.src, m.header.tag, 1);
  Slot* slot = step >= 0 ? &e.slots[step] : nullptr;
  if (slot != nullptr && slot->has_recv && slot->seq == m.header.seq) {
    PostedRecv r = std::move(slot->recv);
    slot->recv = PostedRecv{};
    slot->has_recv = false;
    Match(m.dst, id, std::move(r));
    return;
  }
  if (slot != nullptr && slot->message < 0 && !slot->has_recv && e.posted.empty()) {
    slot->message = id;
    return;
  }
  const Key key{m.src, m.header.seq, m.header.tag};
  auto it = e.posted.find(key);
  if (it == e.posted.end()) {
    e.arrived.emplace(key, id);
    return;
  }
  PostedRecv r = std::move(it->second);
  e.posted.erase(it);
  Match(m.dst, id, std::move(r));
}

void SimWorld::Match(int rank, int id, PostedRecv recv) {
  Message& m = messages_pool_[id];
  Status st;
  if (m.bytes != recv.bytes || m.header.desc != recv.desc) {
    std::ostringstream os;
    os << "rank " << rank << " expected " << recv.bytes << " bytes of " << DescribeOpDesc(recv.desc)
       << " from rank " << m.src << " (seq " << m.header.seq << ", tag " << m.header.tag
       << ") but rank " << m.src << " sent " << m.bytes << " bytes of "
       << DescribeOpDesc(m.header.desc);
    st = InvalidArgumentError(os.str());
  } else if (recv.data != nullptr && m.has_payload) {
    std::memcpy(recv.data, m.payload.data(), m.bytes);
  }
  RankInfo& info = info_[rank];
  if (info.schedule != nullptr && recv.step >= 0) {
    const int d = std::max(DepsDepth(rank, recv.step), m.depth + 1);
    info.depth[recv.step] = d;
    longest_chain_ = std::max<int64_t>(longest_chain_, d);
  }
  int64_t reduce_ns = 0;
  if (st.ok() && options_.reduce_bytes_per_s > 0 && recv.step >= 0) {
    const double bytes = static_cast<double>(info.reduce_elems[recv.step]) *
                         static_cast<double>(info.elem_bytes) *
                         static_cast<double>(options_.byte_scale);
    reduce_ns = static_cast<int64_t>(bytes / options_.reduce_bytes_per_s * 1e9 + 0.5);
  }
  const uint64_t seq = m.header.seq;
  Release(id);
  if (reduce_ns <= 0) {
    Complete(rank, std::move(recv.done), std::move(st));
    return;
  }
  // The rank's one reduction unit folds received data in arrival order.
  Endpoint& e = endpoints_[rank];
  const int64_t done_at = std::max(now_ns_, e.reduce_free_ns) + reduce_ns;
  e.reduce_free_ns = done_at;
  int slot;
  if (!free_completions_.empty()) {
    slot = free_completions_.back();
    free_completions_.pop_back();
  } else {
    slot = static_cast<int>(completions_.size());
    completions_.emplace_back();
  }
  completions_[slot] = Completion{rank, seq, std::move(recv.done), std::move(st)};
  Push(done_at, EventKind::kRecvDone, slot);
}

void SimWorld::CancelOperation(int rank, uint64_t seq, const Status& reason) {
  Endpoint& e = endpoints_[rank];
  e.cancelled.insert(seq);
  for (Slot& slot : e.slots) {
    if (slot.has_recv && slot.seq == seq) {
      DoneCallback done = std::move(slot.recv.done);
      slot.recv = PostedRecv{};
      slot.has_recv = false;
      Complete(rank, std::move(done), reason);
    }
    if (slot.message >= 0 && messages_pool_[slot.message].header.seq == seq) {
      Release(slot.message);
      slot.message = -1;
    }
  }
  for (auto it = e.posted.begin(); it != e.posted.end();) {
    if (it->first.seq == seq) {
      DoneCallback done = std::move(it->second.done);
      it = e.posted.erase(it);
      Complete(rank, std::move(done), reason);
    } else {
      ++it;
    }
  }
  for (auto it = e.arrived.begin(); it != e.arrived.end();) {
    if (it->first.seq == seq) {
      Release(it->second);
      it = e.arrived.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = pending_sends_.begin(); it != pending_sends_.end();) {
    Message& m = messages_pool_[it->message];
    if (it->rank == rank && m.header.seq == seq) {
      DoneCallback done = std::move(m.send_done);
      m.send_done = nullptr;
      const int id = it->message;
      it = pending_sends_.erase(it);
      Release(id);
      Release(id);
      Complete(rank, std::move(done), reason);
    } else {
      ++it;
    }
  }
  // Messages on the wire: the sender's buffer is released now; the bytes still arrive.
  for (Message& m : messages_pool_) {
    if (m.live && m.src == rank && m.header.seq == seq && m.send_done) {
      DoneCallback done = std::move(m.send_done);
      m.send_done = nullptr;
      Complete(rank, std::move(done), reason);
    }
  }
  for (Completion& c : completions_) {
    if (c.done && c.rank == rank && c.seq == seq) {
      DoneCallback done = std::move(c.done);
      c.done = nullptr;
      Complete(rank, std::move(done), reason);
    }
  }
}

void SimWorld::Shutdown(int rank) {
  Endpoint& e = endpoints_[rank];
  if (e.closed) return;
  std::unordered_set<uint64_t> seqs;
  for (const auto& [key, r] : e.posted) seqs.insert(key.seq);
  for (const Slot& slot : e.slots) {
    if (slot.has_recv) seqs.insert(slot.seq);
  }
  for (const PendingSend& ps : pending_sends_) {
    if (ps.rank == rank) seqs.insert(messages_pool_[ps.message].header.seq);
  }
  for (const Message& m : messages_pool_) {
    if (m.live && m.src == rank && m.send_done) seqs.insert(m.header.seq);
  }
  for (const Completion& c : completions_) {
    if (c.done && c.rank == rank) seqs.insert(c.seq);
  }
  const Status reason = UnavailableError("rank " + std::to_string(rank) + " shut down");
  for (uint64_t seq : seqs) CancelOperation(rank, seq, reason);
  e.closed = true;
}

uint64_t SimWorld::BytesReceivedFrom(int rank, int peer) const {
  const auto& from = endpoints_[rank].bytes_from;
  auto it = from.find(peer);
  return it == from.end() ? 0 : it->second;
}

Status SimWorld::Run(const std::vector<OpRun*>& runs, Deadline wall_deadline) {
  const int p = size();
  if (static_cast<int>(runs.size()) != p) {
    return InvalidArgumentError("SimWorld::Run got " + std::to_string(runs.size()) + " runs for " +
                                std::to_string(p) + " ranks");
  }
  const Clock& wall = *SteadyClock::Get();
  const TimePoint wall_start = wall.Now();
  for (int r = 0; r < p; ++r) runs[r]->Start();
  int64_t next_check = 0;
  std::vector<int> polling;
  while (true) {
    // Settle the instant: poll every rank something happened to (a poll may complete a
    // receive inline, which marks its rank again), then time the sends they issued.
    while (!dirty_list_.empty()) {
      polling.swap(dirty_list_);
      dirty_list_.clear();
      std::sort(polling.begin(), polling.end());
      for (int r : polling) dirty_[r] = 0;
      for (int r : polling) runs[r]->Poll();
      polling.clear();
    }
    FlushSends();
    if (queue_.empty()) break;
    const int64_t t = queue_.top().time;
    now_ns_ = t;
    clock_.Set(TimePoint(Duration(t)));
    while (!queue_.empty() && queue_.top().time == t) {
      const Event ev = queue_.top();
      queue_.pop();
      ++events_;
      Apply(ev);
    }
    if (events_ >= next_check) {
      next_check = events_ + 65536;
      if (wall_deadline.Expired(wall)) {
        return DeadlineExceededError("the simulation passed its wall-clock deadline after " +
                                     FormatDuration(wall.Now() - wall_start) + " at simulated " +
                                     FormatDuration(Duration(now_ns_)) + " (" +
                                     std::to_string(events_) + " events)");
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (runs[r]->finished() && !runs[r]->status().ok()) return runs[r]->status();
  }
  std::ostringstream stuck;
  int unfinished = 0;
  for (int r = 0; r < p; ++r) {
    if (runs[r]->finished()) continue;
    if (++unfinished <= 4) {
      const int step = runs[r]->OldestPendingStep();
      stuck << "; rank " << r << " has " << runs[r]->completed_steps() << " of "
            << runs[r]->total_steps() << " steps done"
            << (step >= 0 ? ", waiting at " + runs[r]->DescribeStep(step) : std::string());
    }
  }
  if (unfinished > 0) {
    return InternalError("the simulation ran out of events at " +
                         FormatDuration(Duration(now_ns_)) + " with " + std::to_string(unfinished) +
                         " of " + std::to_string(p) + " ranks unfinished" + stuck.str());
  }
  return Status::Ok();
}

}  // namespace gyre::sim
