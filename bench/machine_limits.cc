// gyre-machine-limits: measures the limits BENCH.md bounds a local allreduce with, in the
// same run as the benchmarks: the aggregate loopback TCP rate C of two concurrent
// sender/receiver process pairs (and of one pair), the one-way latency of a 4-byte TCP
// ping-pong (over one connection, as gyre, Open MPI and Gloo send, and over one connection each
// way, where no reply carries the ACK of the message it answers), the single-core float32
// `a[i] += b[i]` rate R at 64 MiB (a plain vectorised loop, and gyre's own kernel for
// reference), memcpy at 64 MiB, how far apart the first two CPUs are (below), and the round
// trip of a futex hand-off between two processes on one CPU (and between two threads), the
// least a call through the daemon adds where a program and its gyred share a core.
//
//   gyre-machine-limits [--json] [--seconds 0.5]
//   gyre-machine-limits --probe        (only the CPU distance, as one JSON line; ~10 ms)
//   gyre-machine-limits --handoff      (only the hand-off round trips, as one JSON line)
//
// The CPU distance is the round trip of one cache line between threads on the first two CPUs
// this process may use. On this VM it takes one of two values that the host switches between
// every few seconds, about 60 ns and about 320 ns, and a TCP exchange between processes on
// those two CPUs takes up to twice as long in the second state (4 B to 1 MiB;
// bench/results/2026-12-03-placement.md). compare.sh probes before and after every job, so
// that jobs are compared in the same state.
//
// Children are forked, each with an alarm so that none outlives a stuck peer.
#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"

