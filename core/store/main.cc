// gyre-store: a standalone rendezvous store server. Prints "gyre-store listening on
// HOST:PORT" once it accepts connections and serves until SIGTERM or SIGINT. Clients must
// prove the secret in --secret_file (the same file the job's ranks are given).
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "core/auth/secret.h"
#include "core/base/fd_limit.h"
#include "core/base/tool_flags.h"
#include "core/store/tcp_store_server.h"

DEFINE_string(host, "127.0.0.1",
              "Address to listen on. Only this address is bound; use 0.0.0.0 to accept "
              "connections from other hosts.");
DEFINE_int32(port, 0, "TCP port to listen on; 0 lets the kernel pick one (printed at start).");
DEFINE_string(secret_file, "",
              "the job's secret (hex, mode 0600); clients must prove it (default: "
              "GYRE_SECRET_FILE; without one, anyone who reaches the port may use the store)");
DEFINE_string(job_id, "", "serve only clients of this job (default: any job id)");
DEFINE_int32(max_ranks, 4096,
             "ranks it may serve at once: it accepts one connection each plus 64 for tools "
             "(gyrectl, gyrerun's watcher) and refuses more, and its soft file descriptor limit "
             "is raised to cover them (a warning says so when the hard limit is lower)");

int main(int argc, char** argv) {
  gyre::ParseToolFlags(
      &argc, &argv,
      "gyre-store --host=127.0.0.1 --port=29500: a TCP rendezvous store for gyre jobs");
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // gyre-store takes flags only. A stray word would otherwise be dropped, and `gyre-store 29500`
  // would serve on a kernel-picked port that nobody is told to use.
  if (argc > 1) {
    const std::string stray = argv[1];
    const bool number = stray.find_first_not_of("0123456789") == std::string::npos;
    std::fprintf(stderr, "gyre-store: unexpected argument '%s': it takes only flags%s\n",
                 stray.c_str(), number ? (" (a port is --port " + stray + ")").c_str() : "");
    return 2;
  }

  // Block the stop signals before any thread exists, so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // One connection per rank plus the tools' own; beyond the descriptor limit the server pauses
  // accepting, and the ranks it cannot serve would wait out their rendezvous.
  using gyre::store::TcpStoreServer;
  if (FLAGS_max_ranks < 1 || FLAGS_max_ranks > TcpStoreServer::kMaxRanks) {
    std::fprintf(stderr, "gyre-store: --max_ranks must be from 1 to %d, not %d\n",
                 TcpStoreServer::kMaxRanks, FLAGS_max_ranks);
    return 2;
  }
  TcpStoreServer::Options options;
  options.max_connections = TcpStoreServer::ConnectionsFor(FLAGS_max_ranks);
  options.max_connections_hint = "--max_ranks " + std::to_string(FLAGS_max_ranks) + " plus " +
                                 std::to_string(TcpStoreServer::kToolConnections) +
                                 " for tools; restart gyre-store with a larger --max_ranks";
  // The connections plus the server's own descriptors (listener, io thread, logging).
  gyre::Status fds = gyre::EnsureFileDescriptors(
      static_cast<uint64_t>(options.max_connections) + 64,
      "gyre-store (serving up to " + std::to_string(FLAGS_max_ranks) + " ranks, --max_ranks)");
  if (!fds.ok()) LOG(WARNING) << fds.message();

  auto secret = FLAGS_secret_file.empty() ? gyre::auth::SecretFromEnvironment()
                                          : gyre::auth::LoadSecretFile(FLAGS_secret_file);
  if (!secret.ok()) {
    std::fprintf(stderr, "gyre-store: %s\n", secret.status().ToString().c_str());
    return 1;
  }
  options.secret = *secret;
  options.job_id = FLAGS_job_id;
  auto server = gyre::store::TcpStoreServer::Start(FLAGS_host, FLAGS_port, options);
  if (!server.ok()) {
    std::fprintf(stderr, "gyre-store: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("gyre-store listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  LOG(INFO) << "gyre-store: signal " << signal_number << ", stopping";
  (*server)->Stop();
  return 0;
}
