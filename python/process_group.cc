#include "python/process_group.h"

#include <ATen/MemoryOverlap.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <thread>
#include <utility>

#include "python/c10d_store.h"

namespace gyre::python {
namespace {

namespace py = pybind11;

constexpr auto kWaitSlice = std::chrono::milliseconds(100);
std::atomic<bool> g_environment_taken{false};

// The thread Python delivers signals on; only there can a wait raise KeyboardInterrupt.
std::thread::id MainThread() {
  static const std::thread::id id = std::this_thread::get_id();
  return id;
}

void CheckSignals() {
  if (std::this_thread::get_id() != MainThread() || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// A c10d Work completed by gyre's completion callback.
class GyreWork final : public c10d::Work {
 public:
  GyreWork(int rank, c10d::OpType type, const char* what, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        what_(what),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  void Finish(const Status& s) {
    if (s.ok()) {
      finish();
      future_->markCompleted(c10::IValue(outputs_));
      return;
    }
    auto error = std::make_exception_ptr(StatusError(s, std::string("gyre ") + what_ + " failed"));
    finish(error);
    future_->setError(error);
  }

  // Like c10d's wait, but wakes every 100 ms so Ctrl-C reaches a waiting main thread.
  bool wait(std::chrono::milliseconds timeout) override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!completed_) {
        lock.unlock();
        TORCH_CHECK(!OnCallRunnerThread(), "gyre ", what_,
                    ": Work.wait on gyre's own worker thread, which runs (and completes) the "
                    "calls, would never return");
        // A future's callback waiting here: the completion it waits for comes behind it.
        Completions::HandOffCurrent();
      }
    }
    const bool bounded = timeout != kNoTimeout && timeout.count() > 0;
    const Deadline limit = bounded ? DeadlineAfter(timeout) : Deadline::Infinite();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!completed_) {
      cv_.wait_for(lock, kWaitSlice);
      if (completed_) break;
      lock.unlock();
      CheckSignals();
      TORCH_CHECK(!Expired(limit), "gyre ", what_, ": Work.wait timed out after ",
                  FormatTime(timeout));
      lock.lock();
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  const char* what_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

DataType GyreType(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "gyre does not support ", t.device().str(),
              " tensors (CPU only)");
  TORCH_CHECK(t.layout() == at::kStrided, "gyre does not support sparse tensors");
  switch (t.scalar_type()) {
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBfloat16;
    case at::kChar:
      return DataType::kInt8;
    case at::kByte:
    case at::kBool:
      return DataType::kUint8;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    default:
      TORCH_CHECK(false, "gyre does not support tensors of type ", t.scalar_type());
  }
}

// gyre's op for torch's, and the factor PREMUL_SUM multiplies by first.
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  bool premul = false;
  double factor = 1.0;
  at::Tensor factor_tensor;
};

Reduction ReductionOf(const c10d::ReduceOp& op, const at::Tensor& t) {
  Reduction r;
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      r.op = is_bool ? ReduceOp::kBor : ReduceOp::kSum;
      break;
    case c10d::ReduceOp::AVG:
      // Named as the caller's type: bool travels as uint8, whose name the refusal gave.
      TORCH_CHECK(!is_bool, "gyre: reduce op AVG is not defined on bool tensors (an average of ",
                  "truth values is not one)");
      r.op = ReduceOp::kAvg;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = is_bool ? ReduceOp::kBand : ReduceOp::kProd;
      break;
    case c10d::ReduceOp::MIN:
      r.op = is_bool ? ReduceOp::kBand : ReduceOp::kMin;
      break;
    case c10d::ReduceOp::MAX:
      r.op = is_bool ? ReduceOp::kBor : ReduceOp::kMax;
      break;
    case c10d::ReduceOp::BAND:
      r.op = ReduceOp::kBand;
      break;
    case c10d::ReduceOp::BOR:
      r.op = ReduceOp::kBor;
      break;
    case c10d::ReduceOp::BXOR:
      r.op = ReduceOp::kBxor;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s != nullptr, "gyre: PREMUL_SUM without its factor");
      r.op = ReduceOp::kSum;
      r.premul = true;
      r.factor = s->double_factor;
      if (!s->tensor_factors.empty()) r.factor_tensor = s->tensor_factors[0];
      break;
    }
    default:
      TORCH_CHECK(false, "gyre does not support reduce op ", static_cast<int>(op.op_));
  }
  return r;
}

