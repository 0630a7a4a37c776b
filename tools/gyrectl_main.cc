// gyrectl: asks a running gyre job — including a hung one, before any deadline fires — what
// every rank is doing, over the ranks' control endpoints (found in the job's store).
//   gyrectl status --store file:///tmp/run/store --job_id J [--json]
//   gyrectl dump   --store ... --job_id J [--out DIR]     (flight recorders, JSON)
//   gyrectl timeline --store ... --job_id J --out trace.json
//                  (Chrome trace-event JSON: a track per rank, a slice per operation; open it
//                   in Perfetto or chrome://tracing)
#include <fcntl.h>
#include <gflags/gflags.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include "core/auth/secret.h"
#include "core/base/clock.h"
#include "core/base/file_io.h"
#include "core/base/stdout_check.h"
#include "core/base/tool_flags.h"
#include "core/comm/communicator.h"
#include "core/comm/flight_recorder.h"
#include "core/job/bootstrap.h"
#include "core/job/control.h"
#include "core/store/rendezvous.h"
#include "core/store/store.h"

DEFINE_string(store, "", "the job's store URL (gyrerun prints it at start)");
DEFINE_string(job_id, "", "the job id (gyrerun prints it at start)");
DEFINE_bool(json, false, "print JSON instead of a table");
DEFINE_double(timeout, 1.0, "seconds to wait for each rank's answer (0.05 to 3600)");
DEFINE_string(out, "", "dump: write flight-rank<R>.json files here instead of stdout");
DEFINE_string(secret_file, "",
              "the job's secret, to open a TCP store that requires it "
              "(default: GYRE_SECRET_FILE)");

namespace {

int Fail(const std::string& msg) {
  std::cerr << "gyrectl: " << msg << "\n";
  return 2;
}

// Writes `text` as the whole of the file at `path`: empty, or why not ("cannot write PATH:
// No such file or directory"), so a user sees which file and what to change.
std::string WriteWholeFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = fd < 0 ? errno : gyre::WriteFully(fd, text.data(), text.size());
  if (fd >= 0 && ::close(fd) != 0 && err == 0) err = errno;
  return err == 0 ? "" : "cannot write " + path + ": " + std::strerror(err);
}

// A wait per rank: long enough for a loaded host, short enough that a frozen rank does not
// hold the inquiry. A healthy rank's control endpoint answers (connect, handshake, state)
// within a few ms, and may take tens of ms on a busy host; a shorter wait would show it as
// silent ("stopped or frozen") or even unreachable, the very states the table is there to
// tell from a healthy one. A longer wait costs a rank that answers nothing: its row is ready
// when it does. Far beyond the ceiling the deadline arithmetic expires at once.
constexpr double kMinTimeoutSeconds = 0.05;
constexpr double kMaxTimeoutSeconds = 3600;
constexpr const char kTimeoutRange[] =
    "from 0.05 to 3600 seconds: a healthy rank may take tens of ms to answer on a busy host, "
    "so a shorter wait would show it as silent (stopped or frozen); ranks that answer do not "
    "wait it out";

int Run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  gyre::ParseToolFlags(&argc, &argv,
                       "gyrectl status|dump|timeline --store URL --job_id J [--json]");
  return gyre::ExitCodeAfterFlushingStdout("gyrectl", Run(argc, argv));
}

