// Whether the kernel's out-of-memory killer is the likely cause of a rank's SIGKILL: the count
// of OOM kills of the launcher's memory cgroup, read when the job starts and again when a
// rank died of SIGKILL. The ranks are the launcher's children, in its cgroup (or below it,
// which cgroup v2 counts too). Nothing is said when the count cannot be read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gyre::launcher {

// The file that counts the OOM kills of the memory cgroup a process is in, from the text of
// its /proc/<pid>/cgroup: with cgroup v2 (a "0::/path" line) <root>/path/memory.events when
// that file is there; else, with a cgroup v1 memory controller (an "N:memory:/path" line)
// <root>/memory/path/memory.oom_control when that is there; else "". `exists` tells whether
// a file is there (injectable for tests).
std::string OomKillCounterPath(const std::string& proc_cgroup, const std::string& root,
                               bool (*exists)(const std::string& path));
// The same for this process, from /proc/self/cgroup and /sys/fs/cgroup.
std::string OwnOomKillCounterPath();

// The "oom_kill N" count in the text of memory.events (v2) or memory.oom_control (v1);
// nullopt when there is no such line or N is not a count.
std::optional<int64_t> ParseOomKillCount(const std::string& text);
// The count in the file at `path`; nullopt when it cannot be read or holds none.
std::optional<int64_t> ReadOomKillCount(const std::string& path);

// For a rank killed by SIGKILL: "(likely the kernel's out-of-memory killer: oom_kill in
// <path> rose from A to B)" when both counts are known and the second is higher, else "".
std::string OomKillNote(const std::string& path, std::optional<int64_t> before,
                        std::optional<int64_t> after);

}  // namespace gyre::launcher
