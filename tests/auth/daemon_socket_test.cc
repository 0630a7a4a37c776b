// A real gyred (one rank, serve mode) and strangers on its client socket (a wrong secret, a
// replayed handshake, garbage before the handshake, a slow sender and 500 idle
// connections) and on its peer port. Each is refused with its reason in the daemon's log while a
// real program's calls through the same socket keep returning exact results, and the daemon's
// threads, descriptors and memory stay bounded (read from /proc/PID).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/include/gyre/gyre.h"
#include "core/algo/collective.h"
#include "core/auth/fd_handshake.h"
#include "core/auth/handshake.h"
#include "core/auth/secret.h"
#include "core/ipc/doorbell.h"
#include "core/ipc/ipc.h"
#include "core/transport/tcp/frame.h"
#include "proto/client.pb.h"
#include "tests/sanitizers.h"

namespace gyre {
namespace {

Deadline In(Duration d) { return Deadline::After(*SteadyClock::Get(), d); }

// Under AddressSanitizer (the daemon is built like this test) freed memory sits in
// quarantine, so resident memory is no measure there.
constexpr bool kMemoryIsMeaningful = !testing::kAddressSanitizer;

std::string BinDir() {
  const char* dir = std::getenv("GYRE_BIN_DIR");
  return dir != nullptr ? dir : ".";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int64_t ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) {
      return std::stoll(line.substr(field.size() + 1));
    }
  }
  return -1;
}

int ProcDescriptors(pid_t pid) {
  DIR* dir = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 2;
}

bool Eventually(const std::function<bool()>& condition, Duration timeout) {
  Deadline deadline = In(timeout);
  while (!condition()) {
    if (deadline.Expired(*SteadyClock::Get())) return false;
    std::this_thread::sleep_for(Millis(20));
  }
  return true;
}

int ConnectSocket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// True once the daemon closed the connection (EOF or reset) within `timeout`.
bool ClosedWithin(int fd, Duration timeout) {
  Deadline deadline = In(timeout);
  char sink[256];
  while (!deadline.Expired(*SteadyClock::Get())) {
    ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return true;
    }
    std::this_thread::sleep_for(Millis(5));
  }
  return false;
}

std::string Framed(const std::string& body) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((body.size() >> (8 * i)) & 0xff);
  return out + body;
}

// One gyred of a one-rank job, serving its client socket until the test ends.
// Starts gyred in serve mode, rank `rank` of `world` over the file store in `dir`, writing its
// output to `log`, with `env` ("NAME=value") added to its environment; returns its pid (-1 if
// fork failed).
pid_t StartGyred(const std::string& dir, int rank, int world, const std::string& job,
                 const std::string& secret_file, const std::string& socket, const std::string& log,
                 std::vector<std::string> env = {}) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  for (std::string& e : env) ::putenv(e.data());
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(fd, 2);
  ::dup2(fd, 1);
  const std::string gyred = BinDir() + "/gyred";
  std::vector<std::string> args = {gyred,
                                   "--rank=" + std::to_string(rank),
                                   "--world_size=" + std::to_string(world),
                                   "--store=file://" + dir + "/store",
                                   "--job_id=" + job,
                                   "--secret_file=" + secret_file,
                                   "--run=serve",
                                   "--timeout=60",
                                   "--socket=" + socket,
                                   "--exit_with_client=false"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(gyred.c_str(), argv.data());
  ::_exit(127);
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/gyre-dsock-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/rank0.sock";
    secret_file_ = dir_ + "/secret";
    log_ = dir_ + "/gyred.log";
    secret_ = *auth::Secret::Generate();
    ASSERT_TRUE(auth::WriteSecretFile(secret_file_, secret_).ok());
    pid_ = StartGyred(dir_, 0, 1, "dsock", secret_file_, socket_, log_, DaemonEnv());
    ASSERT_GE(pid_, 0);
    ASSERT_TRUE(Eventually(
        [&] { return ReadFile(log_).find("serving clients") != std::string::npos; }, Seconds(20)))
        << ReadFile(log_);
    ::setenv(auth::kSecretFileEnv, secret_file_.c_str(), 1);
    ::setenv("GYRE_JOB_ID", "dsock", 1);
  }

  void TearDown() override {
    ::unsetenv(auth::kSecretFileEnv);
    ::unsetenv("GYRE_JOB_ID");
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      if (!Eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, Seconds(10))) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    std::string cmd = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }

  // Added to the daemon's environment.
  virtual std::vector<std::string> DaemonEnv() { return {}; }

  // The daemon's log contains `text` (now or soon).
  bool Logged(const std::string& text) {
    return Eventually([&] { return ReadFile(log_).find(text) != std::string::npos; }, Seconds(5));
  }

  // A real program's call through the socket, checked exactly.
  Status Allreduce(Comm& comm, int salt) {
    std::vector<float> data(1000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i * salt % 97);
    std::vector<float> expected = data;
    GYRE_RETURN_IF_ERROR(comm.Allreduce(data.data(), data.data(), static_cast<int64_t>(data.size()),
                                        DataType::kFloat32, ReduceOp::kSum));
    if (data != expected) return InternalError("allreduce result differs");
    return Status::Ok();
  }

  std::string dir_, socket_, secret_file_, log_;
  auth::Secret secret_;
  pid_t pid_ = -1;
};

TEST_F(DaemonTest, TheJobsSecretIsServed) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE(Allreduce(**comm, 3).ok());
  struct stat st {};
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // owner-only socket
}

TEST_F(DaemonTest, WrongSecretIsRefusedWithItsReasonLogged) {
  // Through the client library with another job's secret file.
  const std::string other = dir_ + "/other-secret";
  ASSERT_TRUE(auth::WriteSecretFile(other, *auth::Secret::Generate()).ok());
  ::setenv(auth::kSecretFileEnv, other.c_str(), 1);
  auto refused = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("refused the handshake"), std::string::npos)
      << refused.status();
  EXPECT_TRUE(Logged("refused a client connection: wrong proof"));
  EXPECT_TRUE(Logged("[bad-proof]"));
  // Without any secret.
  ::unsetenv(auth::kSecretFileEnv);
  EXPECT_FALSE(Comm::ConnectDaemon(socket_, In(Seconds(10))).ok());
  // The right one still works.
  ::setenv(auth::kSecretFileEnv, secret_file_.c_str(), 1);
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE(Allreduce(**comm, 5).ok());
}

TEST_F(DaemonTest, ReplayedHandshakeIsRefused) {
  auth::Credentials me;
  me.secret = secret_;
  me.job_id = "dsock";
  auth::Connector connector(auth::Channel::kClient, &me, auth::kNoRank);
  int genuine = ConnectSocket(socket_);
  ASSERT_GE(genuine, 0);
  const std::string hello = *connector.Hello();
  std::string challenge, ack;
  ASSERT_TRUE(auth::WriteHandshakeMessage(genuine, hello, In(Seconds(5)), "t").ok());
  ASSERT_TRUE(auth::ReadHandshakeMessage(genuine, &challenge, In(Seconds(5)), "t").ok());
  const std::string proof = *connector.Proof(challenge);
  ASSERT_TRUE(auth::WriteHandshakeMessage(genuine, proof, In(Seconds(5)), "t").ok());
  ASSERT_TRUE(auth::ReadHandshakeMessage(genuine, &ack, In(Seconds(5)), "t").ok());
  ASSERT_TRUE(connector.CheckAck(ack).ok());
  ::close(genuine);

  int replay = ConnectSocket(socket_);
  ASSERT_TRUE(auth::WriteHandshakeMessage(replay, hello, In(Seconds(5)), "r").ok());
  ASSERT_TRUE(auth::ReadHandshakeMessage(replay, &challenge, In(Seconds(5)), "r").ok());
  ASSERT_TRUE(auth::WriteHandshakeMessage(replay, proof, In(Seconds(5)), "r").ok());
  EXPECT_TRUE(ClosedWithin(replay, Seconds(5)));
  ::close(replay);
  EXPECT_TRUE(Logged("replayed handshake"));
  EXPECT_TRUE(Logged("[replay]"));
}

