#include "core/base/stdout_check.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

namespace gyre {

Status FlushStdout() {
  errno = 0;
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return Status::Ok();
  return ResourceExhaustedError(std::string("cannot write to stdout") +
                                (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
}

int ExitCodeAfterFlushingStdout(const char* tool, int code) {
  Status s = FlushStdout();
  if (s.ok()) return code;
  std::fprintf(stderr, "%s: %s\n", tool, s.message().c_str());
  return code != 0 ? code : 2;
}

}  // namespace gyre
