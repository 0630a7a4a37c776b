// gyre's Python module (`gyre._gyre`, re-exported by the `gyre` package): a Comm that runs
// every collective on objects with the buffer protocol (numpy arrays, bytearray, memoryview),
// blocking or asynchronous. Waits release the GIL and wake every 100 ms to let Ctrl-C through;
// failures raise gyre.GyreError carrying gyre's whole verdict and the status code's name.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/call_runner.h"

namespace py = pybind11;

namespace gyre::python {
namespace {

PyObject* g_gyre_error = nullptr;
constexpr auto kWaitSlice = std::chrono::milliseconds(100);

void RaiseStatus(const Status& s, const char* message) {
  py::object type = py::reinterpret_borrow<py::object>(g_gyre_error);
  py::object exc = type(py::str(message));
  exc.attr("code") = py::str(CodeName(s.code()));
  exc.attr("message") = py::str(s.message());
  PyErr_SetObject(g_gyre_error, exc.ptr());
}

[[noreturn]] void ThrowIfError(const Status& s, const std::string& what) {
  throw StatusError(s, "gyre " + what + " failed");
}

// One contiguous buffer with gyre's element type.
struct View {
  std::shared_ptr<py::buffer_info> info;
  DataType dtype = DataType::kUint8;
  bool is_bool = false;  // numpy's bool: gyre's uint8, reduced as logic (OpFor)
  int64_t count = 0;
  void* data() const { return info ? info->ptr : nullptr; }
};

// What a queued call captures: raw pointers only, because the buffers are released (which
// needs the GIL) on the Python side, never on gyre's worker thread.
struct Buf {
  void* data = nullptr;
  DataType dtype = DataType::kUint8;
  int64_t count = 0;
};
Buf RawOf(const View& v) { return Buf{v.data(), v.dtype, v.count}; }

constexpr const char* kElementTypes =
    "gyre takes float32, float64, float16, int8, uint8, int32, uint32, int64, uint64 and bool, "
    "in native byte order";

DataType DtypeOf(const py::buffer_info& info) {
  std::string f = info.format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f = f.substr(1);
  if (f.size() != 1) {
    throw py::value_error("gyre: unsupported buffer format '" + info.format + "' (" +
                          kElementTypes + ")");
  }
  const char c = f[0];
  const auto size = info.itemsize;
  if (c == 'f' && size == 4) return DataType::kFloat32;
  if (c == 'd' && size == 8) return DataType::kFloat64;
  if (c == 'e' && size == 2) return DataType::kFloat16;
  if (c == 'b' || c == 'h' || c == 'i' || c == 'l' || c == 'q' || c == 'n') {
    if (size == 1) return DataType::kInt8;
    if (size == 4) return DataType::kInt32;
    if (size == 8) return DataType::kInt64;
  }
  if (c == 'B' || c == 'c' || c == 'H' || c == 'I' || c == 'L' || c == 'Q' || c == 'N' ||
      (c == '?' && size == 1)) {
    if (size == 1) return DataType::kUint8;
    if (size == 4) return DataType::kUint32;
    if (size == 8) return DataType::kUint64;
  }
  throw py::value_error("gyre: unsupported element type '" + info.format + "' of " +
                        std::to_string(size) + " bytes (" + kElementTypes + ")");
}

View ViewOf(const py::handle& obj, bool writable, const char* name) {
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error(std::string("gyre: ") + name +
                         " must support the buffer protocol (numpy array, bytearray, ...)");
  }
  View v;
  v.info =
      std::make_shared<py::buffer_info>(py::reinterpret_borrow<py::buffer>(obj).request(writable));
  v.dtype = DtypeOf(*v.info);
  v.is_bool = v.info->format == "?" || v.info->format == "=?" || v.info->format == "@?" ||
              v.info->format == "<?";
  int64_t expected_stride = v.info->itemsize;
  for (int i = static_cast<int>(v.info->ndim) - 1; i >= 0; --i) {
    if (v.info->shape[i] != 1 && v.info->strides[i] != expected_stride) {
      throw py::value_error(std::string("gyre: ") + name + " must be C-contiguous");
    }
    expected_stride *= v.info->shape[i];
  }
  v.count = v.info->size;
  return v;
}

constexpr const char* kOpNames = "sum, prod, min, max, avg, band, bor, bxor";

ReduceOp OpOf(const py::object& op) {
  if (py::isinstance<ReduceOp>(op)) return op.cast<ReduceOp>();
  if (py::isinstance<py::str>(op)) {
    const std::string name = op.cast<std::string>();
    static const std::pair<const char*, ReduceOp> kNames[] = {
        {"sum", ReduceOp::kSum},   {"prod", ReduceOp::kProd}, {"product", ReduceOp::kProd},
        {"min", ReduceOp::kMin},   {"max", ReduceOp::kMax},   {"avg", ReduceOp::kAvg},
        {"band", ReduceOp::kBand}, {"bor", ReduceOp::kBor},   {"bxor", ReduceOp::kBxor}};
    for (const auto& [n, v] : kNames) {
      if (name == n) return v;
    }
    throw py::value_error("gyre: unknown reduce op '" + name + "' (" + kOpNames + ")");
  }
  const std::string message = "gyre: op must be a name (" + std::string(kOpNames) +
                              ") or a gyre.ReduceOp, not " + std::string(py::repr(op));
  if (py::isinstance<py::int_>(op)) throw py::value_error(message);
  throw py::type_error(message);
}

// A timeout in seconds from Python. NaN and negative numbers are ValueError naming the
// value; a huge or infinite one means no limit, that is gyre's longest, kMaxCallTimeout.
Duration TimeoutOf(double seconds, const char* name) {
  if (std::isnan(seconds) || seconds < 0) {
    throw py::value_error(std::string("gyre: ") + name +
                          " must be a number of seconds >= 0 (inf: no limit), not " +
                          std::string(py::repr(py::float_(seconds))));
  }
  return std::min(Seconds(seconds), kMaxCallTimeout);
}

// numpy's bool is one byte holding 0 or 1: it is reduced as logic (or, and), not as numbers,
// so that the result is still a valid bool.
ReduceOp OpFor(const py::object& op, const py::handle& data) {
  const ReduceOp r = OpOf(op);
  if (!PyObject_CheckBuffer(data.ptr())) return r;
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(data).request();
  std::string f = info.format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f = f.substr(1);
  if (f != "?") return r;
  switch (r) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return ReduceOp::kBor;
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return ReduceOp::kBand;
    case ReduceOp::kAvg:
      throw py::value_error("gyre: avg of a bool array is not defined");
    default:
      return r;
  }
}