// A send or receive the daemon's communicator refuses comes back as that error, and the
// connection serves the next call.
// Blocks from AllocBuffer are used in place at any offset: the results are exact and no byte
// is staged; heap buffers are staged in and out; FreeBuffer refuses what it did not give.
TEST_F(DaemonTest, AllocatedBuffersAreUsedInPlaceAndHeapBuffersAreStaged) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  const int64_t n = 100000;
  auto a = (*comm)->AllocBuffer(n * 4 + 64);
  auto b = (*comm)->AllocBuffer(n * 4 + 64);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  auto* in = reinterpret_cast<int32_t*>(static_cast<char*>(*a) + 12);
  auto* out = reinterpret_cast<int32_t*>(static_cast<char*>(*b) + 52);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 7 - 3);
  std::fill(out, out + n, -1);
  ASSERT_TRUE((*comm)->Allreduce(in, out, n, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_EQ((*comm)->last().bytes_staged, 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i]) << i;
  std::vector<int32_t> heap(n, 5), heap_out(n, 0);
  ASSERT_TRUE(
      (*comm)->Allreduce(heap.data(), heap_out.data(), n, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_EQ((*comm)->last().bytes_staged, 2 * n * 4);
  EXPECT_EQ(heap_out, heap);
  // One side in a block, the other staged.
  std::fill(out, out + n, -1);
  ASSERT_TRUE((*comm)->Allreduce(heap.data(), out, n, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_EQ((*comm)->last().bytes_staged, n * 4);
  EXPECT_EQ(std::vector<int32_t>(out, out + n), heap);
  EXPECT_EQ((*comm)->FreeBuffer(heap.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*comm)->FreeBuffer(*a).ok());
  EXPECT_EQ((*comm)->FreeBuffer(*a).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*comm)->FreeBuffer(*b).ok());
  // Blocks come and go without the daemon holding descriptors for them.
  const int fds = ProcDescriptors(pid_);
  for (int i = 0; i < 50; ++i) {
    auto c = (*comm)->AllocBuffer(1 << 16);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*comm)->FreeBuffer(*c).ok());
  }
  EXPECT_EQ(ProcDescriptors(pid_), fds);
  EXPECT_TRUE(Allreduce(**comm, 3).ok());
}

// A buffer that starts in a block from AllocBuffer but runs past its end is refused naming the
// block: staged through the socket instead, the copy read and wrote past the block, and the
// program crashed later. The Comm goes on.
TEST_F(DaemonTest, ABufferRunningPastItsBlockIsRefused) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto block = (*comm)->AllocBuffer(400);
  ASSERT_TRUE(block.ok()) << block.status();
  auto* q = static_cast<int32_t*>(*block);
  Status s = (*comm)->Allreduce(q, q, 2000, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("the input buffer (8000 bytes at offset 0) runs past the end of its "
                             "AllocBuffer block of 400 bytes"),
            std::string::npos)
      << s;
  // From the middle, past the 400 bytes asked for (though inside the page they were given).
  s = (*comm)->Allreduce(q + 90, q + 90, 20, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  // A send's or receive's buffer the same, before anything goes to the daemon.
  s = (*comm)->Send(q + 50, 60, DataType::kInt32, 0, 7);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("the message buffer (240 bytes at offset 200) runs past the end of "
                             "its AllocBuffer block of 400 bytes"),
            std::string::npos)
      << s;
  s = (*comm)->Recv(q, 101, DataType::kInt32, 0, 7);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("the message buffer (404 bytes at offset 0) runs past"),
            std::string::npos)
      << s;
  // What fits is used in place.
  ASSERT_TRUE((*comm)->Allreduce(q, q, 100, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_EQ((*comm)->last().bytes_staged, 0);
  EXPECT_TRUE((*comm)->FreeBuffer(*block).ok());
  EXPECT_TRUE(Allreduce(**comm, 3).ok());
}

// A buffer that runs from one block from AllocBuffer on into the next one in memory is the
// program's memory all through (an embedded rank takes it): it was refused as running past
// its block. It is staged like a buffer in no block, with exact results; one that runs on
// past the second block is still refused.
TEST_F(DaemonTest, ABufferAcrossAdjacentBlocksIsStaged) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  constexpr size_t kBlock = 64 << 10;
  // New mappings go next to the ones before them; find two blocks that touch.
  std::vector<void*> blocks;
  char* low = nullptr;
  char* high = nullptr;
  for (int i = 0; i < 32 && low == nullptr; ++i) {
    auto b = (*comm)->AllocBuffer(kBlock);
    ASSERT_TRUE(b.ok()) << b.status();
    char* made = static_cast<char*>(*b);
    for (void* v : blocks) {
      char* other = static_cast<char*>(v);
      if (other + kBlock == made) {
        low = other;
        high = made;
      } else if (made + kBlock == other) {
        low = made;
        high = other;
      }
    }
    blocks.push_back(made);
  }
  ASSERT_NE(low, nullptr) << "no two of " << blocks.size() << " blocks are adjacent";
  ASSERT_EQ(high, low + kBlock);
  const int64_t n = kBlock / 4;  // 64 KiB of int32 from the middle of the lower block
  auto* in = reinterpret_cast<int32_t*>(low + kBlock / 2);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 3 + 1);
  std::vector<int32_t> expect(in, in + n);
  std::vector<int32_t> out(n, -1);
  Status s = (*comm)->Allreduce(in, out.data(), n, DataType::kInt32, ReduceOp::kSum);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ((*comm)->last().bytes_staged, 2 * n * 4);
  EXPECT_EQ(out, expect);
  // As the output too, in place: the result is written back across both blocks.
  std::fill(in, in + n, 9);
  s = (*comm)->Allreduce(in, in, n, DataType::kInt32, ReduceOp::kSum);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::vector<int32_t>(in, in + n), std::vector<int32_t>(n, 9));
  // Past the end of the second block (nothing mapped after it): refused, naming the first.
  for (auto it = blocks.begin(); it != blocks.end(); ++it) {
    if (*it == high + kBlock) {
      EXPECT_TRUE((*comm)->FreeBuffer(*it).ok());
      blocks.erase(it);
      break;
    }
  }
  s = (*comm)->Allreduce(in, in, n + kBlock / 4, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("runs past the end of its AllocBuffer block of 65536 bytes"),
            std::string::npos)
      << s;
  for (void* b : blocks) EXPECT_TRUE((*comm)->FreeBuffer(b).ok());
  EXPECT_TRUE(Allreduce(**comm, 3).ok());
}