// A tensor a call writes its result into needs a place per element: one whose elements share
// memory (stride 0, as expand() makes) cannot take it. Refused at the call, before anything is
// sent, on every rank alike (whatever its role), as the user's mistake it is.
void CheckWritable(const at::Tensor& t, const char* what) {
  if (t.layout() != at::kStrided) return;  // GyreType refuses it, naming the layout
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "gyre ", what,
              ": the tensor to write the result into has overlapping memory (a stride of 0, as "
              "from expand(), with sizes ",
              t.sizes(), " and strides ", t.strides(),
              "); pass a copy made with .contiguous() or .clone() and use that");
}

void CheckWritable(const std::vector<at::Tensor>& list, const char* what) {
  for (const auto& t : list) CheckWritable(t, what);
}

// A contiguous tensor with `t`'s data; `t` itself when it already is.
at::Tensor Dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

void CopyBack(const at::Tensor& to, const at::Tensor& from) {
  if (!to.is_same(from)) to.copy_(from.view(to.sizes()));
}

void ApplyPremul(at::Tensor& t, const Reduction& r) {
  if (!r.premul) return;
  if (r.factor_tensor.defined()) {
    t.mul_(r.factor_tensor);
  } else {
    t.mul_(r.factor);
  }
}

const at::Tensor& Single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "gyre does not support ", what, " on ", tensors.size(),
              " tensors per rank (one tensor, as on CPU)");
  return tensors[0];
}

void CheckList(const std::vector<at::Tensor>& list, size_t p, const at::Tensor& like,
               const char* what) {
  TORCH_CHECK(list.size() == p, "gyre ", what, ": expected ", p, " tensors, got ", list.size());
  for (const auto& t : list) {
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(),
                "gyre does not support ", what, " with tensors of different sizes or types");
  }
}

at::Tensor Flat(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const auto& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  int64_t offset = 0;
  for (const auto& t : list) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Runs `body`, turning an ATen exception thrown on gyre's worker thread into a Status.
Status Guarded(const std::function<Status()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("torch raised on gyre's worker: ") + e.what());
  }
}

bool EnvironmentMatches(int rank, int size) {
  const char* r = std::getenv("GYRE_RANK");
  const char* n = std::getenv("GYRE_WORLD_SIZE");
  const char* socket = std::getenv("GYRE_SOCKET");
  const char* mode = std::getenv("GYRE_MODE");
  const bool joinable = (socket != nullptr && *socket != '\0') ||
                        (mode != nullptr && std::string(mode) == "embedded");
  return joinable && r != nullptr && n != nullptr && std::atoi(r) == rank && std::atoi(n) == size;
}

}  // namespace

gyre::Options GyreProcessGroup::OptionsFor(algo::Collective c,
                                           std::chrono::milliseconds timeout) const {
  gyre::Options o = options_;
  if (timeout.count() > 0) o.timeout = timeout;
  if (algorithm_ != algo::Algorithm::kAuto) {
    const std::vector<algo::Algorithm> has = algo::AlgorithmsFor(c);
    if (std::find(has.begin(), has.end(), algorithm_) == has.end()) o.algorithm.clear();
  }
  return o;
}

void GyreProcessGroup::RememberPythonMainThread() { (void)MainThread(); }

