// gyre-fake-rank: a stand-in for a rank process in launcher tests. Flags make it print, wait,
// fail, crash or leave a child behind, so tests need no shell.
//
// Steps, in order: ignore SIGTERM, catch SIGUSR1 and SIGUSR2; print stdout/stderr lines; print
// env/cwd/fds; write raw text; spawn a sleeping child; create --touch_file; wait for
// --wait_for_file and for
// --wait_for_user_signals; sleep; kill
// itself with --signal; exit with --exit_code.
#include <dirent.h>
#include <gflags/gflags.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/signal_name.h"

DEFINE_int32(exit_code, 0, "Exit status.");
DEFINE_int32(sleep_ms, 0, "Sleep this long before exiting.");
DEFINE_string(signal, "", "Kill itself with this signal (e.g. SIGKILL) instead of exiting.");
DEFINE_int32(stdout_lines, 0, "Print 'stdout line i of N' N times.");
DEFINE_int32(stderr_lines, 0, "Print 'stderr line i of N' N times.");
DEFINE_string(print_env, "", "Print 'env NAME=value' for this variable.");
DEFINE_bool(print_cwd, false, "Print 'cwd <dir>'.");
DEFINE_bool(print_fds, false, "Print 'open fds: 0 1 2 ...'.");
DEFINE_string(stdout_text, "", "Write this text to stdout with no newline.");
DEFINE_bool(ignore_sigterm, false, "Ignore SIGTERM.");
DEFINE_bool(spawn_child, false, "Fork a child that sleeps; print 'spawned child pid N'.");
DEFINE_int32(child_sleep_ms, 60000, "How long the --spawn_child child sleeps.");
DEFINE_string(touch_file, "",
              "Once set up (ignoring, spawning) is done, create this file holding '<pid> "
              "<child pid or 0>'. '%p' in the name becomes the pid.");
DEFINE_string(wait_for_file, "", "Wait until this file exists (exit 98 after 20 s).");
DEFINE_int32(allocate_mb, 0,
             "Before sleeping, allocate this many MiB and touch every page (to be killed by "
             "the kernel's out-of-memory killer under a memory limit); exit 97 if refused.");
DEFINE_bool(wait_for_user_signals, false,
            "Catch SIGUSR1 and SIGUSR2 from the start; after --touch_file wait until both came "
            "(exit 98 after 20 s), then print 'got SIGUSR1 and SIGUSR2'.");

namespace {

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

volatile sig_atomic_t g_got_usr1 = 0;
volatile sig_atomic_t g_got_usr2 = 0;
void NoteUserSignal(int sig) {
  if (sig == SIGUSR1) g_got_usr1 = 1;
  if (sig == SIGUSR2) g_got_usr2 = 1;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string OpenFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return "?";
  int own = dirfd(dir);
  while (struct dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    int fd = std::atoi(entry->d_name);
    if (fd != own) fds.push_back(fd);
  }
  closedir(dir);
  std::string out;
  for (size_t i = 0; i < fds.size(); ++i) out += (i ? " " : "") + std::to_string(fds[i]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_ignore_sigterm) signal(SIGTERM, SIG_IGN);
  if (FLAGS_wait_for_user_signals) {
    signal(SIGUSR1, NoteUserSignal);
    signal(SIGUSR2, NoteUserSignal);
  }
  for (int i = 1; i <= FLAGS_stdout_lines; ++i) {
    std::printf("stdout line %d of %d\n", i, FLAGS_stdout_lines);
  }
  std::fflush(stdout);
  for (int i = 1; i <= FLAGS_stderr_lines; ++i) {
    std::fprintf(stderr, "stderr line %d of %d\n", i, FLAGS_stderr_lines);
  }
  if (!FLAGS_print_env.empty()) {
    const char* value = std::getenv(FLAGS_print_env.c_str());
    std::printf("env %s=%s\n", FLAGS_print_env.c_str(), value ? value : "<unset>");
  }
  if (FLAGS_print_cwd) {
    char buf[4096];
    std::printf("cwd %s\n", getcwd(buf, sizeof(buf)) ? buf : "?");
  }
  if (FLAGS_print_fds) std::printf("open fds: %s\n", OpenFds().c_str());
  std::fputs(FLAGS_stdout_text.c_str(), stdout);
  std::fflush(stdout);

  pid_t child = 0;
  if (FLAGS_spawn_child) {
    pid_t pid = fork();
    if (pid == 0) {
      SleepMs(FLAGS_child_sleep_ms);
      _exit(0);
    }
    if (pid < 0) {
      std::perror("fork");
      return 97;
    }
    child = pid;
    std::printf("spawned child pid %d\n", static_cast<int>(pid));
    std::fflush(stdout);
  }
  if (!FLAGS_touch_file.empty()) {
    std::string path = FLAGS_touch_file;
    size_t at = path.find("%p");
    if (at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
    // Written aside and renamed, so a reader never sees a half-written file.
    std::string temp = path + ".tmp";
    FILE* f = std::fopen(temp.c_str(), "w");
    if (f == nullptr || std::fprintf(f, "%d %d\n", static_cast<int>(getpid()), child) < 0 ||
        std::fclose(f) != 0 || std::rename(temp.c_str(), path.c_str()) != 0) {
      std::perror(path.c_str());
      return 95;
    }
  }
  if (!FLAGS_wait_for_file.empty()) {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!Exists(FLAGS_wait_for_file)) {
      if (std::chrono::steady_clock::now() > give_up) {
        std::fprintf(stderr, "gave up waiting for %s\n", FLAGS_wait_for_file.c_str());
        return 98;
      }
      SleepMs(5);
    }
  }
  if (FLAGS_wait_for_user_signals) {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!(g_got_usr1 && g_got_usr2)) {
      if (std::chrono::steady_clock::now() > give_up) {
        std::fprintf(stderr, "gave up waiting for SIGUSR1 (%s) and SIGUSR2 (%s)\n",
                     g_got_usr1 ? "came" : "did not come", g_got_usr2 ? "came" : "did not come");
        return 98;
      }
      SleepMs(5);
    }
    std::printf("got SIGUSR1 and SIGUSR2\n");
    std::fflush(stdout);
  }
  for (int mb = 0; mb < FLAGS_allocate_mb; ++mb) {
    constexpr size_t kMiB = size_t{1} << 20;
    // Never freed: the point is to hold it. Written through volatile, so that it is made.
    volatile char* block = static_cast<volatile char*>(std::malloc(kMiB));
    if (block == nullptr) return 97;
    for (size_t at = 0; at < kMiB; at += 4096) block[at] = 1;
  }
  if (FLAGS_sleep_ms > 0) SleepMs(FLAGS_sleep_ms);
  if (!FLAGS_signal.empty()) {
    std::optional<int> sig = gyre::launcher::SignalFromName(FLAGS_signal);
    if (!sig) {
      std::fprintf(stderr, "unknown signal %s\n", FLAGS_signal.c_str());
      return 96;
    }
    std::fflush(nullptr);
    kill(getpid(), *sig);
    SleepMs(1000);  // a catchable signal might be delivered a moment later
  }
  return FLAGS_exit_code;
}