// A Comm destroyed while its daemon is stopped (SIGSTOP) says goodbye and waits for the answer
// a second at most: the program does not wait out the daemon's 10 s silence, or forever.
TEST_F(DaemonTest, AGoodbyeToAStoppedDaemonDoesNotHoldTheProgram) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE(Allreduce(**comm, 3).ok());
  ASSERT_EQ(::kill(pid_, SIGSTOP), 0);
  const auto start = std::chrono::steady_clock::now();
  comm->reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::kill(pid_, SIGCONT);
  EXPECT_LT(seconds, 5.0);
  // Resumed, the daemon serves a new program.
  auto again = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Allreduce(**again, 3).ok());
}

// A deadline that has already passed is refused at once, in the call's place in the sequence:
// it went to the daemon as 1 ms and a small call could still run and pass, or a large one
// fail with the others blamed. The next call runs.
TEST_F(DaemonTest, ACallWhoseDeadlineHasPassedIsRefused) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  Options o;
  o.deadline = Deadline::After(*SteadyClock::Get(), Duration::zero());
  std::vector<int32_t> v(16, 1);
  Status s = (*comm)->Allreduce(v.data(), v.data(), 16, DataType::kInt32, ReduceOp::kSum, o);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("the call's deadline (Options::deadline) had passed"),
            std::string::npos)
      << s;
  EXPECT_TRUE(Allreduce(**comm, 3).ok());
}

// Shared memory is reserved when it is made, and more than the host has available is refused
// before the reservation (which would end in the OOM killer): a clear error, never a SIGBUS
// later, and calls that fit go on.
TEST_F(DaemonTest, MoreSharedMemoryThanTheHostHasIsAClearErrorAndCallsThatFitGoOn) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto big = (*comm)->AllocBuffer(size_t{1} << 50);  // a pebibyte
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status();
  EXPECT_NE(big.status().message().find("bytes available"), std::string::npos) << big.status();
  // A block that fits works, in place.
  auto fits = (*comm)->AllocBuffer(64 << 10);
  ASSERT_TRUE(fits.ok()) << fits.status();
  auto* v = static_cast<int32_t*>(*fits);
  for (int i = 0; i < 1000; ++i) v[i] = i;
  ASSERT_TRUE((*comm)->Allreduce(v, v, 1000, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_EQ(v[999], 999);
  EXPECT_TRUE(Allreduce(**comm, 13).ok());
  EXPECT_TRUE((*comm)->FreeBuffer(*fits).ok());
}

// A program out of file descriptors cannot make the memfd of a new buffer: AllocBuffer says
// so, and once descriptors are free again the same Comm allocates and calls.
TEST_F(DaemonTest, AllocBufferOutOfDescriptorsIsAClearErrorAndTheCommGoesOn) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 256);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int f; filler.size() < 256 && (f = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
    filler.push_back(f);
  }
  const int open_errno = errno;
  auto refused = (*comm)->AllocBuffer(4096);
  for (int f : filler) ::close(f);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_EQ(open_errno, EMFILE);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("memfd_create"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find(std::strerror(EMFILE)), std::string::npos)
      << refused.status();
  auto fits = (*comm)->AllocBuffer(4096);
  ASSERT_TRUE(fits.ok()) << fits.status();
  auto* v = static_cast<int32_t*>(*fits);
  for (int i = 0; i < 1000; ++i) v[i] = 3 * i;
  ASSERT_TRUE((*comm)->Allreduce(v, v, 1000, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_EQ(v[999], 2997);
  EXPECT_TRUE((*comm)->FreeBuffer(*fits).ok());
  EXPECT_TRUE(Allreduce(**comm, 19).ok());
}

// A client that keeps allocating runs into the daemon's cap of 4096 regions per connection
// with an error saying so, and can allocate again once it frees one.
TEST_F(DaemonTest, TheRegionCapIsAClearErrorAndFreeingMakesRoom) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<void*> blocks;
  Status refused;
  for (int i = 0; i < 5000 && refused.ok(); ++i) {
    auto b = (*comm)->AllocBuffer(4096);
    if (b.ok()) {
      blocks.push_back(*b);
    } else {
      refused = b.status();
    }
  }
  EXPECT_EQ(blocks.size(), 4096u);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("4096 shared buffers"), std::string::npos) << refused;
  ASSERT_FALSE(blocks.empty());
  EXPECT_TRUE((*comm)->FreeBuffer(blocks.back()).ok());
  blocks.pop_back();
  auto again = (*comm)->AllocBuffer(4096);
  ASSERT_TRUE(again.ok()) << again.status();
  blocks.push_back(*again);
  for (void* b : blocks) EXPECT_TRUE((*comm)->FreeBuffer(b).ok());
  EXPECT_TRUE(Allreduce(**comm, 17).ok());
}

// A request naming a region the client never mapped, or bytes past a region's end, is
// refused with the region named, and the connection serves the next request.
// Whether every thread of `pid` is stopped (state T): SIGSTOP takes effect thread by thread,
// after kill() returns.
bool AllThreadsStopped(pid_t pid) {
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(task.c_str());
  if (dir == nullptr) return false;
  bool stopped = true;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string stat = ReadFile(task + "/" + e->d_name + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() ||
        (stat[paren + 2] != 't' && stat[paren + 2] != 'T')) {
      stopped = false;
    }
  }
  closedir(dir);
  return stopped;
}