namespace {

int Run(int argc, char** argv) {
  using namespace gyre;
  if (argc < 2) return Fail("give a command: status, dump or timeline");
  const std::string cmd = argv[1];
  if (cmd != "status" && cmd != "dump" && cmd != "timeline") {
    return Fail("unknown command '" + cmd + "' (status, dump, timeline)");
  }
  if (argc > 2) {
    return Fail(std::string("unexpected argument '") + argv[2] + "' after the command " + cmd);
  }
  const std::string bad = gyre::FirstBadSecondsFlag(
      {{"--timeout", FLAGS_timeout, kMinTimeoutSeconds, kMaxTimeoutSeconds, kTimeoutRange}});
  if (!bad.empty()) return Fail(bad);
  if (cmd == "timeline" && FLAGS_out.empty()) return Fail("timeline needs --out FILE");
  if (FLAGS_store.empty() || FLAGS_job_id.empty()) return Fail("--store and --job_id are needed");
  // An inspection only reads: a mistyped file store is named, not created (with its lock).
  const std::string kFileScheme = "file://";
  if (FLAGS_store.rfind(kFileScheme, 0) == 0) {
    const std::string dir = FLAGS_store.substr(kFileScheme.size());
    struct stat st;
    if (!dir.empty() && dir[0] == '/') {
      const bool found = ::stat(dir.c_str(), &st) == 0;
      if (!found || !S_ISDIR(st.st_mode)) {
        return Fail("--store " + FLAGS_store + ": " + dir + " " +
                    (!found ? std::string("cannot be read: ") + std::strerror(errno)
                            : std::string("is not a folder")) +
                    " (a job's store is the folder gyrerun prints at start)");
      }
    }
  }
  SetOpDescFormatter(&FormatOpDesc);
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), Seconds(10));
  auth::Credentials credentials;
  credentials.job_id = FLAGS_job_id;
  std::string secret_file = FLAGS_secret_file;
  if (secret_file.empty()) {
    if (const char* f = std::getenv("GYRE_SECRET_FILE")) secret_file = f;
  }
  // A job started by gyrerun keeps its secret beside the store in its run folder.
  const std::string kStoreSuffix = "/store";
  if (secret_file.empty() && FLAGS_store.rfind("file://", 0) == 0 &&
      FLAGS_store.size() > kStoreSuffix.size() &&
      FLAGS_store.compare(FLAGS_store.size() - kStoreSuffix.size(), kStoreSuffix.size(),
                          kStoreSuffix) == 0) {
    const std::string candidate =
        FLAGS_store.substr(7, FLAGS_store.size() - 7 - kStoreSuffix.size()) + "/secret";
    if (::access(candidate.c_str(), R_OK) == 0) secret_file = candidate;
  }
  if (!secret_file.empty()) {
    auto secret = auth::LoadSecretFile(secret_file);
    if (!secret.ok()) return Fail(secret.status().ToString());
    credentials.secret = std::move(*secret);
  }
  // A store that does not answer at once is said to be waited on, not waited on silently
  // for the whole 10 s. Only a store not reached in time is waited on: one that answered and
  // refused (another job's, or no gyre store at all) would answer the same again.
  auto store = store::OpenStore(
      FLAGS_store, Deadline::After(*SteadyClock::Get(), Seconds(1)).Min(deadline), credentials);
  if (!store.ok() && store.status().code() == StatusCode::kDeadlineExceeded) {
    std::fprintf(stderr,
                 "gyrectl: the store at %s does not answer yet (%s); trying for up to %s more\n",
                 FLAGS_store.c_str(), store.status().message().c_str(),
                 FormatDuration(deadline.Remaining(*SteadyClock::Get())).c_str());
    std::fflush(stderr);
    store = store::OpenStore(FLAGS_store, deadline, credentials);
  }
  if (!store.ok()) {
    return Fail(store.status().ToString() +
                (credentials.secret.empty() &&
                         store.status().message().find("refused the handshake") != std::string::npos
                     ? " (no secret was given: pass the job's --secret_file, or set "
                       "GYRE_SECRET_FILE; gyrerun prints it in its 'inspect it with' line)"
                     : ""));
  }
  // The rendezvous says how many ranks the job has and which have come: a rank that has
  // not come (or has finished) has no control address, and the ranks after it still count.
  StatusOr<store::RendezvousState> rdzv =
      store::ReadRendezvous(store->get(), FLAGS_job_id, deadline);
  if (!rdzv.ok()) return Fail(rdzv.status().ToString());
  const int world = rdzv->world_size;
  std::vector<std::string> addresses;  // by rank; "" where a rank has published none
  {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(job::ControlKey(FLAGS_job_id, r));
    for (const auto& v : store::TryGetEach(store->get(), keys, deadline)) {
      if (!v.ok()) return Fail(v.status().ToString());
      addresses.push_back(v->value_or(""));
    }
  }
  for (int r = world; r < 1 << 16; ++r) {
    auto v = (*store)->TryGet(job::ControlKey(FLAGS_job_id, r), deadline);
    if (!v.ok()) return Fail(v.status().ToString());
    if (!v->has_value()) break;
    addresses.push_back(**v);
  }
  const int p = static_cast<int>(addresses.size());
  std::vector<int> absent;  // ranks without a control address
  for (int r = 0; r < p; ++r) {
    if (addresses[r].empty()) absent.push_back(r);
  }
  const bool joining = world > 0 && static_cast<int>(rdzv->joined.size()) < world;
  auto came = [&](int r) {
    return std::binary_search(rdzv->joined.begin(), rdzv->joined.end(), r);
  };
  std::vector<int> not_joined;
  for (int r = 0; joining && r < world; ++r) {
    if (!came(r)) not_joined.push_back(r);
  }
  if (static_cast<int>(absent.size()) == p) {
    return Fail("no rank of job " + FLAGS_job_id + " has published a control address in " +
                FLAGS_store +
                (world > 0 ? " (its rendezvous has " + std::to_string(rdzv->joined.size()) +
                                 " of " + std::to_string(world) + " ranks)"
                           : " (the job has not started yet, or it has finished: ranks that finish "
                             "cleanly remove their records)"));
  }
  // Why a rank has no row of its own: said in every output.
  auto why_absent = [&](int r) {
    if (world > 0 && !came(r)) {
      return std::string(
          "has not joined the rendezvous (not started yet, or finished and "
          "removed its records)");
    }
    return std::string(world > 0 ? "joined the rendezvous but has no control address yet"
                                 : "has no control address in the store");
  };
  proto::ControlRequest req;
  if (cmd == "dump" || cmd == "timeline") {
    req.mutable_dump();
  } else {
    req.mutable_status();
  }
  // Ranks without an address are not asked (QueryAll skips them); their entry says why.
  std::vector<job::QueryResult> results =
      job::QueryAll(addresses, req, Seconds(FLAGS_timeout), credentials);
  for (int r : absent) results[r].error = why_absent(r);
  if (cmd == "timeline") {
    std::ostringstream f;
    f << "{\"traceEvents\": [";
    bool first = true;
    const std::regex event(
        R"re(\{"t_us": (\d+), "kind": "([a-z_]+)", "seq": (\d+), "detail": "((?:[^"\\]|\\.)*)"\})re");
    for (int r = 0; r < p; ++r) {
      if (results[r].reach != job::Reach::kAnswered) continue;
      const std::string& text = results[r].response.dump_json();
      std::map<std::string, std::pair<long long, std::string>> open;  // seq -> (start, name)
      for (std::sregex_iterator it(text.begin(), text.end(), event), end; it != end; ++it) {
        const long long t = std::stoll((*it)[1]);
        const std::string kind = (*it)[2], seq = (*it)[3], detail = (*it)[4];
        if (kind == "op_start") {
          open[seq] = {t, detail};
        } else if (kind == "op_end" && open.count(seq)) {
          const auto& [t0, name] = open[seq];
          f << (first ? "" : ",\n") << "{\"name\": \"" << name
            << "\", \"ph\": \"X\", \"ts\": " << t0 << ", \"dur\": " << (t - t0)
            << ", \"pid\": 0, \"tid\": " << r << ", \"args\": {\"result\": \"" << detail << "\"}}";
          first = false;
          open.erase(seq);
        } else if (kind != "op_start" && kind != "op_end") {
          f << (first ? "" : ",\n") << "{\"name\": \"" << kind
            << "\", \"ph\": \"i\", \"s\": \"t\", \"ts\": " << t << ", \"pid\": 0, \"tid\": " << r
            << ", \"args\": {\"detail\": \"" << detail << "\"}}";
          first = false;
        }
      }
      f << (first ? "" : ",\n")
        << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << r
        << ", \"args\": {\"name\": \"rank " << r << "\"}}";
      first = false;
    }
    f << "]}\n";
    if (const std::string error = WriteWholeFile(FLAGS_out, f.str()); !error.empty()) {
      return Fail(error);
    }
    int answered = 0;
    for (int r = 0; r < p; ++r) {
      if (results[r].reach == job::Reach::kAnswered) {
        ++answered;
      } else {
        std::cerr << "gyrectl: rank " << r << (addresses[r].empty() ? " " : " did not answer: ")
                  << results[r].error << "\n";
      }
    }
    // An empty timeline is no timeline: that is a failure, as dump's is.
    if (answered == 0) return Fail("no rank answered: the timeline in " + FLAGS_out + " is empty");
    std::cout << "gyrectl: timeline of " << answered << " of " << p << " ranks written to "
              << FLAGS_out << "\n";
    return 0;
  }
  if (cmd == "dump") {
    int missing = 0;
    if (!FLAGS_out.empty()) {
      // As the flight records' own folder is: made when missing.
      std::error_code ec;
      std::filesystem::create_directories(FLAGS_out, ec);
      if (ec) return Fail("cannot make --out " + FLAGS_out + ": " + ec.message());
    }
    for (int r = 0; r < p; ++r) {
      if (results[r].reach != job::Reach::kAnswered) {
        std::cerr << "gyrectl: rank " << r << (addresses[r].empty() ? " " : " did not answer: ")
                  << results[r].error << "\n";
        ++missing;
        continue;
      }
      if (FLAGS_out.empty()) {
        std::cout << results[r].response.dump_json() << "\n";
      } else {
        const std::string error =
            WriteWholeFile(FLAGS_out + "/flight-rank" + std::to_string(r) + ".json",
                           results[r].response.dump_json() + "\n");
        if (!error.empty()) return Fail(error);
      }
    }
    return missing == 0 ? 0 : 1;
  }
  if (FLAGS_json) {
    std::cout << "{\"job_id\": \"" << JsonEscape(FLAGS_job_id) << "\", \"world_size\": " << world
              << ", \"joined\": [";
    for (size_t i = 0; i < rdzv->joined.size(); ++i) {
      std::cout << (i ? ", " : "") << rdzv->joined[i];
    }
    std::cout << "], \"ranks\": [";
  } else {
    std::printf("job %s, %d ranks", FLAGS_job_id.c_str(), p);
    if (joining) {
      std::printf(", %zu joined: the rendezvous waits for %s", rdzv->joined.size(),
                  store::FormatRankList(not_joined).c_str());
    } else if (!absent.empty()) {
      std::printf(", %s without a control address", store::FormatRankList(absent).c_str());
    }
    std::printf("\n");
    std::printf("%-5s %-8s %-10s %-9s %-42s %-9s %-8s %-16s %s\n", "rank", "pid", "host", "state",
                "operation", "step", "waits on", "received", "since progress");
  }
  for (int r = 0; r < p; ++r) {
    const job::QueryResult& q = results[r];
    const proto::RankState& s = q.response.state();
    std::string state;
    // While the rendezvous waits, no rank has made a call: one that has come waits there.
    const bool in_rendezvous = joining && q.reach == job::Reach::kAnswered && !s.in_op() &&
                               s.waiting_size() == 0 && s.last_completed_seq() == 0;
    if (addresses[r].empty()) {
      state = "missing";
    } else if (in_rendezvous) {
      state = "joining";
    } else if (q.reach == job::Reach::kAnswered) {
      state = s.in_op()               ? "in op"
              : s.waiting_size() == 0 ? "idle"
              : s.waiting(0).send()   ? "in send"
                                      : "in recv";
    } else if (q.reach == job::Reach::kSilent) {
      state = "silent";
    } else if (q.reach == job::Reach::kRefused) {
      state = "gone";
    } else if (q.reach == job::Reach::kUnreachable) {
      state = "unreachable";
    } else {
      state = "error";
    }
    if (FLAGS_json) {
      std::cout << (r ? ", " : "") << "{\"rank\": " << r << ", \"state\": \"" << state << "\"";
      if (q.reach == job::Reach::kAnswered) {
        std::cout << ", \"pid\": " << s.pid() << ", \"host\": \"" << JsonEscape(s.host())
                  << "\", \"seq\": " << s.seq()
                  << ", \"last_completed_seq\": " << s.last_completed_seq() << ", \"op\": \""
                  << JsonEscape(s.op_name()) << "\", \"steps_done\": " << s.steps_done()
                  << ", \"steps_total\": " << s.steps_total()
                  << ", \"waiting_on\": " << s.waiting_on()
                  << ", \"bytes_received\": " << s.bytes_received()
                  << ", \"bytes_expected\": " << s.bytes_expected()
                  << ", \"seconds_since_progress\": " << s.seconds_since_progress()
                  << ", \"last_error\": \"" << JsonEscape(s.last_error()) << "\""
                  << ", \"program_pid\": " << s.program_pid() << ", \"program_state\": \""
                  << JsonEscape(s.program_state()) << "\"";
        std::cout << ", \"waiting\": [";
        for (int i = 0; i < s.waiting_size(); ++i) {
          const proto::WaitingMessage& w = s.waiting(i);
          std::cout << (i ? ", " : "") << "{\"name\": \"" << JsonEscape(w.name())
                    << "\", \"peer\": " << w.peer()
                    << ", \"send\": " << (w.send() ? "true" : "false")
                    << ", \"seconds\": " << w.seconds() << "}";
        }
        std::cout << "]";
      } else {
        std::cout << ", \"error\": \"" << JsonEscape(q.error) << "\"";
      }
      std::cout << "}";
      continue;
    }
    if (addresses[r].empty()) {
      std::printf("%-5d %-8s %-10s %-9s %s\n", r, "-", "-", state.c_str(), q.error.c_str());
      continue;
    }
    if (q.reach != job::Reach::kAnswered) {
      // The wait is said: a --timeout shorter than a busy rank takes to answer looks the same.
      const std::string silent = "alive but not answering within " +
                                 FormatDuration(Seconds(FLAGS_timeout)) + " (stopped or frozen)";
      std::printf(
          "%-5d %-8s %-10s %-9s %s\n", r, "-", "-", state.c_str(),
          q.reach == job::Reach::kSilent ? silent.c_str() : ("not reachable: " + q.error).c_str());
      continue;
    }
    char step[32], recv[48], since[32], waits[16];
    std::snprintf(step, sizeof(step), "%d/%d", s.steps_done(), s.steps_total());
    std::snprintf(recv, sizeof(recv), "%lld/%lld B", static_cast<long long>(s.bytes_received()),
                  static_cast<long long>(s.bytes_expected()));
    std::snprintf(since, sizeof(since), "%.2f s", s.seconds_since_progress());
    std::snprintf(waits, sizeof(waits), "%s",
                  s.waiting_on() >= 0 ? ("rank " + std::to_string(s.waiting_on())).c_str() : "-");
    std::string op =
        s.in_op() ? s.op_name() : "last completed seq=" + std::to_string(s.last_completed_seq());
    if (in_rendezvous) op = "in the rendezvous, waiting for " + store::FormatRankList(not_joined);
    // Behind a daemon, a stopped program leaves the rank idle whatever its daemon shows.
    if (!s.program_state().empty()) {
      op += "; its program (pid " + std::to_string(s.program_pid()) + ") is " + s.program_state();
    }
    if (!s.in_op() && s.waiting_size() > 0) {
      // Between collectives, blocked in a message: that message, its peer and how long.
      const proto::WaitingMessage& w = s.waiting(0);
      const int more = std::max(s.waiting_count(), s.waiting_size()) - 1;
      op = w.name() + (more > 0 ? " (+" + std::to_string(more) + " more)" : "");
      std::snprintf(waits, sizeof(waits), "rank %d", w.peer());
      std::snprintf(since, sizeof(since), "%.2f s", w.seconds());
      std::printf("%-5d %-8lld %-10s %-9s %-42s %-9s %-8s %-16s %s\n", r,
                  static_cast<long long>(s.pid()), s.host().c_str(), state.c_str(), op.c_str(), "-",
                  waits, "-", since);
      continue;
    }
    std::printf("%-5d %-8lld %-10s %-9s %-42s %-9s %-8s %-16s %s\n", r,
                static_cast<long long>(s.pid()), s.host().c_str(), state.c_str(), op.c_str(),
                s.in_op() ? step : "-", s.in_op() ? waits : "-", s.in_op() ? recv : "-",
                s.in_op() ? since : "-");
  }
  if (FLAGS_json) std::cout << "]}\n";
  return 0;
}

}  // namespace