// A call's progress timeout. C++'s Options::timeout takes zero as "the job's default", which
// Python spells None; a 0 here would read as "fail at once", which a call that needs its
// peers cannot do, so it is refused rather than silently taken as the default.
Duration CallTimeoutOf(double seconds) {
  if (seconds == 0) {
    throw py::value_error(
        "gyre: a call's timeout must be > 0 seconds, not 0 (None: the job's progress timeout; "
        "inf: no limit; to poll a call, pass async_op=True and wait(timeout=0) on its Work)");
  }
  return TimeoutOf(seconds, "timeout");
}

// `deterministic` from Python: False or 0 (off), True or 1 (canonical order) and, for a call
// (Options::deterministic), None or -1 (the job's default). Another value is refused by name,
// not taken for its truth: ValueError for another integer, TypeError for anything else.
int DeterministicOf(const py::handle& value, bool call) {
  const std::string want = std::string(": want ") +
                           (call ? "None or -1 (the job's default), " : "") +
                           "False or 0 (off), True or 1 (canonical order)";
  if (call && value.is_none()) return -1;
  if (PyBool_Check(value.ptr())) return value.ptr() == Py_True ? 1 : 0;
  if (PyIndex_Check(value.ptr())) {
    const py::int_ number = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
    if (!number) throw py::error_already_set();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
    if (overflow == 0 && v >= (call ? -1 : 0) && v <= 1) return static_cast<int>(v);
    throw py::value_error("gyre: deterministic is " + std::string(py::repr(value)) + want);
  }
  throw py::type_error("gyre: deterministic is " + std::string(py::repr(value)) + want);
}

struct CallArgs {
  std::optional<std::string> algorithm;  // none: the communicator's choice
  py::object deterministic = py::none();
  std::optional<double> timeout;  // seconds
  Options ToOptions() const {
    Options o;
    o.algorithm = algorithm.value_or("");
    o.deterministic = DeterministicOf(deterministic, /*call=*/true);
    if (timeout) o.timeout = CallTimeoutOf(*timeout);
    return o;
  }
};

// What an in-flight call needs kept alive: its buffers and the object to hand back.
struct Held {
  std::shared_ptr<PendingCall> pending;
  std::vector<View> views;
  py::object result;
  std::string what;
};

