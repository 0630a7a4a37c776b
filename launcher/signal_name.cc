#include "launcher/signal_name.h"

#include <signal.h>

#include <cctype>
#include <cstdlib>

namespace gyre::launcher {
namespace {

struct NamedSignal {
  int number;
  const char* name;
};

// The canonical name comes first where Linux has aliases (SIGIOT, SIGPOLL), so SignalName
// prints the name people grep logs for.
constexpr NamedSignal kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
    {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
    {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},   {SIGIOT, "SIGIOT"},
    {SIGPOLL, "SIGPOLL"},
};

std::string Upper(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string SignalName(int sig) {
  for (const NamedSignal& s : kSignals) {
    if (s.number == sig) return s.name;
  }
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
    return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  }
  return "SIG?(" + std::to_string(sig) + ")";
}

std::optional<int> SignalFromName(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(name[0]))) {
    char* end = nullptr;
    long value = std::strtol(name.c_str(), &end, 10);
    if (*end != '\0' || value < 1 || value > SIGRTMAX) return std::nullopt;
    return static_cast<int>(value);
  }
  std::string upper = Upper(name);
  if (upper.rfind("SIG", 0) != 0) upper = "SIG" + upper;
  for (const NamedSignal& s : kSignals) {
    if (upper == s.name) return s.number;
  }
  if (upper == "SIGRTMIN") return SIGRTMIN;
  if (upper.rfind("SIGRTMIN+", 0) == 0) {
    std::optional<int> offset = SignalFromName(upper.substr(9));
    if (offset && SIGRTMIN + *offset <= SIGRTMAX) return SIGRTMIN + *offset;
  }
  return std::nullopt;
}

}  // namespace gyre::launcher
