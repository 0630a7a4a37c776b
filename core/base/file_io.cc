#include "core/base/file_io.h"

#include <unistd.h>

#include <cerrno>

namespace gyre {

int WriteFully(int fd, const char* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    done += static_cast<size_t>(w);
  }
  return 0;
}

}  // namespace gyre