// Waits with the GIL released, in slices, so that a pending signal raises in Python.
// Returns false when `timeout` passed first.
bool WaitInterruptibly(PendingCall& pending, std::optional<Duration> timeout) {
  const Deadline limit = timeout ? DeadlineAfter(*timeout) : Deadline::Infinite();
  for (;;) {
    {
      py::gil_scoped_release release;
      if (pending.WaitUntil(DeadlineAfter(kWaitSlice).Min(limit))) return true;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (Expired(limit)) return false;
  }
}

class PyComm;

// Collectives this thread handed to its Comm's runner (PyComm::Run). A binding's exception
// raised while this did not move was raised by its own checks, before the call was made.
thread_local uint64_t t_calls_made = 0;

class PyWork {
 public:
  PyWork(std::shared_ptr<Held> held, py::object comm) : held_(std::move(held)), comm_(comm) {}
  ~PyWork();
  bool Done() const { return held_->pending->Done(); }
  py::object Wait(std::optional<double> seconds) {
    std::optional<Duration> timeout;
    if (seconds) timeout = TimeoutOf(*seconds, "timeout");
    if (!WaitInterruptibly(*held_->pending, timeout)) {
      PyErr_SetString(
          PyExc_TimeoutError,
          ("gyre " + held_->what + " still running after " + FormatTime(*timeout)).c_str());
      throw py::error_already_set();
    }
    Status s = held_->pending->status();
    if (!s.ok()) ThrowIfError(s, held_->what);
    return held_->result;
  }

 private:
  std::shared_ptr<Held> held_;
  py::object comm_;
};

class PyComm {
 public:
  explicit PyComm(std::unique_ptr<Comm> comm)
      : runner_(std::make_unique<CallRunner>(std::move(comm))) {}
  ~PyComm() {
    if (runner_->InForkedChild()) {
      // A forked child's copy: the parent's calls own these buffers' state, and their locks
      // may have been held at the fork (CallRunner::InForkedChild).
      CallRunner::Release(std::move(runner_));
      KeepAbandonedForever();
      return;
    }
    // Every queued call is bounded by gyre's deadlines; the worker needs no GIL.
    {
      py::gil_scoped_release release;
      // A call still running (a wait interrupted by Ctrl-C) is not waited out here.
      CallRunner::Release(std::move(runner_));
    }
    // The calls still running on the released runner write into their buffers until they
    // end (by their deadlines at the latest): those buffers stay referenced for the life of
    // the process, as the runner itself does, rather than be freed for other arrays to take.
    Prune();
    KeepAbandonedForever();
  }

  int rank() { return runner_->comm().rank(); }
  int size() { return runner_->comm().size(); }
  std::string mode() { return runner_->comm().mode(); }
  Comm& comm() { return runner_->comm(); }

  py::dict Last() {
    CallInfo info = runner_->comm().last();
    py::dict d;
    d["algorithm"] = info.algorithm;
    d["seq"] = info.seq;
    d["elapsed"] = std::chrono::duration<double>(info.elapsed).count();
    d["bytes_sent"] = info.bytes_sent;
    d["msgs_sent"] = info.msgs_sent;
    d["bytes_recv"] = info.bytes_recv;
    d["msgs_recv"] = info.msgs_recv;
    d["bytes_staged"] = info.bytes_staged;
    return d;
  }

  // Keeps a call's buffers alive after its waiter went away (Ctrl-C, dropped Work).
  void Abandon(std::shared_ptr<Held> held) {
    Prune();
    abandoned_.push_back(std::move(held));
  }

  py::object Run(py::object self, std::shared_ptr<Held> held, std::function<Status(Comm&)> call,
                 bool async_op) {
    Prune();
    ++t_calls_made;
    held->pending = runner_->Submit(std::move(call));
    return Finish(self, std::move(held), async_op);
  }

  // A collective this rank's binding refused before making it (InSequence): refused in its
  // place in the call sequence too, behind the calls already queued. Best effort: the
  // caller's own exception is what it raises either way.
  void RefuseInSequence(const char* collective, const std::string& why) {
    runner_->Submit([name = std::string(collective), why](Comm& c) {
      return c.RefuseCall(name, InvalidArgumentError(why));
    });
  }

  // A send or receive: posted now, beside the queued collectives (CallRunner::StartMessage).
  py::object RunMessage(py::object self, std::shared_ptr<Held> held,
                        const std::function<std::shared_ptr<Work>(Comm&)>& start, bool async_op) {
    Prune();
    held->pending = runner_->StartMessage(start);
    return Finish(self, std::move(held), async_op);
  }

 private:
  py::object Finish(py::object self, std::shared_ptr<Held> held, bool async_op) {
    if (async_op) return py::cast(std::make_unique<PyWork>(std::move(held), self));
    bool done = false;
    try {
      done = WaitInterruptibly(*held->pending, std::nullopt);
    } catch (...) {
      Abandon(held);
      throw;
    }
    (void)done;
    Status s = held->pending->status();
    if (!s.ok()) ThrowIfError(s, held->what);
    return held->result;
  }

  // Buffers a call may still write into outlive this Comm: never freed, on purpose.
  void KeepAbandonedForever() {
    if (!abandoned_.empty()) new std::vector<std::shared_ptr<Held>>(std::move(abandoned_));
  }

  void Prune() {
    std::vector<std::shared_ptr<Held>> alive;
    for (auto& h : abandoned_) {
      if (!h->pending->Done()) alive.push_back(std::move(h));
    }
    abandoned_.swap(alive);
  }

  std::unique_ptr<CallRunner> runner_;
  std::vector<std::shared_ptr<Held>> abandoned_;
};

PyWork::~PyWork() {
  if (!held_->pending->Done()) comm_.cast<PyComm&>().Abandon(held_);
}

void CheckSameType(const View& a, const View& b) {
  // bool and uint8 are one gyre type, but a sum of bools reduced as numbers is no bool.
  if (a.dtype != b.dtype || a.is_bool != b.is_bool) {
    throw py::value_error("gyre: input and output element types differ");
  }
}

void CheckCount(const View& v, int64_t expected, const char* name) {
  if (v.count != expected) {
    throw py::value_error(std::string("gyre: ") + name + " holds " + std::to_string(v.count) +
                          " elements, expected " + std::to_string(expected));
  }
}

// The output view: `out` when given, else `data` itself (in place).
View OutOrInPlace(const py::object& data, const py::object& out, const View& in,
                  std::shared_ptr<Held>& held) {
  if (out.is_none()) {
    held->result = data;
    return in;
  }
  View o = ViewOf(out, true, "out");
  held->result = out;
  return o;
}

std::shared_ptr<Held> NewHeld(const char* what) {
  auto h = std::make_shared<Held>();
  h->what = what;
  h->result = py::none();
  return h;
}

// Calls whose output has the input's shape (allreduce, broadcast, reduce); in place when
// `out` is None. `call(comm, in, out)` runs on the worker.
py::object SameShape(py::object self, const char* name, py::object data, py::object out,
                     bool async_op, std::function<Status(Comm&, const Buf&, const Buf&)> call) {
  auto held = NewHeld(name);
  View in = ViewOf(data, out.is_none(), "data");
  View o = OutOrInPlace(data, out, in, held);
  CheckSameType(in, o);
  CheckCount(o, in.count, "out");
  held->views = {in, o};
  return self.cast<PyComm&>().Run(
      self, held,
      [in = RawOf(in), o = RawOf(o), call = std::move(call)](Comm& c) { return call(c, in, o); },
      async_op);
}

// Runs a collective's binding. An argument its own checks refuse (ValueError, TypeError, ...)
// is refused in the call sequence too (Comm::RefuseCall): skipped there instead, this rank's
// next call would meet the other ranks' refused one, and with the same shape run on with their
// data, silently wrong; refused, the others' call fails naming this rank and why.
template <typename F>
py::object InSequence(const py::object& self, const char* collective, F&& body) {
  const uint64_t made = t_calls_made;
  try {
    return body();
  } catch (const py::builtin_exception& e) {
    if (t_calls_made == made) self.cast<PyComm&>().RefuseInSequence(collective, e.what());
    throw;
  } catch (py::error_already_set& e) {
    if (t_calls_made == made) self.cast<PyComm&>().RefuseInSequence(collective, e.what());
    throw;
  }
}

py::object Allreduce(py::object self, py::object data, py::object out, py::object op, bool async_op,
                     const CallArgs& a) {
  const ReduceOp rop = OpFor(op, data);
  Options opts = a.ToOptions();
  return SameShape(self, "allreduce", data, out, async_op,
                   [rop, opts](Comm& c, const Buf& in, const Buf& o) {
                     return c.Allreduce(in.data, o.data, in.count, in.dtype, rop, opts);
                   });
}

py::object Broadcast(py::object self, py::object data, int root, py::object out, bool async_op,
                     const CallArgs& a) {
  Options opts = a.ToOptions();
  return SameShape(self, "broadcast", data, out, async_op,
                   [root, opts](Comm& c, const Buf& in, const Buf& o) {
                     return c.Broadcast(in.data, o.data, in.count, in.dtype, root, opts);
                   });
}

py::object Reduce(py::object self, py::object data, int root, py::object out, py::object op,
                  bool async_op, const CallArgs& a) {
  const ReduceOp rop = OpFor(op, data);
  Options opts = a.ToOptions();
  return SameShape(self, "reduce", data, out, async_op,
                   [rop, root, opts](Comm& c, const Buf& in, const Buf& o) {
                     return c.Reduce(in.data, o.data, in.count, in.dtype, rop, root, opts);
                   });
}

// Calls whose output is `size` times the input (allgather, gather) or the reverse
// (reduce_scatter, scatter) or the same size (alltoall).
enum class Shape { kGrow, kShrink, kSame };

py::object Sized(py::object self, const char* what, py::object data, py::object out, Shape shape,
                 bool out_needed, bool in_needed, bool async_op,
                 std::function<Status(Comm&, const Buf&, const Buf&, int64_t)> run) {
  PyComm& pc = self.cast<PyComm&>();
  const int p = pc.size();
  auto held = NewHeld(what);
  View in, o;
  const bool have_in = !data.is_none();
  const bool have_out = !out.is_none();
  if (in_needed && !have_in)
    throw py::value_error(std::string("gyre ") + what + ": data is required");
  if (out_needed && !have_out)
    throw py::value_error(std::string("gyre ") + what + ": out is required");
  if (have_in) in = ViewOf(data, false, "data");
  if (have_out) o = ViewOf(out, true, "out");
  if (have_in && have_out) CheckSameType(in, o);
  int64_t count = 0;
  switch (shape) {
    case Shape::kGrow:
      count = in.count;
      if (have_out) CheckCount(o, count * p, "out");
      break;
    case Shape::kShrink:
      count = o.count;
      if (have_in) CheckCount(in, count * p, "data");
      break;
    case Shape::kSame:
      if (in.count % p != 0) {
        throw py::value_error(std::string("gyre ") + what + ": data holds " +
                              std::to_string(in.count) + " elements, not a multiple of " +
                              std::to_string(p));
      }
      CheckCount(o, in.count, "out");
      count = in.count / p;
      break;
  }
  if (have_in) held->views.push_back(in);
  if (have_out) held->views.push_back(o);
  held->result = out;
  if (!have_in) in.dtype = o.dtype;
  if (!have_out) o.dtype = in.dtype;
  return pc.Run(
      self, held,
      [in = RawOf(in), o = RawOf(o), count, run](Comm& c) { return run(c, in, o, count); },
      async_op);
}

// send: `data` to rank `dst`; recv: into `out` from rank `src` (returned). As MPI's: the
// receive names the sender's count and dtype, and messages of one tag arrive in order.
py::object Send(py::object self, py::object data, int dst, int tag, bool async_op,
                const CallArgs& a) {
  auto held = NewHeld("send");
  View in = ViewOf(data, false, "data");
  held->views = {in};
  Options opts = a.ToOptions();
  const Buf b = RawOf(in);
  return self.cast<PyComm&>().RunMessage(
      self, held,
      [b, dst, tag, opts](Comm& c) {
        return c.SendAsync(b.data, b.count, b.dtype, dst, tag, opts);
      },
      async_op);
}

py::object Recv(py::object self, py::object out, int src, int tag, bool async_op,
                const CallArgs& a) {
  auto held = NewHeld("recv");
  View o = ViewOf(out, true, "out");
  held->views = {o};
  held->result = out;
  Options opts = a.ToOptions();
  const Buf b = RawOf(o);
  return self.cast<PyComm&>().RunMessage(
      self, held,
      [b, src, tag, opts](Comm& c) {
        return c.RecvAsync(b.data, b.count, b.dtype, src, tag, opts);
      },
      async_op);
}

py::object Allgather(py::object self, py::object data, py::object out, bool async_op,
                     const CallArgs& a) {
  Options opts = a.ToOptions();
  return Sized(self, "allgather", data, out, Shape::kGrow, true, true, async_op,
               [opts](Comm& c, const Buf& in, const Buf& o, int64_t n) {
                 return c.Allgather(in.data, o.data, n, in.dtype, opts);
               });
}

py::object ReduceScatter(py::object self, py::object data, py::object out, py::object op,
                         bool async_op, const CallArgs& a) {
  Options opts = a.ToOptions();
  const ReduceOp rop = OpFor(op, data);
  return Sized(self, "reduce_scatter", data, out, Shape::kShrink, true, true, async_op,
               [opts, rop](Comm& c, const Buf& in, const Buf& o, int64_t n) {
                 return c.ReduceScatter(in.data, o.data, n, in.dtype, rop, opts);
               });
}

py::object Alltoall(py::object self, py::object data, py::object out, bool async_op,
                    const CallArgs& a) {
  Options opts = a.ToOptions();
  return Sized(self, "alltoall", data, out, Shape::kSame, true, true, async_op,
               [opts](Comm& c, const Buf& in, const Buf& o, int64_t n) {
                 return c.Alltoall(in.data, o.data, n, in.dtype, opts);
               });
}

py::object Gather(py::object self, py::object data, py::object out, int root, bool async_op,
                  const CallArgs& a) {
  Options opts = a.ToOptions();
  const bool is_root = self.cast<PyComm&>().rank() == root;
  return Sized(self, "gather", data, out, Shape::kGrow, is_root, true, async_op,
               [opts, root](Comm& c, const Buf& in, const Buf& o, int64_t n) {
                 return c.Gather(in.data, o.data, n, in.dtype, root, opts);
               });
}

py::object Scatter(py::object self, py::object data, py::object out, int root, bool async_op,
                   const CallArgs& a) {
  Options opts = a.ToOptions();
  const bool is_root = self.cast<PyComm&>().rank() == root;
  return Sized(self, "scatter", data, out, Shape::kShrink, true, is_root, async_op,
               [opts, root](Comm& c, const Buf& in, const Buf& o, int64_t n) {
                 return c.Scatter(in.data, o.data, n, o.dtype, root, opts);
               });
}

py::object Barrier(py::object self, bool async_op, const CallArgs& a) {
  auto held = NewHeld("barrier");
  Options opts = a.ToOptions();
  return self.cast<PyComm&>().Run(
      self, held, [opts](Comm& c) { return c.Barrier(opts); }, async_op);
}

py::object Close(py::object self, const CallArgs& a) {
  auto held = NewHeld("close");
  Options opts = a.ToOptions();
  return self.cast<PyComm&>().Run(
      self, held, [opts](Comm& c) { return c.Close(opts); }, false);
}

std::unique_ptr<PyComm> Made(StatusOr<std::unique_ptr<Comm>> comm, const char* what) {
  if (!comm.ok()) ThrowIfError(comm.status(), what);
  return std::make_unique<PyComm>(std::move(*comm));
}

}  // namespace
}  // namespace gyre::python