// A raw client that has proved the secret and said hello; -1 on failure.
int HelloClient(const std::string& socket, const auth::Secret& secret) {
  int fd = ConnectSocket(socket);
  if (fd < 0) return -1;
  auth::Credentials me;
  me.secret = secret;
  me.job_id = "dsock";
  proto::ClientRequest hello;
  hello.set_id(1);
  hello.mutable_hello()->set_protocol_version(1);
  proto::ClientResponse resp;
  if (!auth::ConnectOnFd(fd, auth::Channel::kClient, me, auth::kNoRank, In(Seconds(5)), "test")
           .ok() ||
      !ipc::WriteMessage(fd, hello, In(Seconds(5)), "test").ok() ||
      !ipc::ReadMessage(fd, &resp, In(Seconds(10)), "test").ok() || resp.status().code() != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A memfd of `bytes`, mapped here (null on failure); *fd is its descriptor. `seal`: sealed
// against shrinking, as the daemon requires.
void* SharedMemory(size_t bytes, int* fd, bool seal = true) {
  *fd = ::memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (*fd < 0 || ::ftruncate(*fd, static_cast<off_t>(bytes)) != 0) return nullptr;
  if (seal && ::fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) return nullptr;
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  return m == MAP_FAILED ? nullptr : m;
}

proto::ClientResponse Attach(int fd, int memory, uint64_t bytes) {
  proto::ClientRequest req;
  req.set_id(2);
  req.mutable_attach_doorbell()->set_bytes(bytes);
  proto::ClientResponse resp;
  EXPECT_TRUE(ipc::WriteMessageWithFd(fd, req, memory, In(Seconds(5)), "test").ok());
  EXPECT_TRUE(ipc::ReadMessage(fd, &resp, In(Seconds(10)), "test").ok());
  return resp;
}

// A raw client with a doorbell attached (its block, a memfd, unmapped and closed with it).
struct AttachedClient {
  int fd = -1, memory = -1;
  void* block = nullptr;
  AttachedClient(const std::string& socket, const auth::Secret& secret) {
    fd = HelloClient(socket, secret);
    block = SharedMemory(ipc::Doorbell::kBlockBytes, &memory);
    if (fd < 0 || block == nullptr) return;
    ipc::Doorbell::Create(block);
    if (Attach(fd, memory, ipc::Doorbell::kBlockBytes).status().code() != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~AttachedClient() {
    if (fd >= 0) ::close(fd);
    if (memory >= 0) ::close(memory);
    if (block != nullptr) ::munmap(block, ipc::Doorbell::kBlockBytes);
  }
};

// An allreduce of 16 float32 in place, its buffers in region 0 at offset 0 unless changed.
proto::ClientRequest AllreduceRequest(uint64_t id) {
  proto::ClientRequest req;
  req.set_id(id);
  proto::CollectiveCall* c = req.mutable_collective();
  c->set_collective(static_cast<int>(algo::Collective::kAllreduce));
  c->set_count(16);
  c->set_dtype(static_cast<int>(DataType::kFloat32));
  c->set_has_input(true);
  c->set_has_output(true);
  return req;
}

TEST_F(DaemonTest, RequestsOutsideTheMappedRegionsAreRefused) {
  const int fd = HelloClient(socket_, secret_);
  ASSERT_GE(fd, 0);
  uint64_t id = 1;
  // `pass`: a descriptor that goes with the request.
  auto ask = [&](proto::ClientRequest req, int pass = -1) {
    req.set_id(++id);
    proto::ClientResponse resp;
    EXPECT_TRUE((pass >= 0 ? ipc::WriteMessageWithFd(fd, req, pass, In(Seconds(5)), "test")
                           : ipc::WriteMessage(fd, req, In(Seconds(5)), "test"))
                    .ok());
    do {
      EXPECT_TRUE(ipc::ReadMessage(fd, &resp, In(Seconds(10)), "test").ok());
    } while (resp.id() == 0 && !::testing::Test::HasFailure());
    return resp;
  };
  proto::ClientRequest unmapped = AllreduceRequest(0);
  proto::CollectiveCall* c = unmapped.mutable_collective();
  c->set_input_region(5);
  // Nothing mapped yet: no region could hold the call.
  proto::ClientResponse r = ask(unmapped);
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_NE(r.status().message().find("does not fit any mapped shared memory"), std::string::npos)
      << r.DebugString();

  // Map a 4 KiB region 2; region 5 is still unknown, and bytes past region 2's end refused.
  int region_fd = -1;
  void* region = SharedMemory(4096, &region_fd);
  ASSERT_NE(region, nullptr);
  proto::ClientRequest map;
  map.mutable_map_buffer()->set_bytes(4096);
  map.mutable_map_buffer()->set_region(2);
  EXPECT_EQ(ask(map, region_fd).status().code(), 0);
  r = ask(unmapped);
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_NE(r.status().message().find("names shared buffer 5, which this client has not mapped"),
            std::string::npos)
      << r.DebugString();
  c->set_input_region(2);
  c->set_output_region(2);
  c->set_count(1024);  // exactly 4 KiB: fits
  EXPECT_EQ(ask(unmapped).status().code(), 0);
  c->set_output_offset(4);  // one float past the end
  r = ask(unmapped);
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_NE(r.status().message().find("does not fit shared buffer 2 of 4096 bytes"),
            std::string::npos)
      << r.DebugString();
  c->set_count(int64_t{1} << 61);  // sizes that would overflow are refused first
  r = ask(unmapped);
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kInvalidArgument));

  // The memory the daemon maps cannot be shrunk under it: the seal refuses the truncation
  // that would have been a SIGBUS in the daemon, and calls on the region go on.
  EXPECT_NE(::ftruncate(region_fd, 0), 0);
  EXPECT_EQ(errno, EPERM);
  c->set_output_offset(0);
  c->set_count(1024);
  EXPECT_EQ(ask(unmapped).status().code(), 0);

  // A map request without its descriptor, or with memory smaller than announced, of no bytes,
  // not sealed against shrinking, a plain file, or a pipe: refused, the reason named.
  auto refused = [&](proto::ClientRequest req, int pass, const std::string& reason) {
    req.mutable_map_buffer()->set_region(3);
    proto::ClientResponse resp = ask(req, pass);
    EXPECT_EQ(resp.status().code(), static_cast<int>(StatusCode::kInvalidArgument));
    EXPECT_NE(resp.status().message().find(reason), std::string::npos)
        << reason << " | " << resp.DebugString();
  };
  refused(map, -1, "the request came without its file descriptor");
  proto::ClientRequest bad_map = map;
  bad_map.mutable_map_buffer()->set_bytes(8192);
  refused(bad_map, region_fd, "holds 4096 bytes, fewer than the 8192 announced");
  bad_map.mutable_map_buffer()->set_bytes(0);
  refused(bad_map, region_fd, "a buffer of 0 bytes");
  int loose_fd = -1;
  void* loose = SharedMemory(4096, &loose_fd, /*seal=*/false);
  ASSERT_NE(loose, nullptr);
  refused(map, loose_fd, "not sealed against shrinking");
  const std::string file = dir_ + "/region";
  const int file_fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(file_fd, 0);
  ASSERT_EQ(::ftruncate(file_fd, 4096), 0);
  // Off a tmpfs it is not shared memory; on one (a /tmp that is tmpfs) it is not sealed.
  {
    map.mutable_map_buffer()->set_region(3);
    const std::string m = ask(map, file_fd).status().message();
    EXPECT_TRUE(m.find("not ordinary shared memory") != std::string::npos ||
                m.find("not sealed against shrinking") != std::string::npos)
        << m;
  }
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  refused(map, pipe_fds[0], "it is not a regular file");
  // A sealed memfd on hugetlbfs: a hole punched in it can leave a page nobody can fault in.
  const int huge_fd = ::memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
  if (huge_fd >= 0 && ::ftruncate(huge_fd, 2 << 20) == 0 &&
      ::fcntl(huge_fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0) {
    refused(map, huge_fd, "not ordinary shared memory");
  } else {
    std::printf("no hugetlbfs memfd here (%s): that case is not run\n", std::strerror(errno));
  }
  if (huge_fd >= 0) ::close(huge_fd);
  // None of those took region 3: a call naming it is refused as unmapped.
  c->set_input_region(3);
  r = ask(unmapped);
  EXPECT_NE(r.status().message().find("names shared buffer 3, which this client has not mapped"),
            std::string::npos)
      << r.DebugString();

  proto::ClientRequest unmap;
  unmap.mutable_unmap_buffer()->set_region(0);  // the staging area is never unmapped
  EXPECT_EQ(ask(unmap).status().code(), static_cast<int>(StatusCode::kInvalidArgument));
  unmap.mutable_unmap_buffer()->set_region(2);
  EXPECT_EQ(ask(unmap).status().code(), 0);
  EXPECT_EQ(ask(unmap).status().code(), static_cast<int>(StatusCode::kInvalidArgument));
  ::close(fd);
  for (int f : {region_fd, loose_fd, file_fd, pipe_fds[0], pipe_fds[1]}) ::close(f);
  ::munmap(region, 4096);
  ::munmap(loose, 4096);
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE(Allreduce(**comm, 11).ok());
}

// A call request a program did not build with the client library: a refusal with no reason,
// an unknown status code, or values outside every enum (collective, algorithm, dtype, op),
// refused or not. Each is answered with a refusal naming what was wrong and takes its place in
// the sequence; the daemon neither crashes nor loses its count, so a good call still runs.
TEST_F(DaemonTest, HostileCallRequestsAreRefusedInSequenceAndTheDaemonGoesOn) {
  const int fd = HelloClient(socket_, secret_);
  ASSERT_GE(fd, 0);
  uint64_t id = 1;
  auto ask = [&](proto::ClientRequest req) {
    req.set_id(++id);
    proto::ClientResponse resp;
    EXPECT_TRUE(ipc::WriteMessage(fd, req, In(Seconds(5)), "test").ok());
    do {
      EXPECT_TRUE(ipc::ReadMessage(fd, &resp, In(Seconds(10)), "test").ok());
    } while (resp.id() == 0 && !::testing::Test::HasFailure());
    return resp;
  };
  struct Case {
    std::string name;
    std::function<void(proto::CollectiveCall*)> edit;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"refused without a reason",
       [](proto::CollectiveCall* c) { c->mutable_refused()->set_code(0); },
       "a refused call without a reason"},
      {"refused with an unknown code",
       [](proto::CollectiveCall* c) {
         c->mutable_refused()->set_code(999);
         c->mutable_refused()->set_message("null buffer");
       },
       "null buffer (refused with status code 999)"},
      {"refused with values outside every enum",
       [](proto::CollectiveCall* c) {
         c->set_collective(99);
         c->set_algorithm(-7);
         c->set_dtype(1000);
         c->set_reduce_op(-3);
         c->mutable_refused()->set_code(static_cast<int>(StatusCode::kInvalidArgument));
         c->mutable_refused()->set_message("bad root");
       },
       "bad root"},
      {"unknown collective", [](proto::CollectiveCall* c) { c->set_collective(99); },
       "unknown collective or algorithm value"},
      {"unknown algorithm", [](proto::CollectiveCall* c) { c->set_algorithm(1 << 20); },
       "unknown collective or algorithm value"},
      {"unknown dtype", [](proto::CollectiveCall* c) { c->set_dtype(1000); }, "dtype"},
      {"unknown reduce op", [](proto::CollectiveCall* c) { c->set_reduce_op(-3); }, "op"},
      {"deterministic outside -1..1", [](proto::CollectiveCall* c) { c->set_deterministic(7); },
       "deterministic is 7 in request: want -1 (the job's default), 0 (off) or 1"},
  };
  uint64_t last_seq = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    proto::ClientRequest req = AllreduceRequest(0);
    k.edit(req.mutable_collective());
    const proto::ClientResponse r = ask(req);
    EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kInvalidArgument)) << r.DebugString();
    EXPECT_NE(r.status().message().find(k.reason), std::string::npos) << r.DebugString();
    // Each refusal takes the next seq, as a call that ran would.
    EXPECT_GT(r.seq(), last_seq) << r.DebugString();
    last_seq = r.seq();
  }
  ::close(fd);
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE(Allreduce(**comm, 11).ok());
}