namespace gyre::bench {
namespace {

using SteadyTime = std::chrono::steady_clock;

double SecondsSince(SteadyTime::time_point start) {
  return std::chrono::duration<double>(SteadyTime::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

Status Errno(const std::string& what) {
  return UnavailableError(what + ": " + std::strerror(errno));
}

// A listening socket on 127.0.0.1, port chosen by the kernel.
StatusOr<int> Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status s = Errno("bind/listen on 127.0.0.1:0");
    close(fd);
    return s;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

StatusOr<int> Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Status s = Errno("connect to 127.0.0.1:" + std::to_string(port));
    close(fd);
    return s;
  }
  return fd;
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Waits for the children, killing any still running after `limit_seconds` (they are ours).
Status Reap(const std::vector<pid_t>& children, double limit_seconds) {
  const auto start = SteadyTime::now();
  std::vector<pid_t> left = children;
  bool failed = false;
  while (!left.empty()) {
    for (size_t i = 0; i < left.size();) {
      int status = 0;
      const pid_t r = waitpid(left[i], &status, WNOHANG);
      if (r == left[i]) {
        failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        left.erase(left.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (left.empty()) break;
    if (SecondsSince(start) > limit_seconds) {
      for (pid_t pid : left) kill(pid, SIGKILL);
      for (pid_t pid : left) waitpid(pid, nullptr, 0);
      return DeadlineExceededError("loopback probe children still running after " +
                                   std::to_string(limit_seconds) + " s; killed");
    }
    usleep(2000);
  }
  if (failed) return InternalError("a loopback probe child failed");
  return Status::Ok();
}

// `pairs` sender/receiver process pairs stream for `seconds` at once; returns the total
// bytes received divided by the longest receiver's time (GB/s).
StatusOr<double> LoopbackRate(int pairs, double seconds) {
  int result_pipe[2], go_pipe[2];
  if (pipe(result_pipe) != 0 || pipe(go_pipe) != 0) return Errno("pipe");
  std::vector<pid_t> children;
  for (int i = 0; i < pairs; ++i) {
    int port = 0;
    GYRE_ASSIGN_OR_RETURN(int listener, Listen(&port));
    const pid_t receiver = fork();
    if (receiver < 0) return Errno("fork");
    if (receiver == 0) {
      alarm(static_cast<unsigned>(seconds * 4 + 10));
      const int fd = accept(listener, nullptr, nullptr);
      if (fd < 0) _exit(1);
      std::vector<char> buf(1 << 20);
      int64_t total = 0;
      auto start = SteadyTime::now();
      bool started = false;
      for (;;) {
        const ssize_t k = read(fd, buf.data(), buf.size());
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (!started) {
          start = SteadyTime::now();
          started = true;
        }
        total += k;
      }
      const double report[2] = {static_cast<double>(total), SecondsSince(start)};
      _exit(WriteAll(result_pipe[1], report, sizeof(report)) ? 0 : 1);
    }
    children.push_back(receiver);
    const pid_t sender = fork();
    if (sender < 0) return Errno("fork");
    if (sender == 0) {
      alarm(static_cast<unsigned>(seconds * 4 + 10));
      auto fd = Connect(port);
      if (!fd.ok()) _exit(1);
      char go = 0;
      if (!ReadAll(go_pipe[0], &go, 1)) _exit(1);
      std::vector<char> buf(1 << 20, 'x');
      const auto start = SteadyTime::now();
      while (SecondsSince(start) < seconds) {
        if (!WriteAll(*fd, buf.data(), buf.size())) _exit(1);
      }
      close(*fd);
      _exit(0);
    }
    children.push_back(sender);
    close(listener);
  }
  // Only the children keep these ends: a child that dies (each has an alarm) closes its
  // copy, so the reads below end at EOF instead of waiting for ever.
  close(result_pipe[1]);
  close(go_pipe[0]);
  const std::vector<char> go(static_cast<size_t>(pairs), 'g');
  const bool started = WriteAll(go_pipe[1], go.data(), go.size());
  double bytes = 0, longest = 0;
  for (int i = 0; started && i < pairs; ++i) {
    double report[2];
    if (!ReadAll(result_pipe[0], report, sizeof(report))) break;
    bytes += report[0];
    longest = std::max(longest, report[1]);
  }
  close(result_pipe[0]);
  close(go_pipe[1]);
  GYRE_RETURN_IF_ERROR(Reap(children, seconds * 4 + 15));
  if (longest <= 0) return InternalError("no bytes went through the loopback");
  return bytes / longest / 1e9;
}

// Reads exactly n bytes without sleeping: a blocking read measures the scheduler's wake-up
// placement (tens to hundreds of microseconds here, varying run to run), not the network.
bool SpinReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Pins the calling process to the `index`-th CPU it may use (if there is one).
void PinToNth(const cpu_set_t& allowed, int index) {
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (seen++ == index) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      sched_setaffinity(0, sizeof(one), &one);
      return;
    }
  }
}

// One-way latency of a 4-byte TCP_NODELAY ping-pong between two processes on two CPUs,
// both spinning on their reads (median, us). `split`: each direction on its own connection
// (no reply carries the ACK of the message it answers; gyre's transport sent so until it
// paired its connections); otherwise both directions share one connection, as gyre, Open MPI
// and Gloo send.
StatusOr<double> PingPongMicros(int round_trips, bool split) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof(allowed), &allowed);
  int port = 0, back_port = 0;
  GYRE_ASSIGN_OR_RETURN(int listener, Listen(&port));
  GYRE_ASSIGN_OR_RETURN(int back_listener, Listen(&back_port));
  const pid_t echo = fork();
  if (echo < 0) return Errno("fork");
  if (echo == 0) {
    alarm(30);
    PinToNth(allowed, 1);
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) _exit(1);
    int out = fd;
    if (split) {
      auto back = Connect(back_port);
      if (!back.ok()) _exit(1);
      out = *back;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char msg[4];
    while (SpinReadAll(fd, msg, sizeof(msg))) {
      if (!WriteAll(out, msg, sizeof(msg))) break;
    }
    _exit(0);
  }
  close(listener);
  auto fd_or = Connect(port);
  if (!fd_or.ok()) {
    close(back_listener);
    kill(echo, SIGKILL);
    waitpid(echo, nullptr, 0);
    return fd_or.status();
  }
  const int fd = *fd_or;
  const int in = split ? accept(back_listener, nullptr, nullptr) : fd;
  close(back_listener);
  if (in < 0) {
    close(fd);
    kill(echo, SIGKILL);
    waitpid(echo, nullptr, 0);
    return Errno("accept");
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  PinToNth(allowed, 0);
  std::vector<double> one_way;
  char msg[4] = {1, 2, 3, 4};
  bool ok = true;
  for (int i = 0; i < round_trips && ok; ++i) {
    const auto start = SteadyTime::now();
    ok = WriteAll(fd, msg, sizeof(msg)) && SpinReadAll(in, msg, sizeof(msg));
    one_way.push_back(SecondsSince(start) * 1e6 / 2);
  }
  sched_setaffinity(0, sizeof(allowed), &allowed);
  close(fd);
  if (in != fd) close(in);
  GYRE_RETURN_IF_ERROR(Reap({echo}, 10));
  if (!ok) return UnavailableError("the ping-pong peer went away");
  return Median(one_way);
}

// The hand-off word of HandoffMicros: the pinger sets it odd and the ponger even, each
// waking the other with a futex.
void FutexWait(std::atomic<uint32_t>* word, uint32_t value) {
  const timespec second{1, 0};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, value, &second, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// Answers `round_trips` hand-offs (true), or gives up after a second without one.
bool Pong(std::atomic<uint32_t>* word, int round_trips) {
  for (int i = 0; i < round_trips; ++i) {
    const uint32_t want = 2 * static_cast<uint32_t>(i) + 1;
    const auto start = SteadyTime::now();
    while (word->load(std::memory_order_acquire) != want) {
      if (SecondsSince(start) > 1) return false;
      FutexWait(word, want - 1);
    }
    word->store(want + 1, std::memory_order_release);
    FutexWake(word);
  }
  return true;
}

// Median round trip (us) of a hand-off between two processes (or, `threads`, two threads)
// pinned to the first CPU this process may use: each side stores to a shared word, wakes
// the other with a futex and sleeps on the word until the other answers, as a program and
// its gyred do when they cannot spin (core/ipc/doorbell.h). Two context switches and four
// futex calls; on a virtual machine whose hypervisor shadows the page tables, a switch
// between processes also switches address spaces, and costs more than one between threads.
StatusOr<double> HandoffMicros(int round_trips, bool threads) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof(allowed), &allowed);
  void* shared = mmap(nullptr, sizeof(std::atomic<uint32_t>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return Errno("mmap");
  auto* word = new (shared) std::atomic<uint32_t>(0);
  PinToNth(allowed, 0);
  pid_t ponger = -1;
  std::thread pong_thread;
  if (threads) {
    pong_thread = std::thread([&] { Pong(word, round_trips); });
  } else {
    ponger = fork();
    if (ponger < 0) {
      sched_setaffinity(0, sizeof(allowed), &allowed);
      munmap(shared, sizeof(*word));
      return Errno("fork");
    }
    if (ponger == 0) {
      alarm(30);
      _exit(Pong(word, round_trips) ? 0 : 1);
    }
  }
  std::vector<double> rts;
  bool ok = true;
  for (int i = 0; i < round_trips && ok; ++i) {
    const uint32_t sent = 2 * static_cast<uint32_t>(i) + 1;
    const auto start = SteadyTime::now();
    word->store(sent, std::memory_order_release);
    FutexWake(word);
    while (word->load(std::memory_order_acquire) != sent + 1) {
      if (SecondsSince(start) > 1) {
        ok = false;
        break;
      }
      FutexWait(word, sent);
    }
    rts.push_back(SecondsSince(start) * 1e6);
  }
  sched_setaffinity(0, sizeof(allowed), &allowed);
  Status reaped;
  if (threads) {
    pong_thread.join();
  } else {
    if (!ok) kill(ponger, SIGKILL);
    reaped = Reap({ponger}, 10);
  }
  munmap(shared, sizeof(*word));
  GYRE_RETURN_IF_ERROR(reaped);
  if (!ok) return UnavailableError("the hand-off peer did not answer within a second");
  return Median(rts);
}

struct Handoffs {
  double process_us = 0;
  double thread_us = 0;
};

// HandoffMicros between processes and between threads.
StatusOr<Handoffs> MeasureHandoffs(int round_trips) {
  Handoffs h;
  GYRE_ASSIGN_OR_RETURN(h.process_us, HandoffMicros(round_trips, /*threads=*/false));
  GYRE_ASSIGN_OR_RETURN(h.thread_us, HandoffMicros(round_trips, /*threads=*/true));
  return h;
}

// Median round trip (ns) of one cache line between a thread on the first and a thread on the
// second CPU this process may use, over batches of round trips; 0 with fewer than two CPUs,
// or when the other thread does not answer within a second (it could not get its CPU).
double CpuRoundTripNanos(int batches) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) return 0;
  constexpr int kPerBatch = 500;
  // The ball alone on its pair of cache lines (CPUs fetch lines in pairs): nothing else may
  // move with it.
  struct Lines {
    alignas(128) std::atomic<int64_t> ball{0};
    alignas(128) std::atomic<bool> stop{false};
  };
  auto lines = std::make_unique<Lines>();
  std::atomic<int64_t>& ball = lines->ball;
  std::atomic<bool>& stop = lines->stop;
  const auto give_up = SteadyTime::now() + std::chrono::seconds(1);
  // bounded: both loops end by `stop`, or at give_up, checked every 4096 spins.
  std::thread echo([&] {
    PinToNth(allowed, 1);
    int64_t want = 1;
    for (uint32_t spins = 0; !stop.load(std::memory_order_relaxed);) {
      if (ball.load(std::memory_order_acquire) == want) {
        ball.store(want + 1, std::memory_order_release);
        want += 2;
      } else if ((++spins & 4095) == 0 && SteadyTime::now() > give_up) {
        return;
      }
    }
  });
  PinToNth(allowed, 0);
  std::vector<double> per_trip;
  int64_t next = 0;
  bool answered = true;
  for (int b = 0; b < batches && answered; ++b) {
    const auto start = SteadyTime::now();
    for (int i = 0; i < kPerBatch && answered; ++i) {
      ball.store(next + 1, std::memory_order_release);
      for (uint32_t spins = 0; ball.load(std::memory_order_acquire) != next + 2;) {
        if ((++spins & 4095) == 0 && SteadyTime::now() > give_up) {
          answered = false;
          break;
        }
      }
      next += 2;
    }
    per_trip.push_back(SecondsSince(start) * 1e9 / kPerBatch);
  }
  stop = true;
  echo.join();
  sched_setaffinity(0, sizeof(allowed), &allowed);
  return answered ? Median(per_trip) : 0;
}

// The loop the bound assumes: one core, float32, written so the compiler vectorises it.
__attribute__((noinline)) void AddInto(float* __restrict dst, const float* __restrict src,
                                       size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Median GB/s of output bytes over `reps` runs of `kernel` on 64 MiB buffers.
template <typename F>
double KernelRate(F&& kernel, int reps) {
  constexpr size_t kElems = (64u << 20) / sizeof(float);
  std::vector<float> a(kElems, 1.0f), b(kElems, 0.5f);
  kernel(a.data(), b.data(), kElems);  // first touch happens outside the timing
  std::vector<double> rates;
  for (int i = 0; i < reps; ++i) {
    const auto start = SteadyTime::now();
    kernel(a.data(), b.data(), kElems);
    rates.push_back(static_cast<double>(kElems * sizeof(float)) / SecondsSince(start) / 1e9);
  }
  return Median(rates);
}

int Main(int argc, char** argv) {
  bool json = false;
  double seconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--probe") {
      std::printf("{\"impl\": \"probe\", \"cpu_rt_ns\": %.0f}\n", CpuRoundTripNanos(20));
      return 0;
    }
    if (arg == "--handoff") {
      auto h = MeasureHandoffs(2000);
      if (!h.ok()) {
        std::fprintf(stderr, "gyre-machine-limits: %s\n", h.status().ToString().c_str());
        return 1;
      }
      std::printf(
          "{\"impl\": \"handoff\", \"handoff_process_rt_us\": %.1f, "
          "\"handoff_thread_rt_us\": %.1f}\n",
          h->process_us, h->thread_us);
      return 0;
    }
    if (arg == "--json") {
      json = true;
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: gyre-machine-limits [--json] [--seconds S] | --probe | --handoff\n");
      return 1;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  constexpr int kTrials = 5;
  std::vector<double> two, one;
  for (int trial = 0; trial < kTrials; ++trial) {
    auto r2 = LoopbackRate(2, seconds);
    auto r1 = LoopbackRate(1, seconds);
    if (!r2.ok() || !r1.ok()) {
      std::fprintf(stderr, "gyre-machine-limits: %s\n",
                   (!r2.ok() ? r2.status() : r1.status()).ToString().c_str());
      return 1;
    }
    two.push_back(*r2);
    one.push_back(*r1);
  }
  auto latency = PingPongMicros(2000, /*split=*/false);
  auto split_latency = PingPongMicros(2000, /*split=*/true);
  if (!latency.ok() || !split_latency.ok()) {
    std::fprintf(stderr, "gyre-machine-limits: %s\n",
                 (!latency.ok() ? latency.status() : split_latency.status()).ToString().c_str());
    return 1;
  }
  auto handoff = MeasureHandoffs(5000);
  if (!handoff.ok()) {
    std::fprintf(stderr, "gyre-machine-limits: %s\n", handoff.status().ToString().c_str());
    return 1;
  }
  const double reduce = KernelRate(AddInto, 9);
  auto gyre_fn = GetReduceFn(DataType::kFloat32, ReduceOp::kSum);
  const double gyre_reduce =
      gyre_fn.ok() ? KernelRate([&](float* d, const float* s, size_t n) { (*gyre_fn)(d, s, n); }, 9)
                   : 0;
  const double copy = KernelRate(
      [](float* d, const float* s, size_t n) { std::memcpy(d, s, n * sizeof(float)); }, 9);
  const double c = *std::max_element(two.begin(), two.end());
  const double cpu_rt = CpuRoundTripNanos(20);
  if (json) {
    std::printf(
        "{\"impl\": \"machine\", \"loopback_2pairs_GBps\": %.3f, \"loopback_2pairs_median_GBps\": "
        "%.3f, \"loopback_1pair_GBps\": %.3f, \"pingpong_4B_oneway_us\": %.1f, "
        "\"pingpong_4B_oneway_split_us\": %.1f, \"reduce_f32_GBps\": %.3f, "
        "\"reduce_f32_gyre_GBps\": %.3f, \"memcpy_GBps\": %.3f, \"loopback_trials\": %d, "
        "\"cpu_rt_ns\": %.0f, \"handoff_process_rt_us\": %.1f, \"handoff_thread_rt_us\": %.1f}\n",
        c, Median(two), *std::max_element(one.begin(), one.end()), *latency, *split_latency, reduce,
        gyre_reduce, copy, kTrials, cpu_rt, handoff->process_us, handoff->thread_us);
  } else {
    std::printf("loopback TCP, 2 concurrent pairs (C): %.2f GB/s best, %.2f median of %d\n", c,
                Median(two), kTrials);
    std::printf("loopback TCP, 1 pair:                 %.2f GB/s best\n",
                *std::max_element(one.begin(), one.end()));
    std::printf("TCP ping-pong 4 B, one way:           %.1f us median\n", *latency);
    std::printf("  the same, one connection each way:  %.1f us median\n", *split_latency);
    std::printf("float32 a += b at 64 MiB (R):         %.2f GB/s (gyre's kernel %.2f)\n", reduce,
                gyre_reduce);
    std::printf("memcpy at 64 MiB:                     %.2f GB/s\n", copy);
    std::printf("cache line round trip, CPU 1 <-> 2:   %.0f ns median\n", cpu_rt);
    std::printf(
        "hand-off on one CPU, round trip:      %.1f us median between processes, "
        "%.1f between threads\n",
        handoff->process_us, handoff->thread_us);
  }
  return 0;
}

}  // namespace
}  // namespace gyre::bench

int main(int argc, char** argv) { return gyre::bench::Main(argc, argv); }
