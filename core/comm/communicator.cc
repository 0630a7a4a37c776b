#include "core/comm/communicator.h"

#include <glog/logging.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/algo/builders.h"
#include "core/algo/verifier.h"
#include "core/base/file_io.h"

namespace gyre {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

namespace {

// FNV-1a over values as stored in memory: a digest for ranks of one build to compare.
class Digest {
 public:
  void Add(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h_ ^= static_cast<const unsigned char*>(p)[i];
      h_ *= 1099511628211ull;
    }
  }
  void Add(int64_t v) { Add(&v, sizeof v); }
  void Add(double d) {
    if (d == 0) d = 0;  // -0 and +0 choose alike
    Add(&d, sizeof d);
  }
  void Add(const std::string& s) {
    Add(static_cast<int64_t>(s.size()));
    Add(s.data(), s.size());
  }
  uint64_t value() const { return h_ | 1; }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

// A digest (never 0) of every figure of a model estimate: equal for two algorithms exactly
// when the model sees the same schedule under two names (OnlineTuner::Candidate).
uint64_t ShapeOf(const algo::Estimate& e) {
  Digest h;
  for (double d : {e.seconds, e.walk_s, e.overhead_s, e.throughput_s}) h.Add(&d, sizeof d);
  for (int64_t v : {e.rounds, e.max_msgs, e.max_bytes, e.max_reduced_bytes}) h.Add(v);
  return h.value();
}

}  // namespace

std::string FormatOpDesc(const OpDesc& d) {
  if (d.collective == kPointToPointDesc) {
    return "send/recv(count=" + std::to_string(d.count) + ", " +
           (IsValidDataType(d.dtype) ? DataTypeName(static_cast<DataType>(d.dtype)) : "?") +
           ", from rank " + std::to_string(d.root) + ")";
  }
  if (d.collective == static_cast<uint8_t>(Collective::kAlltoall) &&
      d.root == algo::kClosingExchangeRoot) {
    return "Comm::Close (its closing exchange of one byte per rank)";
  }
  if (d.collective == static_cast<uint8_t>(Collective::kAllreduce) &&
      d.root == algo::kTuningAgreementRoot) {
    return "the online tuner's agreement (an allreduce of " + std::to_string(d.count) +
           " int64 sums)";
  }
  std::string s = std::string(algo::CollectiveName(static_cast<Collective>(d.collective))) +
                  "(count=" + std::to_string(d.count) + ", " +
                  (IsValidDataType(d.dtype) ? DataTypeName(static_cast<DataType>(d.dtype)) : "?");
  if (algo::IsReducing(static_cast<Collective>(d.collective))) {
    s += std::string(", ") +
         (IsValidReduceOp(d.reduce_op) ? ReduceOpName(static_cast<ReduceOp>(d.reduce_op)) : "?");
  }
  Collective c = static_cast<Collective>(d.collective);
  if (c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
      c == Collective::kScatter) {
    s += ", root=" + std::to_string(d.root);
  }
  s += std::string(", algo=") + algo::AlgorithmName(static_cast<Algorithm>(d.algorithm)) + ")";
  return s;
}

OpDesc MakeOpDesc(const CollectiveSpec& spec) {
  OpDesc d;
  d.collective = static_cast<uint8_t>(spec.collective);
  d.dtype = static_cast<uint8_t>(spec.dtype);
  d.reduce_op = algo::IsReducing(spec.collective) ? static_cast<uint8_t>(spec.op) : 0;
  d.algorithm = static_cast<uint8_t>(spec.algorithm);
  d.root = spec.root;
  d.count = spec.count;
  return d;
}

namespace {

// The transport's advice on a message over its size cap (DescribeOversizeRemedy).
std::string FormatOversizeRemedy(const OpDesc& d) {
  if (d.collective == kPointToPointDesc) {
    return "send/recv sends each message in one piece: send less per call";
  }
  if (d.collective >= algo::kNumCollectives || d.algorithm >= algo::kNumAlgorithms) {
    return "the operation sends a message of that size in one piece";
  }
  return algo::OversizeMessageRemedy(static_cast<Collective>(d.collective),
                                     static_cast<Algorithm>(d.algorithm));
}

// "1st", "2nd", "3rd", "11th", "22nd".
std::string Ordinal(uint64_t n) {
  const uint64_t last_two = n % 100;
  const char* suffix = "th";
  if (last_two < 11 || last_two > 13) {
    if (n % 10 == 1) suffix = "st";
    if (n % 10 == 2) suffix = "nd";
    if (n % 10 == 3) suffix = "rd";
  }
  return std::to_string(n) + suffix;
}

// The transport's seq/tag text (DescribeSeqTag): a point-to-point message's fields as
// PointToPointSeq packs them (its number counts the pair's messages with that tag, from 0, so
// it is said as an ordinal of that tag: "message 0 with tag 63" read as a count of all); a
// collective's step as its schedule names it.
std::string FormatSeqTag(uint64_t seq, uint64_t tag) {
  if ((seq >> 63) != 0) {
    return "point-to-point message from rank " + std::to_string((seq >> 51) & 0xfff) + " to rank " +
           std::to_string((seq >> 39) & 0xfff) + " with tag " +
           std::to_string((seq >> 23) & 0xffff) + " (the " +
           Ordinal((seq & ((uint64_t{1} << 23) - 1)) + 1) + " with that tag)";
  }
  return "seq " + std::to_string(seq) + ", step " + algo::FormatTag(tag);
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Transport> transport, CommOptions options)
    : transport_(std::move(transport)), options_(options), monitor_(&transport_->clock()) {
  SetOpDescFormatter(&FormatOpDesc);
  SetSeqTagFormatter(&FormatSeqTag);
  SetOversizeRemedyFormatter(&FormatOversizeRemedy);
  if (!options_.trace_jsonl.empty()) {
    StatusOr<std::FILE*> trace = OpenForAppend(options_.trace_jsonl);
    if (trace.ok()) {
      trace_ = *trace;
    } else {
      LOG(WARNING) << "rank " << rank() << ": --trace_jsonl " << trace.status().message()
                   << "; no trace is written";
    }
  }
  std::string calibration = options_.calibration_file;
  if (calibration.empty() && std::getenv("GYRE_CALIBRATION") != nullptr) {
    calibration = std::getenv("GYRE_CALIBRATION");
  }
  StatusOr<algo::MachineModel> model =
      calibration.empty() ? algo::DefaultMachineModel() : algo::ReadMachineModel(calibration);
  selector_status_ = model.status();
  selector_ = std::make_shared<algo::ModelSelector>(model.ok() ? *model : algo::MachineModel());

  // What Resolve's automatic choice reads, as it reads it.
  Digest across;
  if (options_.thresholds) {
    const algo::SelectionThresholds& t = *options_.thresholds;
    across.Add(std::string("thresholds"));
    for (int64_t v : {t.allreduce_small_bytes, t.allreduce_large_bytes, t.broadcast_large_bytes,
                      t.allgather_small_bytes, t.hierarchical_min_bytes}) {
      across.Add(v);
    }
    choice_basis_.source = "fixed selection thresholds";
  } else if (!selector_status_.ok()) {
    // Every automatic call fails with this error: alike on ranks that share it.
    across.Add(std::string("unusable"));
    across.Add(selector_status_.message());
    choice_basis_.source = "an unusable calibration: " + selector_status_.message();
  } else {
    // Across hosts the selector's own thresholds decide, the same in every build.
    across.Add(std::string("model"));
    const algo::MachineModel& m = selector_->model();
    choice_basis_.source = m.source == "built-in" ? "the built-in one, no calibration file"
                                                  : "calibration file " + m.source;
    if (options_.tune) choice_basis_.source += ", online tuning";
  }
  Digest one_host = across;
  if (!options_.thresholds && selector_status_.ok() && size() <= algo::kMaxModelRanks) {
    // On one host the model's figures at this world size decide, and tuning moves the choice
    // (and adds agreement calls to the sequence).
    const algo::MachineModel& m = selector_->model();
    const algo::MachinePoint q = m.At(size());
    one_host.Add(static_cast<int64_t>(m.cores));
    for (double d :
         {q.alpha_s, q.overhead_s, q.beta_s_per_byte, q.gamma_s_per_byte, q.delta_s_per_byte,
          q.beta_all_s_per_byte, q.gamma_all_s_per_byte, q.delta_all_s_per_byte}) {
      one_host.Add(d);
    }
    one_host.Add(static_cast<int64_t>(options_.tune));
  }
  choice_basis_.one_host = one_host.value();
  choice_basis_.across_hosts = across.value();
}

Communicator::~Communicator() {
  if (trace_ == nullptr) return;
  errno = 0;
  if (std::fclose(trace_) != 0 && trace_lost_ == 0) ++trace_lost_;
  if (trace_lost_ > 0) {
    LOG(WARNING) << "rank " << rank() << ": --trace_jsonl " << options_.trace_jsonl << ": "
                 << trace_lost_ << " of " << trace_records_
                 << " records could not be written; the trace is incomplete";
  }
}

void Communicator::WriteTraceLine(const std::string& line) {
  // The trace is a record of the calls, not part of them: a write that fails (a full disk)
  // is reported, first at once and then as a count when the communicator closes, and the
  // calls go on.
  ++trace_records_;
  errno = 0;
  const bool written = std::fputs(line.c_str(), trace_) >= 0 && std::fflush(trace_) == 0;
  if (written) return;
  if (trace_lost_++ == 0) {
    LOG(WARNING) << "rank " << rank() << ": --trace_jsonl " << options_.trace_jsonl
                 << ": cannot write a record"
                 << (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string())
                 << "; the records lost are counted when the job ends";
  }
  std::clearerr(trace_);
}

StatusOr<CollectiveSpec> Communicator::Resolve(CollectiveSpec spec, const CallOptions& opts) const {
  spec.world_size = size();
  if (opts.algorithm != Algorithm::kAuto) spec.algorithm = opts.algorithm;
  const bool det = opts.deterministic >= 0 ? opts.deterministic != 0 : options_.deterministic;
  spec.deterministic = det && algo::IsReducing(spec.collective);
  const int64_t seg_bytes = opts.segment_bytes >= 0 ? opts.segment_bytes : options_.segment_bytes;
  if (spec.segment_elems == 0 && seg_bytes > 0) {
    spec.segment_elems =
        std::max<int64_t>(1, seg_bytes / static_cast<int64_t>(DataTypeSize(spec.dtype)));
  }
  GYRE_RETURN_IF_ERROR(algo::ValidateSpec(spec));
  spec.segment_elems = algo::LargeCallSegmentElems(spec);
  if (spec.segment_elems > 0 && spec.count / spec.segment_elems >= kMaxSegmentsPerCall) {
    spec.segment_elems = (spec.count + kMaxSegmentsPerCall - 1) / kMaxSegmentsPerCall;
  }
  if (spec.deterministic) {
    spec.algorithm = Algorithm::kCanonical;
  } else if (spec.algorithm == Algorithm::kAuto) {
    CollectiveSpec shaped = spec;
    if (shaped.local_size == 0) shaped.local_size = options_.local_size;
    if (options_.thresholds) {
      spec.algorithm = algo::SelectAlgorithm(shaped, *options_.thresholds);
      if (spec.algorithm == Algorithm::kHierarchical) spec.local_size = shaped.local_size;
    } else {
      GYRE_RETURN_IF_ERROR(selector_status_);
      spec = selector_->Choose(shaped);
    }
  }
  return spec;
}

StatusOr<std::shared_ptr<const algo::RankSchedule>> Communicator::GetSchedule(
    const CollectiveSpec& spec) {
  CacheKey key{static_cast<int>(spec.collective),
               static_cast<int>(spec.algorithm),
               spec.count,
               static_cast<int>(spec.dtype),
               static_cast<int>(spec.op),
               spec.root,
               spec.segment_elems,
               spec.deterministic,
               spec.grid_rows,
               spec.local_size};
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  std::shared_ptr<const algo::RankSchedule> mine;
  if (options_.verify_schedules && size() <= options_.verify_max_ranks) {
    GYRE_ASSIGN_OR_RETURN(algo::Schedule all, algo::BuildSchedule(spec));
    Status v = algo::VerifySchedule(all);
    if (!v.ok()) return InternalError("schedule failed verification: " + v.message());
    ++schedules_verified_;
    mine = std::make_shared<algo::RankSchedule>(std::move(all.ranks[rank()]));
  } else {
    GYRE_ASSIGN_OR_RETURN(algo::RankSchedule rs, algo::BuildRankSchedule(spec, rank()));
    mine = std::make_shared<algo::RankSchedule>(std::move(rs));
  }
  if (cache_.size() > 256) cache_.clear();
  cache_[key] = mine;
  return mine;
}

bool Communicator::Tunes(const CollectiveSpec& asked, const CallOptions& opts,
                         const CollectiveSpec& resolved) const {
  CollectiveSpec shaped = resolved;
  if (shaped.local_size == 0) shaped.local_size = options_.local_size;
  return options_.tune && !options_.thresholds && selector_status_.ok() && size() > 1 &&
         asked.algorithm == Algorithm::kAuto && opts.algorithm == Algorithm::kAuto &&
         !resolved.deterministic && !algo::SpansHosts(shaped) && size() <= algo::kMaxModelRanks &&
         resolved.count >=
             OnlineTuner::kMinBytes / static_cast<int64_t>(DataTypeSize(resolved.dtype));
}

StatusOr<CollectiveSpec> Communicator::Tune(CollectiveSpec spec, const CallOptions& opts,
                                            int* trial) {
  // The model's ranking at the bucket's count, as ModelSelector decides.
  auto rank_candidates = [&] {
    CollectiveSpec s = spec;
    s.count = algo::ModelSelector::BucketCount(spec.count);
    s.root = 0;
    std::vector<OnlineTuner::Candidate> out;
    for (const algo::Estimate& e : algo::RankCandidates(s, selector_->model())) {
      out.push_back({e.algorithm, e.seconds, ShapeOf(e)});
    }
    return out;
  };
  OnlineTuner::Plan plan = tuner_.Next(spec, rank_candidates);
  if (!plan.agree.empty()) {
    // Every rank reaches this call with its trials over (they move with calls alone): sum
    // the ranks' figures. The agreement is internal: counted in total_counters() and the
    // flight recorder, not in the metrics or the trace, which list the program's calls.
    std::vector<int64_t> sums(plan.agree.size());
    CollectiveSpec sum =
        algo::MakeSpec(Collective::kAllreduce, static_cast<int64_t>(plan.agree.size()),
                       DataType::kInt64, ReduceOp::kSum, 0);
    sum.world_size = size();
    sum = selector_->Choose(sum);
    sum.root = algo::kTuningAgreementRoot;
    const uint64_t seq = next_seq_++;
    const TimePoint start = transport_->clock().Now();
    OpCounters counters;
    auto schedule = GetSchedule(sum);
    Status st = schedule.status();
    if (st.ok()) {
      st = Execute(**schedule, sum, plan.agree.data(), sums.data(), opts, seq, &counters);
      total_.Add(counters);
      if (!st.ok() && failure_handler_) {
        st = failure_handler_(OpResult{seq, sum, counters, transport_->clock().Now() - start, st});
      }
      recorder_.Record("op_end", seq, st.ok() ? "ok" : st.ToString());
    }
    if (!st.ok()) {
      tuner_.AgreementFailed(spec);  // no second agreement: the model's choice from now on
      return st.WithContext("agreeing on the tuned algorithm for " +
                            std::string(algo::CollectiveName(spec.collective)) + " of " +
                            std::to_string(spec.count) + " elements");
    }
    tuner_.Agreed(spec, sums);
    recorder_.Record("tuned", seq, tuner_.Describe(spec));
    plan = tuner_.Next(spec, rank_candidates);
  }
  spec.algorithm = plan.algorithm;
  *trial = plan.trial;
  return spec;
}

Status Communicator::Execute(const algo::RankSchedule& schedule, const CollectiveSpec& spec,
                             const void* in, void* out, const CallOptions& opts, uint64_t seq,
                             OpCounters* counters) {
  OpContext ctx;  // named from desc and seq only if something prints it
  ctx.seq = seq;
  ctx.desc = MakeOpDesc(spec);
  ExecOptions eo;
  eo.progress_timeout = opts.timeout > Duration::zero() ? opts.timeout : options_.timeout;
  eo.total_deadline = opts.deadline;
  eo.monitor = &monitor_;
  recorder_.RecordOp("op_start", seq, ctx.desc);
  return executor_.Run(schedule, spec, ctx, OpBuffers{in, out}, transport_.get(), eo, counters);
}

Status Communicator::Run(CollectiveSpec spec, const void* in, void* out, const CallOptions& opts) {
  std::lock_guard<std::mutex> lock(mu_);
  auto resolved = Resolve(spec, opts);
  int trial = -1;
  Algorithm model_pick = Algorithm::kAuto;
  if (resolved.ok() && Tunes(spec, opts, *resolved)) {
    model_pick = resolved->algorithm;
    StatusOr<CollectiveSpec> tuned = Tune(*resolved, opts, &trial);
    if (!tuned.ok()) {
      // The agreement ran in this call's place, under a seq of its own, and failed: the call
      // fails with it and takes no other. A rank whose trials were given up (a failure only
      // it saw) made this call there instead; taking a second seq here would leave the ranks
      // a call apart from then on.
      last_.status = tuned.status();
      return tuned.status();
    }
    resolved = std::move(tuned);
  }
  const uint64_t seq = next_seq_++;
  const TimePoint start = transport_->clock().Now();
  if (!resolved.ok()) {
    return RefuseLocked(
        seq, spec,
        resolved.status().WithContext(std::string(algo::CollectiveName(spec.collective)) + " seq=" +
                                      std::to_string(seq) + " on rank " + std::to_string(rank())));
  }
  spec = *resolved;
  const OpDesc desc = MakeOpDesc(spec);
  // A message left over from an earlier call that this rank made differently from its
  // sender: that call returned here before the message came (a broadcast root with another
  // root, say), so its result may be wrong; this call says so rather than passing silently.
  if (std::optional<std::string> diverged = EarlierDivergence(seq)) {
    if (trial >= 0) tuner_.Record(spec, trial, Duration::zero(), false);
    return RefuseLocked(seq, spec,
                        InvalidArgumentError(OpName(desc, seq) + " on rank " +
                                             std::to_string(rank()) + ": not run: " + *diverged));
  }
  const int64_t in_count = algo::InputCount(spec, rank());
  const int64_t out_count = algo::OutputCount(spec, rank());
  if ((in_count > 0 && in == nullptr) || (out_count > 0 && out == nullptr)) {
    Status s = InvalidArgumentError(
        OpName(desc, seq) + " on rank " + std::to_string(rank()) + ": the " +
        (in_count > 0 && in == nullptr ? "input" : "output") + " buffer is null but must hold " +
        std::to_string(in_count > 0 && in == nullptr ? in_count : out_count) + " elements");
    // The trial counts as made (and failed), so this rank's bucket moves with the others'.
    if (trial >= 0) tuner_.Record(spec, trial, Duration::zero(), false);
    return RefuseLocked(seq, spec, s);
  }
  if (Status overlap = algo::CheckBufferOverlap(spec, rank(), in, out); !overlap.ok()) {
    if (trial >= 0) tuner_.Record(spec, trial, Duration::zero(), false);
    return RefuseLocked(
        seq, spec, overlap.WithContext(OpName(desc, seq) + " on rank " + std::to_string(rank())));
  }
  auto schedule = GetSchedule(spec);
  if (!schedule.ok() && trial >= 0) {
    // A candidate that cannot run this count (the model ranked the bucket's count): the
    // trial counts as failed, which keeps the model's choice for the bucket at the
    // agreement, and this call runs the model's choice now.
    tuner_.Record(spec, trial, Duration::zero(), false);
    trial = -1;
    spec.algorithm = model_pick;
    schedule = GetSchedule(spec);
  }
  if (!schedule.ok()) {
    last_ = OpResult{seq, spec, {}, {}, schedule.status()};
    tuner_.AbandonTrials("seq=" + std::to_string(seq) + " failed before its trials ended");
    return schedule.status();
  }
  // The counters live in last_ and are overwritten in place: no allocation per call.
  Status st = Execute(**schedule, spec, in, out, opts, seq, &last_.counters);
  total_.Add(last_.counters);
  last_.seq = seq;
  last_.spec = spec;
  last_.elapsed = transport_->clock().Now() - start;
  last_.status = st;
  if (trial >= 0) tuner_.Record(spec, trial, last_.elapsed, st.ok());
  // Such a message may also come while a later call runs: the call it came in says so.
  if (st.ok()) {
    if (std::optional<std::string> diverged = EarlierDivergence(seq + 1)) {
      st = InvalidArgumentError(OpName(desc, seq) + " on rank " + std::to_string(rank()) +
                                ": completed, but " + *diverged);
      last_.status = st;
      monitor_.End(seq, st);  // failed here: the verdict of a rank asking finds the divergence
    }
  }
  if (!st.ok()) {
    tuner_.AbandonTrials("seq=" + std::to_string(seq) + " failed before its trials ended");
    const Status own = st;  // before a verdict words it
    if (failure_handler_) {
      st = failure_handler_(last_);
      last_.status = st;
    }
    // Another rank found that an earlier call, completed here, diverged: this one then failed
    // as a consequence (the rank at fault left over it, say), and the divergence is what this
    // rank reports, as every other rank does, not the rank that went.
    if (std::optional<std::string> diverged = LateDivergence()) {
      st = InvalidArgumentError(OpName(desc, seq) + " on rank " + std::to_string(rank()) +
                                ": failed after " + *diverged +
                                "; this call's own error: " + own.message());
      last_.status = st;
    }
  }
  recorder_.Record("op_end", seq, st.ok() ? "ok" : st.ToString());
  metrics_.RecordOperation(algo::CollectiveName(spec.collective), st, last_.elapsed,
                           last_.counters.bytes_sent(), last_.counters.bytes_recv());
  if (trace_ != nullptr) {
    std::string line =
        "{\"rank\": " + std::to_string(rank()) + ", \"seq\": " + std::to_string(seq) +
        ", \"op\": \"" + algo::CollectiveName(spec.collective) + "\", \"algorithm\": \"" +
        algo::AlgorithmName(spec.algorithm) + "\", \"count\": " + std::to_string(spec.count) +
        ", \"dtype\": \"" + DataTypeName(spec.dtype) + "\", \"bytes\": " +
        std::to_string(spec.count * static_cast<int64_t>(DataTypeSize(spec.dtype))) +
        ", \"duration_us\": " +
        std::to_string(std::chrono::duration<double, std::micro>(last_.elapsed).count()) +
        ", \"status\": \"" + JsonEscape(st.ok() ? "ok" : st.ToString()) + "\", \"peers\": [";
    bool first = true;
    for (size_t q = 0; q < last_.counters.peers.size(); ++q) {
      const PeerCounters& pc = last_.counters.peers[q];
      if (pc.msgs_sent == 0 && pc.msgs_recv == 0) continue;
      line += std::string(first ? "" : ", ") + "{\"rank\": " + std::to_string(q) +
              ", \"bytes_sent\": " + std::to_string(pc.bytes_sent) +
              ", \"msgs_sent\": " + std::to_string(pc.msgs_sent) +
              ", \"bytes_recv\": " + std::to_string(pc.bytes_recv) +
              ", \"msgs_recv\": " + std::to_string(pc.msgs_recv) + "}";
      first = false;
    }
    line += "]}\n";
    WriteTraceLine(line);
  }
  return st;
}

Status Communicator::Refuse(CollectiveSpec spec, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  spec.world_size = size();
  const uint64_t seq = next_seq_++;
  return RefuseLocked(seq, spec,
                      why.WithContext(std::string(algo::CollectiveName(spec.collective)) + " seq=" +
                                      std::to_string(seq) + " on rank " + std::to_string(rank())));
}

std::optional<std::string> Communicator::LateDivergence() {
  auto late = monitor_.TakeLateDivergence();
  if (!late) return std::nullopt;
  return "the ranks' calls diverged at seq=" + std::to_string(late->first) +
         ", which completed on this rank before the difference was found: " +
         late->second.message() + " (this rank's result of seq=" + std::to_string(late->first) +
         " may be wrong)";
}

std::optional<std::string> Communicator::EarlierDivergence(uint64_t before) {
  // A message of another call is this rank's own evidence and comes first; a divergence that
  // another rank told about the same call is the same finding, and goes with it.
  std::optional<StaleMessage> stale = transport_->TakeStale(before);
  // A message of a call whose divergence this rank has reported already (another rank told
  // it, or an earlier message of it came) is no news: it made this rank refuse its next call
  // too, so a Close after the reported divergence failed here and passed on the others.
  while (stale && monitor_.DivergenceReported(stale->seq)) stale = transport_->TakeStale(before);
  const std::optional<OpDesc> mine = stale ? monitor_.CallAt(stale->seq) : std::optional<OpDesc>();
  // Without a stale message, or with one of the same call (left by a failure): what was told.
  if (!stale || (mine && *mine == stale->desc)) return LateDivergence();
  monitor_.DivergedHere(stale->seq);
  const std::string at = "seq=" + std::to_string(stale->seq);
  const std::string my_call = mine ? DescribeOpDesc(*mine) : std::string("something else");
  if (divergence_handler_) {
    divergence_handler_(
        stale->seq, "the ranks' calls diverged at " + at + ": rank " + std::to_string(rank()) +
                        " called " + my_call + " there, where rank " + std::to_string(stale->peer) +
                        " called " + DescribeOpDesc(stale->desc) + " (found by rank " +
                        std::to_string(rank()) + " when a message of that call came)");
  }
  return "the ranks' calls diverged at " + at + ": " + transport_->DescribePeer(stale->peer) +
         " sent a message of " + DescribeOpDesc(stale->desc) + " there, where this rank called " +
         my_call + "; this rank's result of " + at +
         " may be wrong (every rank must make the same calls in the same order)";
}

Status Communicator::RefuseLocked(uint64_t seq, const CollectiveSpec& spec, const Status& why) {
  last_ = OpResult{seq, spec, {}, {}, why};
  tuner_.AbandonTrials("seq=" + std::to_string(seq) + " was refused before its trials ended");
  const OpDesc desc = MakeOpDesc(spec);
  monitor_.Refused(seq, desc, OpName(desc, seq), why);
  recorder_.Record("op_end", seq, why.ToString());
  // What the others send in this call is dropped (and not taken later for a divergence).
  transport_->CancelOperation(seq, why);
  if (refusal_handler_) refusal_handler_(seq, why);
  return why;
}

uint64_t PointToPointSeq(int sender, int receiver, int tag, uint64_t n) {
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(sender & 0xfff) << 51) |
         (static_cast<uint64_t>(receiver & 0xfff) << 39) |
         (static_cast<uint64_t>(tag & 0xffff) << 23) | (n & ((uint64_t{1} << 23) - 1));
}

Status Communicator::Send(const void* buf, int64_t count, DataType dtype, int peer, int tag,
                          const CallOptions& opts) {
  GYRE_ASSIGN_OR_RETURN(auto m, PostSend(buf, count, dtype, peer, tag));
  return WaitMessage(*m, opts);
}

Status Communicator::Recv(void* buf, int64_t count, DataType dtype, int peer, int tag,
                          const CallOptions& opts) {
  GYRE_ASSIGN_OR_RETURN(auto m, PostRecv(buf, count, dtype, peer, tag));
  return WaitMessage(*m, opts);
}

StatusOr<std::shared_ptr<PendingMessage>> Communicator::PostSend(const void* buf, int64_t count,
                                                                 DataType dtype, int peer,
                                                                 int tag) {
  return Post(true, const_cast<void*>(buf), count, dtype, peer, tag);
}

StatusOr<std::shared_ptr<PendingMessage>> Communicator::PostRecv(void* buf, int64_t count,
                                                                 DataType dtype, int peer,
                                                                 int tag) {
  return Post(false, buf, count, dtype, peer, tag);
}

StatusOr<std::shared_ptr<PendingMessage>> Communicator::Post(bool send, void* buf, int64_t count,
                                                             DataType dtype, int peer, int tag) {
  const int p = size();
  const bool dtype_ok = IsValidDataType(static_cast<int>(dtype));
  std::string name = std::string(send ? "send to rank " : "recv from rank ") +
                     std::to_string(peer) + " (tag " + std::to_string(tag) + ", " +
                     std::to_string(count) + " x " + (dtype_ok ? DataTypeName(dtype) : "?") +
                     ") on rank " + std::to_string(rank());
  auto invalid = [&](const std::string& why) { return InvalidArgumentError(name + ": " + why); };
  if (p > kMaxPointToPointRanks) {
    return invalid("send/recv supports jobs of up to " + std::to_string(kMaxPointToPointRanks) +
                   " ranks; this one has " + std::to_string(p));
  }
  if (peer < 0 || peer >= p) {
    return invalid("rank " + std::to_string(peer) + " is not in this job (world size " +
                   std::to_string(p) + ")");
  }
  if (peer == rank()) return invalid("a rank cannot send to or receive from itself");
  if (tag < 0 || tag > kMaxPointToPointTag) {
    return invalid("the tag must be in 0.." + std::to_string(kMaxPointToPointTag));
  }
  if (!dtype_ok) return invalid("unknown dtype");
  if (count < 0) return invalid("the count is negative");
  if (count > algo::kMaxCallBytes / static_cast<int64_t>(DataTypeSize(dtype))) {
    return invalid("the count passes the 2^60 bytes one call may span");
  }
  if (count > 0 && buf == nullptr) {
    return invalid("the buffer is null but must hold " + std::to_string(count) + " elements");
  }
  auto m = std::make_shared<PendingMessage>();
  m->send = send;
  m->peer = peer;
  m->tag = tag;
  m->bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  m->posted = m->last_progress = transport_->clock().Now();
  MessageHeader header;
  header.desc.collective = kPointToPointDesc;
  header.desc.dtype = static_cast<uint8_t>(dtype);
  header.desc.root = send ? rank() : peer;
  header.desc.count = count;
  {
    // Posting under the lock keeps the order of the message numbers that of the transport.
    std::lock_guard<std::mutex> lock(p2p_mu_);
    const auto& broken = send ? p2p_sends_broken_ : p2p_recvs_broken_;
    if (auto it = broken.find({peer, tag}); it != broken.end()) {
      return AbortedError(name + ": refused: " + it->second + "; the messages " +
                          (send ? "to" : "from") + " rank " + std::to_string(peer) + " under tag " +
                          std::to_string(tag) +
                          " can no longer be matched in order (a new Comm starts them afresh)");
    }
    uint64_t& n = (send ? p2p_sent_ : p2p_received_)[{peer, tag}];
    header.seq = PointToPointSeq(header.desc.root, send ? peer : rank(), tag, n);
    m->seq = header.seq;
    m->bytes_mark =
        send ? transport_->BytesSentTo(peer, m->seq) : transport_->BytesReceivedFrom(peer, m->seq);
    m->name = name + " #" + std::to_string(n);
    ++n;
    recorder_.Record(send ? "send_post" : "recv_post", m->seq, m->name);
    std::weak_ptr<PendingMessage> weak = m;
    auto done = [weak](Status s) {
      if (auto msg = weak.lock()) {
        std::lock_guard<std::mutex> l(msg->mu);
        if (msg->done) return;
        msg->done = true;
        msg->status = std::move(s);
        msg->cv.notify_all();
      }
    };
    if (send) {
      transport_->Send(peer, header, buf, static_cast<size_t>(m->bytes), std::move(done));
    } else {
      transport_->Recv(peer, header, buf, static_cast<size_t>(m->bytes), std::move(done));
    }
  }
  return m;
}

std::vector<MessageWait> Communicator::WaitingMessages(size_t max, size_t* total) const {
  const TimePoint now = transport_->clock().Now();
  std::vector<MessageWait> out;
  {
    std::lock_guard<std::mutex> lock(waits_mu_);
    for (const auto& [m, since] : waiting_) {
      out.push_back(MessageWait{m->name, m->peer, m->send, now - since});
    }
  }
  if (total != nullptr) *total = out.size();
  std::stable_sort(out.begin(), out.end(),
                   [](const MessageWait& a, const MessageWait& b) { return a.waited > b.waited; });
  if (out.size() > max) out.resize(max);
  return out;
}

Status Communicator::WaitMessage(PendingMessage& m, const CallOptions& opts, Deadline return_by) {
  const Clock& clock = transport_->clock();
  TimePoint began;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.wait_began) m.wait_began = clock.Now();
    began = *m.wait_began;
  }
  // Listed while this thread waits, for the control path (WaitingMessages).
  struct Listed {
    Communicator* comm;
    const PendingMessage* m;
    Listed(Communicator* c, const PendingMessage* pm, TimePoint since) : comm(c), m(pm) {
      std::lock_guard<std::mutex> lock(comm->waits_mu_);
      comm->waiting_.emplace_back(m, since);
    }
    ~Listed() {
      std::lock_guard<std::mutex> lock(comm->waits_mu_);
      comm->waiting_.erase(std::find_if(comm->waiting_.begin(), comm->waiting_.end(),
                                        [this](const auto& w) { return w.first == m; }));
    }
  } listed(this, &m, began);
  const Duration timeout = opts.timeout > Duration::zero() ? opts.timeout : options_.timeout;
  Status st;
  {
    std::unique_lock<std::mutex> lock(m.mu);
    while (!m.done) {
      const TimePoint now = clock.Now();
      // Bytes of this message still streaming in from the peer (or out to it, for a send)
      // are progress, as in a collective; other messages between the two are not.
      const uint64_t got = m.send ? transport_->BytesSentTo(m.peer, m.seq)
                                  : transport_->BytesReceivedFrom(m.peer, m.seq);
      if (got != m.bytes_mark) {
        m.bytes_mark = got;
        m.last_progress = now;
      }
      // Not counting the time this process was stopped (OpMonitor::ProgressDue).
      const TimePoint due = monitor_.ProgressDue(m.last_progress, timeout, now);
      const bool stalled = now >= due;
      if (stalled || opts.deadline.Expired(clock)) {
        std::string why =
            m.name + ": " +
            (stalled ? "no progress for " + FormatDuration(timeout) + " (the progress timeout)"
                     : std::string("the operation deadline passed")) +
            ": waiting for " + transport_->DescribePeer(m.peer) + ", " + FormatBytes(m.bytes) +
            " under tag " + std::to_string(m.tag) +
            (m.send ? "; its transport did not take the bytes"
                    : "; no matching message came from it (same tag, same order)");
        lock.unlock();
        auto& broken = m.send ? p2p_sends_broken_ : p2p_recvs_broken_;
        bool marked = false;
        {
          // Its number is taken: the message the other side sends under it is dropped when it
          // comes, and the next post here would be matched with the one after it. Marked
          // before the cancel, so that no post can come between them unrefused.
          std::lock_guard<std::mutex> p2p(p2p_mu_);
          marked = broken
                       .emplace(std::make_pair(m.peer, m.tag),
                                m.name + " gave up (" +
                                    (stalled ? "no progress" : "its deadline passed") +
                                    ") after its message number was taken")
                       .second;
        }
        // The transport completes the message with this reason and lets go of its buffer.
        transport_->CancelOperation(m.seq, DeadlineExceededError(why));
        lock.lock();
        if (!m.done) {
          m.done = true;
          m.status = DeadlineExceededError(why);
        } else if (m.status.ok() && marked) {
          // It completed just before the cancel: nothing was lost, so nothing is refused.
          lock.unlock();
          {
            std::lock_guard<std::mutex> p2p(p2p_mu_);
            broken.erase(std::make_pair(m.peer, m.tag));
          }
          lock.lock();
        }
        break;
      }
      if (return_by.Expired(clock)) {
        return DeadlineExceededError(m.name + ": not finished by the caller's deadline");
      }
      TimePoint until = std::min(due, now + Millis(50));
      if (!opts.deadline.infinite()) until = std::min(until, opts.deadline.when());
      if (!return_by.infinite()) until = std::min(until, return_by.when());
      m.cv.wait_for(lock, std::max<Duration>(until - now, Duration::zero()));
    }
    st = m.status;
    if (m.accounted) return st;
    m.accounted = true;
  }
  if (!st.ok() && st.message().find(m.name) == std::string::npos) st = st.WithContext(m.name);
  {
    std::lock_guard<std::mutex> lock(mu_);
    OpCounters counters;
    counters.peers.assign(size(), PeerCounters{});
    if (st.ok()) {
      PeerCounters& pc = counters.peers[m.peer];
      (m.send ? pc.bytes_sent : pc.bytes_recv) = m.bytes;
      (m.send ? pc.msgs_sent : pc.msgs_recv) = 1;
    }
    total_.Add(counters);
    CollectiveSpec spec;
    spec.world_size = size();
    spec.algorithm = Algorithm::kDirect;
    last_ = OpResult{m.seq, spec, std::move(counters), clock.Now() - m.posted, st};
    recorder_.Record(m.send ? "send_end" : "recv_end", m.seq, st.ok() ? "ok" : st.ToString());
    metrics_.RecordOperation(m.send ? "send" : "recv", st, last_.elapsed,
                             m.send && st.ok() ? m.bytes : 0, !m.send && st.ok() ? m.bytes : 0);
  }
  std::lock_guard<std::mutex> lock(m.mu);
  m.status = st;
  return st;
}