#ifdef GYRE_SEAL_RACE_SHIM
// The client can still truncate a memfd and then seal it while the daemon checks it. With
// tests/auth/seal_race_shim.cc preloaded, this gyred's seal read waits until the test has done
// both, so the race is lost every time by a daemon that reads the size before the seals: it
// would map a mebibyte that is gone and die of SIGBUS at the call that touches it. Reading
// the seals first, it sees the truncation and refuses the buffer.
class DaemonSealRaceTest : public DaemonTest {
 protected:
  void SetUp() override {
    // An ASan gyred refuses to start with another library preloaded before its runtime.
    if (testing::kAddressSanitizer) GTEST_SKIP() << "a preload cannot come before ASan's runtime";
    DaemonTest::SetUp();
  }
  std::vector<std::string> DaemonEnv() override {
    return {std::string("LD_PRELOAD=") + GYRE_SEAL_RACE_SHIM,
            "GYRE_TEST_RACE_MARK=" + dir_ + "/race-mark"};
  }
};

TEST_F(DaemonSealRaceTest, MemoryTruncatedAndSealedDuringTheChecksIsRefusedNotMapped) {
  const int fd = HelloClient(socket_, secret_);
  ASSERT_GE(fd, 0);
  const size_t bytes = 1 << 20;
  const int race = ::memfd_create("gyre-test-race", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(race, 0);
  ASSERT_EQ(::ftruncate(race, static_cast<off_t>(bytes)), 0);
  proto::ClientRequest map;
  map.set_id(2);
  map.mutable_map_buffer()->set_bytes(bytes);
  map.mutable_map_buffer()->set_region(2);
  ASSERT_TRUE(ipc::WriteMessageWithFd(fd, map, race, In(Seconds(5)), "test").ok());
  // The daemon is inside its checks: truncate, then seal, as a hostile client would.
  ASSERT_TRUE(
      Eventually([&] { return ::access((dir_ + "/race-mark").c_str(), F_OK) == 0; }, Seconds(10)))
      << ReadFile(log_);
  ASSERT_EQ(::ftruncate(race, 0), 0);
  ASSERT_EQ(::fcntl(race, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  proto::ClientResponse r;
  ASSERT_TRUE(ipc::ReadMessage(fd, &r, In(Seconds(15)), "test").ok());
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kInvalidArgument)) << r.DebugString();
  EXPECT_NE(r.status().message().find("holds 0 bytes, fewer than the 1048576 announced"),
            std::string::npos)
      << r.DebugString();
  // A call on the region finds nothing mapped (had it been mapped, this would be the SIGBUS).
  proto::ClientRequest call = AllreduceRequest(3);
  call.mutable_collective()->set_input_region(2);
  call.mutable_collective()->set_output_region(2);
  call.mutable_collective()->set_output_offset(64);  // out of place: one rank copies, touching it
  ASSERT_TRUE(ipc::WriteMessage(fd, call, In(Seconds(5)), "test").ok());
  do {
    ASSERT_TRUE(ipc::ReadMessage(fd, &r, In(Seconds(10)), "test").ok()) << ReadFile(log_);
  } while (r.id() == 0);
  EXPECT_NE(r.status().message().find("does not fit any mapped shared memory"), std::string::npos)
      << r.DebugString();
  ::close(fd);
  ::close(race);
  EXPECT_EQ(::kill(pid_, 0), 0) << "gyred died: " << ReadFile(log_);
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE(Allreduce(**comm, 13).ok());
}
#endif  // GYRE_SEAL_RACE_SHIM

#ifdef GYRE_NOTHREAD_SHIM
// A gyred that cannot start a connection's heartbeat thread (tests/auth/nothread_shim.cc
// refuses every thread not started by the main thread, as RLIMIT_NPROC or a full address
// space would) answers the program's hello with why, naming the rank, and goes on; it aborted
// on the uncaught std::system_error before.
class DaemonNoThreadTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (testing::kAddressSanitizer) GTEST_SKIP() << "a preload cannot come before ASan's runtime";
    DaemonTest::SetUp();
  }
  std::vector<std::string> DaemonEnv() override {
    return {std::string("LD_PRELOAD=") + GYRE_NOTHREAD_SHIM};
  }
};

TEST_F(DaemonNoThreadTest, NoHeartbeatThreadIsAnErrorForTheProgramNotAnAbort) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
    ASSERT_FALSE(comm.ok()) << "attempt " << attempt;
    EXPECT_EQ(comm.status().code(), StatusCode::kResourceExhausted) << comm.status();
    EXPECT_NE(comm.status().message().find(
                  "rank 0's gyred cannot start a thread: Resource temporarily unavailable"),
              std::string::npos)
        << comm.status();
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;  // reaped: nothing for TearDown to stop
      FAIL() << "gyred ended (status " << status << "): " << ReadFile(log_);
    }
  }
  EXPECT_TRUE(Logged("cannot start a thread")) << ReadFile(log_);
  EXPECT_EQ(ReadFile(log_).find("terminate called"), std::string::npos) << ReadFile(log_);
}
#endif  // GYRE_NOTHREAD_SHIM