// A block from Comm::AllocBuffer behind Python's buffer protocol (writable bytes). It holds
// its Comm alive and frees the block when the last view of it goes.
class PySharedBuffer {
 public:
  PySharedBuffer(py::object owner, gyre::Comm* comm, void* data, size_t bytes)
      : owner_(std::move(owner)), comm_(comm), data_(data), bytes_(bytes) {}
  PySharedBuffer(const PySharedBuffer&) = delete;
  PySharedBuffer& operator=(const PySharedBuffer&) = delete;
  ~PySharedBuffer() {
    py::gil_scoped_release release;  // waits for calls still queued on the Comm
    comm_->FreeBuffer(data_).IgnoreError();
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  py::object owner_;  // the PyComm, so the Comm outlives the block
  gyre::Comm* comm_;
  void* data_;
  size_t bytes_;
};

PYBIND11_MODULE(_gyre, m) {
  using namespace gyre;
  using namespace gyre::python;
  m.doc() = "gyre collectives on buffer-protocol objects";

  g_gyre_error = PyErr_NewExceptionWithDoc("gyre.GyreError",
                                           "A gyre call failed; .code is the status code's name.",
                                           PyExc_RuntimeError, nullptr);
  m.attr("GyreError") = py::handle(g_gyre_error);
  // Global, so that gyre's statuses raised inside torch's bindings become GyreError too.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status(), e.what());
    }
  });

  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::kSum)
      .value("PRODUCT", ReduceOp::kProd)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("AVG", ReduceOp::kAvg)
      .value("BAND", ReduceOp::kBand)
      .value("BOR", ReduceOp::kBor)
      .value("BXOR", ReduceOp::kBxor);

  py::class_<PyWork>(m, "Work", "A pending asynchronous call.")
      .def("done", &PyWork::Done)
      .def("wait", &PyWork::Wait, py::arg("timeout") = py::none(),
           "Waits (Ctrl-C interrupts); returns the call's output, raises GyreError on "
           "failure and TimeoutError when `timeout` seconds pass first (None or inf: no limit; "
           "0: only looks, raising TimeoutError if the call is still running; NaN or "
           "negative: ValueError).");