GyreProcessGroup::GyreProcessGroup(const BackendSpec& spec)
    : TorchBackendBase(spec.rank, spec.size) {
  options_.algorithm = spec.algorithm;
  if (!spec.algorithm.empty() && spec.algorithm != "auto") {
    // A name no collective has is refused here, once, not by every call.
    StatusOr<algo::Algorithm> a = algo::ParseAlgorithm(spec.algorithm);
    if (!a.ok()) {
      throw StatusError(a.status(), "gyre backend: rank " + std::to_string(spec.rank) +
                                        ": the group's algorithm (configure(algorithm=...) or "
                                        "GYRE_ALGORITHM)");
    }
    algorithm_ = *a;
  }
  options_.timeout = spec.timeout;
  if (spec.deterministic) options_.deterministic = 1;
  StatusOr<std::unique_ptr<Comm>> comm = Status(StatusCode::kInternal, "not joined");
  if (spec.use_gyre_environment && EnvironmentMatches(spec.rank, spec.size) &&
      !g_environment_taken.exchange(true)) {
    from_environment_ = true;
    comm = JoinFromEnvironment();
  } else {
    EmbeddedSpec e;
    e.rank = spec.rank;
    e.world_size = spec.size;
    e.job_id = spec.job_id;
    e.timeout = spec.timeout;
    // Ranks arrive seconds apart (importing torch alone takes seconds on a loaded machine):
    // a short progress timeout must not make the rendezvous fail.
    e.rendezvous_timeout = std::max<Duration>(spec.timeout, Seconds(60));
    e.deterministic = spec.deterministic;
    if (const char* dir = std::getenv("GYRE_FLIGHT_DIR")) e.flight_dir = dir;
    c10::intrusive_ptr<c10d::Store> store = spec.store;
    e.store_factory = [store]() -> StatusOr<std::unique_ptr<store::Store>> {
      return std::unique_ptr<store::Store>(new C10dStore(store));
    };
    comm = JoinEmbedded(e);
  }
  if (!comm.ok()) {
    throw StatusError(comm.status(), "gyre backend: rank " + std::to_string(spec.rank) + " of " +
                                         std::to_string(spec.size) + " could not join");
  }
  runner_ = std::make_unique<CallRunner>(std::move(*comm));
}

GyreProcessGroup::~GyreProcessGroup() {
  // Python may drop the last reference with the GIL held, while a completion thread runs a
  // future's callback that needs it: release it, and do not wait out a call still running.
  // The completions of calls failed or finished by then still run (a late one on the thread
  // that completes it) before the completion threads are joined.
  auto stop = [this] {
    // In a forked child the completion threads are the parent's (see InForkedChild).
    const bool forked = runner_ != nullptr && runner_->InForkedChild();
    CallRunner::Release(std::move(runner_));
    if (!forked) completions_->Shutdown();
  };
  if (PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    stop();
  } else {
    stop();
  }
}

std::string GyreProcessGroup::mode() const {
  return runner_->comm().mode() + (from_environment_ ? " (gyre environment)" : " (torch store)");
}

// Whether this thread's current collective method has queued its call (Enqueue). A method
// that throws before it has was stopped by its own checks of the arguments (an element type
// gyre does not take, a tensor list of the wrong length): RefuseUnlessEnqueued refuses the
// call in its place in the sequence, so this rank's next call meets the other ranks' next
// call instead of their refused one (which, of the same shape, ran on with their data), and
// the others' same call fails naming this rank and why.
thread_local bool t_enqueued = false;