// Once a client attaches a doorbell its requests and answers go through shared memory; a
// block that is no doorbell is refused, and a client that writes nonsense into the slot, or
// goes on writing to its socket, is dropped with the reason logged, and the daemon goes on.
TEST_F(DaemonTest, DoorbellRequestsAreAnsweredAndAbuseDropsOnlyThatClient) {
  // The daemon goes on: a program that comes after a dropped client is served.
  auto served_afresh = [&](int32_t value) {
    auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
    return comm.ok() && Allreduce(**comm, value).ok();
  };
  const size_t bytes = ipc::Doorbell::kBlockBytes;
  int fd = HelloClient(socket_, secret_);
  ASSERT_GE(fd, 0);
  // Zeros of the right size: no doorbell. Memory shorter than announced: refused too.
  int blank = -1;
  void* zeros = SharedMemory(bytes, &blank);
  ASSERT_NE(zeros, nullptr);
  proto::ClientResponse r = Attach(fd, blank, bytes);
  EXPECT_NE(r.status().message().find("not a gyre doorbell"), std::string::npos) << r.DebugString();
  int tiny = -1;
  void* tiny_map = SharedMemory(4096, &tiny);
  ASSERT_NE(tiny_map, nullptr);
  r = Attach(fd, tiny, bytes);
  EXPECT_NE(r.status().message().find("holds 4096 bytes, fewer than the"), std::string::npos)
      << r.DebugString();

  // A real doorbell: requests through it are answered through it, errors included.
  ipc::Doorbell bell = ipc::Doorbell::Create(zeros);
  ASSERT_EQ(Attach(fd, blank, bytes).status().code(), 0);
  auto call = [&](const proto::ClientRequest& req) {
    uint32_t seq = 0;
    proto::ClientResponse resp;
    EXPECT_TRUE(bell.PostRequest(req, &seq).ok());
    const Deadline deadline = In(Seconds(10));
    while (!bell.WaitAnswer(seq, ipc::WaitPolicy{}, Millis(100)) &&
           !deadline.Expired(*SteadyClock::Get())) {
    }
    EXPECT_TRUE(bell.ReadAnswer(&resp).ok());
    EXPECT_EQ(resp.id(), req.id());
    return resp;
  };
  r = call(AllreduceRequest(3));
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_NE(r.status().message().find("does not fit any mapped shared memory"), std::string::npos)
      << r.DebugString();
  proto::ClientRequest again;
  again.set_id(4);
  again.mutable_attach_doorbell()->set_bytes(bytes);
  r = call(again);
  EXPECT_NE(r.status().message().find("attached already"), std::string::npos) << r.DebugString();

  // Through the doorbell a buffer's descriptor comes ahead on the socket, on an empty request.
  int block = -1;
  void* block_map = SharedMemory(4096, &block);
  ASSERT_NE(block_map, nullptr);
  ASSERT_TRUE(
      ipc::WriteMessageWithFd(fd, proto::ClientRequest(), block, In(Seconds(5)), "test").ok());
  proto::ClientRequest map;
  map.set_id(5);
  map.mutable_map_buffer()->set_bytes(4096);
  map.mutable_map_buffer()->set_region(1);
  EXPECT_EQ(call(map).status().code(), 0) << call(map).DebugString();
  proto::ClientRequest on_it = AllreduceRequest(6);
  on_it.mutable_collective()->set_input_region(1);
  on_it.mutable_collective()->set_output_region(1);
  EXPECT_EQ(call(on_it).status().code(), 0);
  // One that never comes: the request fails by a deadline, and the connection goes on.
  map.set_id(7);
  r = call(map);
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kDeadlineExceeded)) << r.DebugString();
  EXPECT_NE(r.status().message().find("the file descriptor announced through the doorbell"),
            std::string::npos)
      << r.DebugString();
  on_it.set_id(8);
  EXPECT_EQ(call(on_it).status().code(), 0);

  // A length past the slot's end, rung: the daemon drops this client and names why. Post
  // writes a good request; its length is overwritten after, as a hostile program could,
  // while the daemon is stopped so that it reads the slot only after.
  const uint32_t huge = 0x7fffffffu;
  uint32_t seq = 0;
  proto::ClientRequest any;
  any.set_id(9);
  ASSERT_EQ(::kill(pid_, SIGSTOP), 0);
  ASSERT_TRUE(Eventually([&] { return AllThreadsStopped(pid_); }, Seconds(10)));
  EXPECT_TRUE(bell.PostRequest(any, &seq).ok());
  std::memcpy(static_cast<unsigned char*>(zeros) + ipc::Doorbell::kHeaderBytes, &huge, 4);
  ASSERT_EQ(::kill(pid_, SIGCONT), 0);
  EXPECT_TRUE(ClosedWithin(fd, Seconds(10)));
  ::close(fd);
  EXPECT_TRUE(Logged("claims 2147483647 bytes"));
  EXPECT_TRUE(served_afresh(3));

  // Bytes on the socket after the attach: dropped, named.
  {
    AttachedClient stray(socket_, secret_);
    ASSERT_GE(stray.fd, 0);
    ASSERT_TRUE(SendAll(stray.fd, "stray"));
    EXPECT_TRUE(ClosedWithin(stray.fd, Seconds(10)));
  }
  EXPECT_TRUE(Logged("wrote to its socket after attaching a doorbell"));
  EXPECT_TRUE(served_afresh(9));

  // One stray byte, the start of no whole message: dropped within about a second, named.
  {
    AttachedClient stray(socket_, secret_);
    ASSERT_GE(stray.fd, 0);
    ASSERT_TRUE(SendAll(stray.fd, std::string(1, '\x01')));
    EXPECT_TRUE(ClosedWithin(stray.fd, Seconds(4)));
  }
  EXPECT_TRUE(Logged("an incomplete message"));

  // Descriptors without requests to take them: past MessageReader::kMaxHeldFds, dropped.
  {
    AttachedClient hoarder(socket_, secret_);
    ASSERT_GE(hoarder.fd, 0);
    for (size_t i = 0; i <= ipc::MessageReader::kMaxHeldFds; ++i) {
      if (!ipc::WriteMessageWithFd(hoarder.fd, proto::ClientRequest(), block, In(Seconds(5)),
                                   "test")
               .ok()) {
        break;
      }
    }
    EXPECT_TRUE(ClosedWithin(hoarder.fd, Seconds(10)));
  }
  EXPECT_TRUE(Logged("more file descriptors"));
  EXPECT_TRUE(served_afresh(10));
  for (int f : {blank, tiny, block}) ::close(f);
  ::munmap(zeros, bytes);
  ::munmap(tiny_map, 4096);
  ::munmap(block_map, 4096);
}