Status Communicator::Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                               ReduceOp op, const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kAllreduce, count, dtype, op, 0), in, out, opts);
}
Status Communicator::Broadcast(const void* in, void* out, int64_t count, DataType dtype, int root,
                               const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kBroadcast, count, dtype, ReduceOp::kSum, root), in, out,
             opts);
}
Status Communicator::Reduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                            int root, const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kReduce, count, dtype, op, root), in, out, opts);
}
Status Communicator::Allgather(const void* in, void* out, int64_t count, DataType dtype,
                               const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kAllgather, count, dtype, ReduceOp::kSum, 0), in, out,
             opts);
}
Status Communicator::ReduceScatter(const void* in, void* out, int64_t count, DataType dtype,
                                   ReduceOp op, const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kReduceScatter, count, dtype, op, 0), in, out, opts);
}
Status Communicator::Alltoall(const void* in, void* out, int64_t count, DataType dtype,
                              const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kAlltoall, count, dtype, ReduceOp::kSum, 0), in, out, opts);
}
Status Communicator::Gather(const void* in, void* out, int64_t count, DataType dtype, int root,
                            const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kGather, count, dtype, ReduceOp::kSum, root), in, out,
             opts);
}
Status Communicator::Scatter(const void* in, void* out, int64_t count, DataType dtype, int root,
                             const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kScatter, count, dtype, ReduceOp::kSum, root), in, out,
             opts);
}
Status Communicator::Barrier(const CallOptions& opts) {
  return Run(algo::MakeSpec(Collective::kBarrier, 0, DataType::kUint8, ReduceOp::kSum, 0), nullptr,
             nullptr, opts);
}

}  // namespace gyre
