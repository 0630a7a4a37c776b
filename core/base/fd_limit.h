// The per-process file-descriptor limit (RLIMIT_NOFILE), checked and raised before a process
// opens the connections a job needs.
//
// A rank keeps two TCP connections to every peer (one each way) and, while it explains a
// failure, one control connection to each; a launcher keeps pipes to every process it starts.
// Debian's default soft limit is 1024 (hard 524288 under systemd), so without this a job of
// a few hundred ranks per host ran out part way through connecting, and each rank reported
// "Too many open files" on some peer's connection, with verdicts naming healthy ranks.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace gyre {

// Raises this process's soft limit to `need` when it is lower (never lowering it; when the
// hard limit is lower, to the hard limit). OK once the soft limit covers `need`; otherwise
// ResourceExhausted naming what needs them (`what`), the limits, and how to raise them.
Status EnsureFileDescriptors(uint64_t need, const std::string& what);

}  // namespace gyre