void GyreProcessGroup::RefuseUnlessEnqueued(const char* collective, const std::exception& e) {
  if (t_enqueued || !runner_) return;
  try {
    runner_->Submit([name = std::string(collective), why = std::string(e.what())](Comm& c) {
      return c.RefuseCall(name, InvalidArgumentError(why));
    });
  } catch (...) {
    // Best effort: the method's own exception is what the caller gets either way.
  }
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::Enqueue(c10d::OpType type, const char* what,
                                                         std::vector<at::Tensor> outputs,
                                                         std::function<Status(Comm&)> call) {
  auto work = c10::make_intrusive<GyreWork>(getRank(), type, what, std::move(outputs));
  t_enqueued = true;
  // A future's callback making this call may wait for it: its completion comes behind.
  Completions::HandOffCurrent();
  auto pending = runner_->Submit(
      [call = std::move(call)](Comm& c) { return Guarded([&] { return call(c); }); });
  pending->OnDone([work, completions = completions_](const Status& s) {
    completions->Post([work, s] { work->Finish(s); });
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) try {
  t_enqueued = false;
  at::Tensor t = Single(tensors, "broadcast");
  CheckWritable(t, "broadcast");
  const DataType dt = GyreType(t);
  const int root = static_cast<int>(opts.rootRank);
  const gyre::Options o = OptionsFor(algo::Collective::kBroadcast, opts.timeout);
  return Enqueue(c10d::OpType::BROADCAST, "broadcast", {t}, [t, dt, root, o](Comm& c) {
    at::Tensor b = Dense(t);
    Status s = c.Broadcast(b.data_ptr(), b.data_ptr(), b.numel(), dt, root, o);
    if (s.ok()) CopyBack(t, b);
    return s;
  });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("broadcast", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) try {
  t_enqueued = false;
  at::Tensor t = Single(tensors, "allreduce");
  CheckWritable(t, "allreduce");
  const DataType dt = GyreType(t);
  const Reduction r = ReductionOf(opts.reduceOp, t);
  const gyre::Options o = OptionsFor(algo::Collective::kAllreduce, opts.timeout);
  return Enqueue(c10d::OpType::ALLREDUCE, "allreduce", {t}, [t, dt, r, o](Comm& c) {
    at::Tensor b = Dense(t);
    ApplyPremul(b, r);
    Status s = c.Allreduce(b.data_ptr(), b.data_ptr(), b.numel(), dt, r.op, o);
    if (s.ok()) CopyBack(t, b);
    return s;
  });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("allreduce", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) try {
  t_enqueued = false;
  TORCH_CHECK(!tensors.empty(), "gyre allreduce_coalesced: no tensors");
  CheckWritable(tensors, "allreduce_coalesced");
  for (const auto& t : tensors) {
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "gyre does not support allreduce_coalesced over tensors of different types");
  }
  const DataType dt = GyreType(tensors[0]);
  const Reduction r = ReductionOf(opts.reduceOp, tensors[0]);
  const gyre::Options o = OptionsFor(algo::Collective::kAllreduce, opts.timeout);
  std::vector<at::Tensor> list = tensors;
  return Enqueue(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", list, [list, dt, r, o](Comm& c) {
        at::Tensor flat = Flat(list);
        ApplyPremul(flat, r);
        Status s = c.Allreduce(flat.data_ptr(), flat.data_ptr(), flat.numel(), dt, r.op, o);
        if (s.ok()) Unflatten(flat, list);
        return s;
      });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("allreduce", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) try {
  t_enqueued = false;
  at::Tensor t = Single(tensors, "reduce");
  CheckWritable(t, "reduce");
  const DataType dt = GyreType(t);
  const Reduction r = ReductionOf(opts.reduceOp, t);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  const gyre::Options o = OptionsFor(algo::Collective::kReduce, opts.timeout);
  return Enqueue(c10d::OpType::REDUCE, "reduce", {t}, [t, dt, r, root, is_root, o](Comm& c) {
    // The input is only read: PREMUL_SUM scales a copy, so no rank's tensor changes but the
    // root's, and that only to the result.
    at::Tensor b = r.premul ? t.contiguous().clone() : Dense(t);
    ApplyPremul(b, r);
    at::Tensor out = is_root ? at::empty_like(b) : at::Tensor();
    Status s =
        c.Reduce(b.data_ptr(), is_root ? out.data_ptr() : nullptr, b.numel(), dt, r.op, root, o);
    if (s.ok() && is_root) t.copy_(out.view(t.sizes()));
    return s;
  });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("reduce", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) try {
  t_enqueued = false;
  at::Tensor in = Single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "gyre does not support allgather on several tensor lists");
  const DataType dt = GyreType(in);
  std::vector<at::Tensor> outs = outputs[0];
  CheckList(outs, getSize(), in, "allgather");
  CheckWritable(outs, "allgather");
  const gyre::Options o = OptionsFor(algo::Collective::kAllgather, opts.timeout);
  const int p = getSize();
  return Enqueue(c10d::OpType::ALLGATHER, "allgather", outs, [in, outs, dt, p, o](Comm& c) {
    at::Tensor b = Dense(in);
    at::Tensor flat = at::empty({p * b.numel()}, b.options());
    Status s = c.Allgather(b.data_ptr(), flat.data_ptr(), b.numel(), dt, o);
    if (s.ok()) Unflatten(flat, outs);
    return s;
  });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("allgather", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) try {
  t_enqueued = false;
  const DataType dt = GyreType(input);
  TORCH_CHECK(
      output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
      "gyre _allgather_base: output must hold world size times the input");
  CheckWritable(output, "_allgather_base");
  const gyre::Options o = OptionsFor(algo::Collective::kAllgather, opts.timeout);
  at::Tensor out = output, in = input;
  return Enqueue(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {out},
                 [in, out, dt, o](Comm& c) {
                   at::Tensor b = Dense(in), ob = Dense(out);
                   Status s = c.Allgather(b.data_ptr(), ob.data_ptr(), b.numel(), dt, o);
                   if (s.ok()) CopyBack(out, ob);
                   return s;
                 });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("allgather", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) try {
  t_enqueued = false;
  at::Tensor in = Single(inputs, "gather");
  const DataType dt = GyreType(in);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  std::vector<at::Tensor> outs;
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1, "gyre gather: the root needs one output list");
    outs = outputs[0];
    CheckList(outs, getSize(), in, "gather");
    CheckWritable(outs, "gather");
  }
  const gyre::Options o = OptionsFor(algo::Collective::kGather, opts.timeout);
  const int p = getSize();
  return Enqueue(
      c10d::OpType::GATHER, "gather", outs, [in, outs, dt, root, is_root, p, o](Comm& c) {
        at::Tensor b = Dense(in);
        at::Tensor flat = is_root ? at::empty({p * b.numel()}, b.options()) : at::Tensor();
        Status s =
            c.Gather(b.data_ptr(), is_root ? flat.data_ptr() : nullptr, b.numel(), dt, root, o);
        if (s.ok() && is_root) Unflatten(flat, outs);
        return s;
      });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("gather", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) try {
  t_enqueued = false;
  at::Tensor out = Single(outputs, "scatter");
  CheckWritable(out, "scatter");
  const DataType dt = GyreType(out);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = root == getRank();
  std::vector<at::Tensor> ins;
  if (is_root) {
    TORCH_CHECK(inputs.size() == 1, "gyre scatter: the root needs one input list");
    ins = inputs[0];
    CheckList(ins, getSize(), out, "scatter");
  }
  const gyre::Options o = OptionsFor(algo::Collective::kScatter, opts.timeout);
  return Enqueue(
      c10d::OpType::SCATTER, "scatter", {out}, [ins, out, dt, root, is_root, o](Comm& c) {
        at::Tensor flat = is_root ? Flat(ins) : at::Tensor();
        at::Tensor ob = Dense(out);
        Status s =
            c.Scatter(is_root ? flat.data_ptr() : nullptr, ob.data_ptr(), ob.numel(), dt, root, o);
        if (s.ok()) CopyBack(out, ob);
        return s;
      });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("scatter", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) try {
  t_enqueued = false;
  at::Tensor out = Single(outputs, "reduce_scatter");
  CheckWritable(out, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "gyre does not support reduce_scatter on several lists");
  const DataType dt = GyreType(out);
  std::vector<at::Tensor> ins = inputs[0];
  CheckList(ins, getSize(), out, "reduce_scatter");
  const Reduction r = ReductionOf(opts.reduceOp, out);
  const gyre::Options o = OptionsFor(algo::Collective::kReduceScatter, opts.timeout);
  return Enqueue(
      c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {out}, [ins, out, dt, r, o](Comm& c) {
        at::Tensor flat = Flat(ins);
        ApplyPremul(flat, r);
        at::Tensor ob = Dense(out);
        Status s = c.ReduceScatter(flat.data_ptr(), ob.data_ptr(), ob.numel(), dt, r.op, o);
        if (s.ok()) CopyBack(out, ob);
        return s;
      });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("reduce_scatter", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) try {
  t_enqueued = false;
  const DataType dt = GyreType(output);
  TORCH_CHECK(
      input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
      "gyre _reduce_scatter_base: input must hold world size times the output");
  CheckWritable(output, "_reduce_scatter_base");
  const Reduction r = ReductionOf(opts.reduceOp, output);
  const gyre::Options o = OptionsFor(algo::Collective::kReduceScatter, opts.timeout);
  at::Tensor out = output, in = input;
  return Enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {out},
                 [in, out, dt, r, o](Comm& c) {
                   at::Tensor b = r.premul ? in.contiguous().clone() : Dense(in);
                   ApplyPremul(b, r);
                   at::Tensor ob = Dense(out);
                   Status s = c.ReduceScatter(b.data_ptr(), ob.data_ptr(), ob.numel(), dt, r.op, o);
                   if (s.ok()) CopyBack(out, ob);
                   return s;
                 });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("reduce_scatter", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) try {
  t_enqueued = false;
  const DataType dt = GyreType(input);
  const int p = getSize();
  TORCH_CHECK(input.numel() == output.numel() && input.scalar_type() == output.scalar_type(),
              "gyre alltoall_base: input and output must have the same size and type");
  CheckWritable(output, "alltoall_base");
  for (const auto* splits : {&output_splits, &input_splits}) {
    for (int64_t s : *splits) {
      TORCH_CHECK(s == splits->front(), "gyre does not support alltoall_base with unequal splits");
    }
  }
  TORCH_CHECK(input.dim() >= 1 && input.size(0) % p == 0,
              "gyre alltoall_base: the first dimension must divide by the world size");
  const int64_t equal = input.size(0) / p;
  for (const auto* splits : {&output_splits, &input_splits}) {
    TORCH_CHECK(splits->empty() || splits->front() == equal, "gyre alltoall_base: splits of ",
                splits->front(), " do not cover ", input.size(0), " rows over ", p, " ranks");
  }
  const gyre::Options o = OptionsFor(algo::Collective::kAlltoall, opts.timeout);
  at::Tensor out = output, in = input;
  return Enqueue(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {out}, [in, out, dt, p, o](Comm& c) {
    at::Tensor b = Dense(in), ob = Dense(out);
    Status s = c.Alltoall(b.data_ptr(), ob.data_ptr(), b.numel() / p, dt, o);
    if (s.ok()) CopyBack(out, ob);
    return s;
  });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("alltoall", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) try {
  t_enqueued = false;
  TORCH_CHECK(!inputs.empty(), "gyre alltoall: no tensors");
  const DataType dt = GyreType(inputs[0]);
  CheckList(inputs, getSize(), inputs[0], "alltoall");
  CheckList(outputs, getSize(), inputs[0], "alltoall");
  CheckWritable(outputs, "alltoall");
  const gyre::Options o = OptionsFor(algo::Collective::kAlltoall, opts.timeout);
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  return Enqueue(c10d::OpType::ALLTOALL, "alltoall", outs, [ins, outs, dt, o](Comm& c) {
    at::Tensor flat = Flat(ins);
    at::Tensor result = at::empty_like(flat);
    Status s = c.Alltoall(flat.data_ptr(), result.data_ptr(), ins[0].numel(), dt, o);
    if (s.ok()) Unflatten(result, outs);
    return s;
  });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("alltoall", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::barrier(const c10d::BarrierOptions& opts) try {
  t_enqueued = false;
  const gyre::Options o = OptionsFor(algo::Collective::kBarrier, opts.timeout);
  return Enqueue(c10d::OpType::BARRIER, "barrier", {}, [o](Comm& c) { return c.Barrier(o); });
} catch (const std::exception& e) {
  RefuseUnlessEnqueued("barrier", e);
  throw;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::StartMessage(bool send, const at::Tensor& tensor,
                                                              const at::Tensor& buffer, int peer,
                                                              int tag) {
  const DataType dt = GyreType(tensor);
  const char* what = send ? "send" : "recv";
  auto work =
      c10::make_intrusive<GyreWork>(getRank(), send ? c10d::OpType::SEND : c10d::OpType::RECV, what,
                                    std::vector<at::Tensor>{tensor});
  const gyre::Options o = options_;
  Completions::HandOffCurrent();  // as in Enqueue
  auto pending = runner_->StartMessage([&](Comm& c) {
    return send ? c.SendAsync(buffer.data_ptr(), buffer.numel(), dt, peer, tag, o)
                : c.RecvAsync(buffer.data_ptr(), buffer.numel(), dt, peer, tag, o);
  });
  // The callback keeps `buffer` alive until the message is done with it.
  pending->OnDone([work, send, tensor, buffer, completions = completions_](const Status& s) {
    Status st = s;
    if (st.ok() && !send)
      st = Guarded([&] {
        CopyBack(tensor, buffer);
        return Status::Ok();
      });
    completions->Post([work, st] { work->Finish(st); });
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::send(std::vector<at::Tensor>& tensors, int dst,
                                                      int tag) {
  at::Tensor t = Single(tensors, "send");
  return StartMessage(true, t, Dense(t), dst, tag);
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::recv(std::vector<at::Tensor>& tensors, int src,
                                                      int tag) {
  at::Tensor t = Single(tensors, "recv");
  CheckWritable(t, "recv");
  return StartMessage(false, t, Dense(t), src, tag);
}

c10::intrusive_ptr<c10d::Work> GyreProcessGroup::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  TORCH_CHECK(false,
              "gyre does not support recv from any source: every receive names its sender, so "
              "a missing message names the rank it waited for");
}

}  // namespace gyre::python
