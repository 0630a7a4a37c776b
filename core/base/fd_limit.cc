#include "core/base/fd_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace gyre {
namespace {

// The kernel's cap on any process's descriptor limit (fs.nr_open): setrlimit refuses more
// even to root. 0 when it cannot be read.
uint64_t KernelDescriptorCap() {
  std::ifstream f("/proc/sys/fs/nr_open");
  uint64_t cap = 0;
  if (!(f >> cap)) return 0;
  return cap;
}

}  // namespace

Status EnsureFileDescriptors(uint64_t need, const std::string& what) {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return InternalError(what + ": cannot read the file descriptor limit: " + std::strerror(errno));
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= need) return Status::Ok();
  // Up to the need, or as far as the hard limit goes (a server serves what it can).
  const bool enough = limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= need;
  struct rlimit raised = limit;
  raised.rlim_cur = enough ? static_cast<rlim_t>(need) : limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
    if (enough) return Status::Ok();
    limit = raised;
  }
  const std::string hard =
      limit.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(limit.rlim_max);
  // No `ulimit -n` the kernel would refuse: a world of 2147483647 ranks was told to raise it
  // to 6442451002.
  if (const uint64_t cap = KernelDescriptorCap(); cap > 0 && need > cap) {
    return ResourceExhaustedError(
        what + " needs about " + std::to_string(need) +
        " file descriptors, more than the kernel lets any process open (fs.nr_open is " +
        std::to_string(cap) + "; this process may open " + std::to_string(limit.rlim_cur) +
        "): too many for one process's descriptor limit, and no ulimit may pass fs.nr_open; "
        "the need grows with the job's size, so a smaller job (fewer ranks in all) needs fewer "
        "(or, as root, raise fs.nr_open with sysctl first)");
  }
  return ResourceExhaustedError(
      what + " needs about " + std::to_string(need) +
      " file descriptors, but this process may open only " + std::to_string(limit.rlim_cur) +
      " (hard limit " + hard + "): raise it with `ulimit -n " + std::to_string(need) +
      "` in the shell that starts it (the hard limit needs root: /etc/security/limits.conf, or "
      "LimitNOFILE= for a systemd service)");
}

}  // namespace gyre