#define GYRE_OPTS                                                        \
  py::kw_only(), py::arg("async_op") = false, py::arg("algorithm") = "", \
                 py::arg("deterministic") = py::none(), py::arg("timeout") = py::none()

  py::class_<PySharedBuffer>(m, "SharedBuffer", py::buffer_protocol(),
                             "Memory from Comm.alloc_buffer; view it with numpy.frombuffer.")
      .def_buffer([](PySharedBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.bytes())}, {1}, /*readonly=*/false);
      })
      .def("__len__", &PySharedBuffer::bytes);

  py::class_<PyComm>(m, "Comm",
                     "A rank's handle on the job. Every collective takes, by keyword, "
                     "async_op (return a Work), algorithm (\"\" or None: automatic), deterministic "
                     "(None or -1: the job's default; False or 0: off; True or 1: canonical "
                     "order; another value raises) and timeout (the progress timeout in seconds "
                     "> 0; None: the job's; inf: no limit; 0, NaN or negative raises "
                     "ValueError: a call cannot fail at once, and Work.wait(timeout=0) polls).")
      .def_static(
          "embedded",
          [](int rank, int world_size, const std::string& store, const std::string& job_id,
             double timeout, double rendezvous_timeout, py::object deterministic,
             const std::string& secret_file) {
            EmbeddedSpec spec;
            spec.rank = rank;
            spec.world_size = world_size;
            spec.store_url = store;
            spec.job_id = job_id;
            spec.timeout = TimeoutOf(timeout, "timeout");
            spec.rendezvous_timeout = TimeoutOf(rendezvous_timeout, "rendezvous_timeout");
            spec.deterministic = DeterministicOf(deterministic, /*call=*/false) == 1;
            spec.secret_file = secret_file;
            StatusOr<std::unique_ptr<Comm>> c = Status();
            {
              py::gil_scoped_release release;
              c = JoinEmbedded(spec);
            }
            return Made(std::move(c), "join");
          },
          py::arg("rank"), py::arg("world_size"), py::arg("store"), py::arg("job_id") = "gyre",
          py::arg("timeout") = 30.0, py::arg("rendezvous_timeout") = 60.0,
          py::arg("deterministic") = false, py::arg("secret_file") = "",
          "Joins the job in-process through the store at `store` (file:///dir or "
          "tcp://host:port); `timeout` is the progress timeout in seconds.")
      .def_static(
          "from_environment",
          []() {
            StatusOr<std::unique_ptr<Comm>> c = Status();
            {
              py::gil_scoped_release release;
              c = JoinFromEnvironment();
            }
            return Made(std::move(c), "join");
          },
          "The daemon (GYRE_SOCKET) or an embedded Comm (GYRE_MODE=embedded), as gyrerun sets.")
      .def_static(
          "connect_daemon",
          [](const std::string& path, double timeout) {
            const Duration limit = TimeoutOf(timeout, "timeout");
            StatusOr<std::unique_ptr<Comm>> c = Status();
            {
              py::gil_scoped_release release;
              c = JoinDaemon(path, limit);
            }
            return Made(std::move(c), "connect");
          },
          py::arg("socket_path"), py::arg("timeout") = 30.0)
      .def_property_readonly("rank", &PyComm::rank)
      .def_property_readonly("size", &PyComm::size)
      .def_property_readonly("mode", &PyComm::mode)
      .def("last", &PyComm::Last, "What the last finished call did.")
      .def(
          "alloc_buffer",
          [](py::object self, size_t nbytes) {
            gyre::Comm& comm = self.cast<PyComm&>().comm();
            gyre::StatusOr<void*> block = gyre::Status();
            {
              py::gil_scoped_release release;
              block = comm.AllocBuffer(nbytes);
            }
            if (!block.ok()) ThrowIfError(block.status(), "alloc_buffer");
            return std::make_unique<PySharedBuffer>(self, &comm, *block, nbytes);
          },
          py::arg("nbytes"),
          "nbytes of memory for call buffers (as MPI_Alloc_mem). Through the daemon it is "
          "shared with gyred and used in place (no copy); view it with "
          "numpy.frombuffer(buf, dtype). Freed when the last view goes.")
      .def(
          "allreduce",
          [](py::object self, py::object data, py::object out, py::object op, bool async_op,
             std::optional<std::string> alg, py::object det, std::optional<double> t) {
            return InSequence(self, "allreduce", [&] {
              return Allreduce(self, data, out, op, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("out") = py::none(), py::arg("op") = "sum", GYRE_OPTS)
      .def(
          "broadcast",
          [](py::object self, py::object data, int root, py::object out, bool async_op,
             std::optional<std::string> alg, py::object det, std::optional<double> t) {
            return InSequence(self, "broadcast", [&] {
              return Broadcast(self, data, root, out, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("root") = 0, py::arg("out") = py::none(), GYRE_OPTS)
      .def(
          "reduce",
          [](py::object self, py::object data, int root, py::object out, py::object op,
             bool async_op, std::optional<std::string> alg, py::object det,
             std::optional<double> t) {
            return InSequence(self, "reduce", [&] {
              return Reduce(self, data, root, out, op, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("root") = 0, py::arg("out") = py::none(), py::arg("op") = "sum",
          GYRE_OPTS)
      .def(
          "allgather",
          [](py::object self, py::object data, py::object out, bool async_op,
             std::optional<std::string> alg, py::object det, std::optional<double> t) {
            return InSequence(self, "allgather", [&] {
              return Allgather(self, data, out, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("out"), GYRE_OPTS)
      .def(
          "reduce_scatter",
          [](py::object self, py::object data, py::object out, py::object op, bool async_op,
             std::optional<std::string> alg, py::object det, std::optional<double> t) {
            return InSequence(self, "reduce_scatter", [&] {
              return ReduceScatter(self, data, out, op, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("out"), py::arg("op") = "sum", GYRE_OPTS)
      .def(
          "alltoall",
          [](py::object self, py::object data, py::object out, bool async_op,
             std::optional<std::string> alg, py::object det, std::optional<double> t) {
            return InSequence(self, "alltoall", [&] {
              return Alltoall(self, data, out, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("out"), GYRE_OPTS)
      .def(
          "gather",
          [](py::object self, py::object data, py::object out, int root, bool async_op,
             std::optional<std::string> alg, py::object det, std::optional<double> t) {
            return InSequence(self, "gather", [&] {
              return Gather(self, data, out, root, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("out") = py::none(), py::arg("root") = 0, GYRE_OPTS)
      .def(
          "scatter",
          [](py::object self, py::object data, py::object out, int root, bool async_op,
             std::optional<std::string> alg, py::object det, std::optional<double> t) {
            return InSequence(self, "scatter", [&] {
              return Scatter(self, data, out, root, async_op, CallArgs{alg, det, t});
            });
          },
          py::arg("data"), py::arg("out"), py::arg("root") = 0, GYRE_OPTS)
      .def(
          "send",
          [](py::object self, py::object data, int dst, int tag, bool async_op,
             std::optional<double> t) {
            return Send(self, data, dst, tag, async_op, CallArgs{std::nullopt, py::none(), t});
          },
          py::arg("data"), py::arg("dst"), py::arg("tag") = 0, py::kw_only(),
          py::arg("async_op") = false, py::arg("timeout") = py::none())
      .def(
          "recv",
          [](py::object self, py::object out, int src, int tag, bool async_op,
             std::optional<double> t) {
            return Recv(self, out, src, tag, async_op, CallArgs{std::nullopt, py::none(), t});
          },
          py::arg("out"), py::arg("src"), py::arg("tag") = 0, py::kw_only(),
          py::arg("async_op") = false, py::arg("timeout") = py::none())
      .def(
          "barrier",
          [](py::object self, bool async_op, std::optional<std::string> alg, py::object det,
             std::optional<double> t) {
            return InSequence(self, "barrier", [&] {
              return Barrier(self, async_op, CallArgs{alg, det, t});
            });
          },
          GYRE_OPTS)
      .def(
          "close",
          [](py::object self, std::optional<double> t) {
            return Close(self, CallArgs{std::nullopt, py::none(), t});
          },
          "Ends this rank's part in the job (Comm::Close): waits for every rank, and reports a "
          "call the ranks made differently that this rank finished without seeing; every later "
          "call raises.",
          py::kw_only(), py::arg("timeout") = py::none());
#undef GYRE_OPTS
}