// The doorbell is shared memory, which outlives the daemon: the program learns of the death
// from the socket, looked at between sleeps, and its call fails naming the daemon.
TEST_F(DaemonTest, ACallToADeadDaemonFailsInsteadOfWaiting) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE(Allreduce(**comm, 2).ok());
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid_, &status, 0), pid_);
  pid_ = -1;
  Status s = Allreduce(**comm, 4);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("daemon at " + socket_), std::string::npos) << s;
  EXPECT_NE(s.message().find("the daemon exited"), std::string::npos) << s;
  // The channel is gone: a later call is not posted at all, and says why.
  Status again = Allreduce(**comm, 5);
  EXPECT_EQ(again.code(), StatusCode::kUnavailable) << again;
  EXPECT_NE(again.message().find("an earlier call through the daemon at " + socket_ + " failed"),
            std::string::npos)
      << again;
  EXPECT_NE(again.message().find("make a new one"), std::string::npos) << again;
  // Nor is shared memory made and passed for a new buffer: it would sit in a live daemon with
  // no request to take it. The buffer is refused with the channel's first failure.
  auto block = (*comm)->AllocBuffer(4096);
  ASSERT_FALSE(block.ok());
  EXPECT_NE(block.status().message().find("an earlier call through the daemon at " + socket_),
            std::string::npos)
      << block.status();
}

// Queued asynchronous calls must not run on a Comm being destroyed (its shared memory is
// unmapped): the one running finishes, the others come back Aborted, and the daemon goes on.
TEST_F(DaemonTest, DestroyingACommWithQueuedCallsAbortsThemInsteadOfCrashing) {
  std::vector<std::shared_ptr<Work>> works;
  constexpr int64_t kCount = int64_t{8} << 20;  // 32 MiB of floats each, staged
  std::vector<std::vector<float>> data(6, std::vector<float>(kCount, 1.0f));
  {
    auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    for (auto& d : data) {
      works.push_back(
          (*comm)->AllreduceAsync(d.data(), d.data(), kCount, DataType::kFloat32, ReduceOp::kSum));
    }
  }  // destroyed with calls still queued
  int aborted = 0;
  for (auto& w : works) {
    Status st = w->Wait(In(Seconds(30)));
    EXPECT_TRUE(st.ok() || st.code() == StatusCode::kAborted) << st;
    if (st.code() == StatusCode::kAborted) {
      ++aborted;
      EXPECT_NE(st.message().find("not run: its Comm was destroyed"), std::string::npos) << st;
    }
  }
  std::printf("%d of %zu queued calls aborted\n", aborted, works.size());
  auto other = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(Allreduce(**other, 7).ok());
}

TEST_F(DaemonTest, AnEndlessTimeoutIsTheLongestAndANegativeOneIsRefused) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  int32_t v[4] = {1, 2, 3, 4};
  Options forever;
  forever.timeout = Duration::max();
  EXPECT_TRUE((*comm)->Allreduce(v, v, 4, DataType::kInt32, ReduceOp::kSum, forever).ok());
  EXPECT_EQ(v[3], 4);
  Options negative;
  negative.timeout = -Seconds(1);
  Status s = (*comm)->Allreduce(v, v, 4, DataType::kInt32, ReduceOp::kSum, negative);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("Options::timeout is negative"), std::string::npos) << s;
  EXPECT_TRUE(Allreduce(**comm, 8).ok());
}

// SIGTERM while the daemon accepts and reaps client connections: the handler must not take a
// lock the interrupted thread holds (it did, and about half of such daemons never exited).
TEST_F(DaemonTest, SigtermWhileClientsComeAndGoEndsTheDaemon) {
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop) {
      int fd = ConnectSocket(socket_);
      if (fd >= 0) ::close(fd);
    }
  });
  std::this_thread::sleep_for(Millis(300));
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  int status = 0;
  const bool exited =
      Eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, Seconds(5));
  stop = true;
  churn.join();
  EXPECT_TRUE(exited) << "gyred did not exit within 5 s of SIGTERM";
  if (exited) pid_ = -1;
}

// gyred ends with _exit, which its client server's destructor never saw: the socket file was
// left behind by every run.
TEST_F(DaemonTest, TheSocketFileGoesWithTheDaemon) {
  {
    auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_TRUE(Allreduce(**comm, 5).ok());
  }
  ASSERT_EQ(::access(socket_.c_str(), F_OK), 0);
  ::kill(pid_, SIGTERM);
  int status = 0;
  ASSERT_TRUE(Eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, Seconds(10)))
      << ReadFile(log_);
  pid_ = -1;  // reaped
  EXPECT_TRUE(Logged("served 1 calls; exiting")) << ReadFile(log_);
  EXPECT_NE(::access(socket_.c_str(), F_OK), 0) << socket_ << " is still there";
}

TEST_F(DaemonTest, RefusedSendAndRecvComeBackAsErrors) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  int32_t v[3] = {1, 2, 3};
  Status self = (*comm)->Send(v, 3, DataType::kInt32, 0, 0);
  EXPECT_EQ(self.code(), StatusCode::kInvalidArgument) << self;
  EXPECT_NE(self.message().find("cannot send to or receive from itself"), std::string::npos)
      << self;
  Status stranger = (*comm)->Recv(v, 3, DataType::kInt32, 4, 0);
  EXPECT_EQ(stranger.code(), StatusCode::kInvalidArgument) << stranger;
  EXPECT_NE(stranger.message().find("rank 4 is not in this job (world size 1)"), std::string::npos)
      << stranger;
  Status null = (*comm)->Send(nullptr, 3, DataType::kInt32, 0, 0);
  EXPECT_EQ(null.code(), StatusCode::kInvalidArgument) << null;
  EXPECT_TRUE(Allreduce(**comm, 5).ok());
}

TEST_F(DaemonTest, GarbageBeforeTheHandshakeIsDroppedAndTheDaemonGoesOn) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::mt19937 rng(3);
  std::string noise;
  for (int i = 0; i < 300; ++i) noise += static_cast<char>(rng());
  proto::ClientRequest request;  // a client request where the hello belongs
  request.set_id(1);
  request.mutable_hello()->set_protocol_version(1);
  struct Case {
    std::string bytes;
    std::string reason;
  };
  const Case cases[] = {
      {Framed(noise), "[malformed]"},
      {std::string("\xff\xff\xff\x7f", 4), "exceeds the cap"},
      {std::string("\x40\x00\x00\x00", 4) + "abc", "[malformed]"},  // truncated, then closed
      {Framed(request.SerializeAsString()), "hello without the gyre magic"},
  };
  for (const Case& c : cases) {
    int fd = ConnectSocket(socket_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, c.bytes));
    ::shutdown(fd, SHUT_WR);
    EXPECT_TRUE(ClosedWithin(fd, Seconds(10))) << c.reason;
    ::close(fd);
    EXPECT_TRUE(Logged(c.reason)) << c.reason;
    EXPECT_TRUE(Allreduce(**comm, 7).ok());
  }
}

