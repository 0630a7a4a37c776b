// Signal numbers <-> names for the launcher's messages and flags: the failure summary says
// "signal SIGKILL (9)", and flags accept "SIGTERM", "TERM" or "15".
#pragma once

#include <optional>
#include <string>

namespace gyre::launcher {

// "SIGKILL" for 9, "SIGRTMIN+2" for a real-time signal, "SIG?(200)" for a number Linux does
// not define.
std::string SignalName(int sig);

// Parses "SIGKILL", "KILL", "kill" or "9". Returns nullopt for anything else, including
// numbers outside 1..SIGRTMAX.
std::optional<int> SignalFromName(const std::string& name);

}  // namespace gyre::launcher