TEST_F(DaemonTest, SlowSenderAndFiveHundredIdleConnectionsTieUpNothing) {
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE(Allreduce(**comm, 1).ok());
  const int64_t threads_before = ProcStatus(pid_, "Threads");
  const int fds_before = ProcDescriptors(pid_);
  const int64_t rss_before = ProcStatus(pid_, "VmRSS");

  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  Status loop_status;
  std::thread loop([&] {
    for (int salt = 2; !stop; ++salt) {
      loop_status = Allreduce(**comm, salt);
      if (!loop_status.ok()) return;
      ++calls;
    }
  });
  // A sender of one byte per 100 ms is cut off at the 5 s handshake deadline.
  int slow = ConnectSocket(socket_);
  ASSERT_GE(slow, 0);
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) {
    int fd = ConnectSocket(socket_);
    if (fd >= 0) idle.push_back(fd);
  }
  int64_t max_threads = 0;
  bool slow_closed = false;
  for (int tick = 0; tick < 100 && !slow_closed; ++tick) {
    max_threads = std::max(max_threads, ProcStatus(pid_, "Threads"));
    (void)SendAll(slow, std::string(1, '\x01'));
    slow_closed = ClosedWithin(slow, Millis(100));
  }
  EXPECT_TRUE(slow_closed);
  ::close(slow);
  for (int fd : idle) {
    EXPECT_TRUE(ClosedWithin(fd, Seconds(10)));
    ::close(fd);
  }
  stop = true;
  loop.join();
  EXPECT_TRUE(loop_status.ok()) << loop_status;
  EXPECT_GT(calls.load(), 0);
  // Hundreds of refusals, but their log lines are within the budget of 20 a minute (the slow
  // sender's [timeout] comes after the over-cap ones have spent it).
  EXPECT_TRUE(Logged("[over-cap]"));
  const std::string log = ReadFile(log_);
  size_t lines = 0;
  for (size_t at = log.find("refused a client connection"); at != std::string::npos;
       at = log.find("refused a client connection", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 20u) << log;
  // At most the connection cap's worth of extra threads (connections cut off in the
  // handshake end their threads at once), and all of them gone afterwards.
  EXPECT_LE(max_threads, threads_before + 64 + 1);
  EXPECT_TRUE(Eventually([&] { return ProcDescriptors(pid_) <= fds_before; }, Seconds(5)))
      << ProcDescriptors(pid_) << " descriptors, " << fds_before << " before";
  EXPECT_TRUE(
      Eventually([&] { return ProcStatus(pid_, "Threads") <= threads_before; }, Seconds(5)));
  if (kMemoryIsMeaningful) {
    EXPECT_LT(ProcStatus(pid_, "VmRSS") - rss_before, 32 * 1024) << "kB";
  }
}

// Idle connections past the handshake cap do not lock the rank's program out: the oldest
// is cut off for a newcomer, which connects and calls as usual.
TEST_F(DaemonTest, IdleConnectionsAtTheHandshakeCapDoNotLockANewClientOut) {
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    int fd = ConnectSocket(socket_);
    if (fd >= 0) idle.push_back(fd);
  }
  ASSERT_EQ(idle.size(), 40u);
  std::this_thread::sleep_for(Millis(300));  // all accepted: the cap is full of idle ones
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE(Allreduce(**comm, 3).ok());
  EXPECT_TRUE(Logged("cut off the client connection longest in the handshake"));
  for (int fd : idle) ::close(fd);
}

int ConnectTcp(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST_F(DaemonTest, PeerPortShrugsOffStrangersWhileClientsAreServed) {
  const std::string log = ReadFile(log_);
  const std::string marker = "listening for peers on 127.0.0.1:";
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  const int port = std::stoi(log.substr(at + marker.size()));
  auto comm = Comm::ConnectDaemon(socket_, In(Seconds(10)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  const int fds_before = ProcDescriptors(pid_);

  // Garbage, a huge length, a wrong magic, and a well-formed hello from a stranger without
  // the secret, who gets a challenge and then a closed connection.
  std::vector<std::string> strangers;
  std::mt19937 rng(11);
  std::string noise(500, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  strangers.push_back(noise);
  FrameHeader huge;
  huge.type = FrameType::kHello;
  huge.meta_len = 0xfffffff0u;
  std::string huge_bytes(kFrameHeaderBytes, '\0');
  EncodeFrameHeader(huge, reinterpret_cast<uint8_t*>(huge_bytes.data()));
  strangers.push_back(huge_bytes);
  auth::Credentials stranger;
  stranger.job_id = "dsock";
  stranger.rank = 0;
  stranger.world_size = 1;
  auth::Connector connector(auth::Channel::kPeer, &stranger, 0);
  std::vector<uint8_t> hello = EncodeControlFrame(FrameType::kHello, *connector.Hello());
  std::string hello_bytes(hello.begin(), hello.end());
  strangers.push_back(hello_bytes);
  hello_bytes[0] = 'X';
  strangers.push_back(hello_bytes);
  for (const std::string& bytes : strangers) {
    int fd = ConnectTcp(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, bytes));
    EXPECT_TRUE(ClosedWithin(fd, Seconds(10)));
    ::close(fd);
    EXPECT_TRUE(Allreduce(**comm, 11).ok());
  }
  // And a crowd of idle ones.
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    int fd = ConnectTcp(port);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_TRUE(Allreduce(**comm, 13).ok());
  for (int fd : idle) {
    EXPECT_TRUE(ClosedWithin(fd, Seconds(10)));
    ::close(fd);
  }
  EXPECT_TRUE(Logged("[malformed]"));
  EXPECT_TRUE(Logged("[over-cap]"));
  EXPECT_TRUE(Logged("[timeout]"));
  EXPECT_TRUE(Allreduce(**comm, 17).ok());
  EXPECT_TRUE(Eventually([&] { return ProcDescriptors(pid_) <= fds_before; }, Seconds(5)))
      << ProcDescriptors(pid_) << " descriptors, " << fds_before << " before";
}

// A rank has one communicator: a second client of a daemon that serves one is refused at its
// hello, naming the one served, and its leaving does not end the daemon under the first.
// (Served, its calls were matched with the other ranks' calls of the first client.)
TEST(DaemonQueueTest, ASecondClientIsRefusedAndTheFirstKeepsItsDaemon) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/gyre-dqueue-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  const std::string secret_file = dir + "/secret";
  ASSERT_TRUE(auth::WriteSecretFile(secret_file, *auth::Secret::Generate()).ok());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const std::string log = dir + "/gyred" + std::to_string(r) + ".log";
    const pid_t pid = StartGyred(dir, r, 2, "dqueue", secret_file,
                                 dir + "/rank" + std::to_string(r) + ".sock", log);
    ASSERT_GE(pid, 0);
    pids.push_back(pid);
  }
  for (int r = 0; r < 2; ++r) {
    const std::string log = dir + "/gyred" + std::to_string(r) + ".log";
    ASSERT_TRUE(Eventually(
        [&] { return ReadFile(log).find("serving clients") != std::string::npos; }, Seconds(20)))
        << ReadFile(log);
  }
  ::setenv(auth::kSecretFileEnv, secret_file.c_str(), 1);
  ::setenv("GYRE_JOB_ID", "dqueue", 1);
  const std::string socket = dir + "/rank0.sock";
  auto a = Comm::ConnectDaemon(socket, In(Seconds(10)));
  auto b = Comm::ConnectDaemon(socket, In(Seconds(10)));
  ::unsetenv(auth::kSecretFileEnv);
  ::unsetenv("GYRE_JOB_ID");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kAlreadyExists) << b.status();
  EXPECT_NE(b.status().message().find("rank 0's gyred already serves a communicator of this "
                                      "program (pid " +
                                      std::to_string(::getpid()) + ")"),
            std::string::npos)
      << b.status();
  std::this_thread::sleep_for(Millis(500));  // B's connection has closed by now
  int exited = 0;
  EXPECT_EQ(::waitpid(pids[0], &exited, WNOHANG), 0)
      << "rank 0's gyred ended when the refused client left";
  EXPECT_EQ((*a)->rank(), 0);
  EXPECT_NE(ReadFile(dir + "/gyred0.log").find("refused client pid"), std::string::npos);
  for (pid_t pid : pids) {
    ::kill(pid, SIGTERM);
    int status = 0;
    if (!Eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, Seconds(10))) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  std::string cmd = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace gyre
