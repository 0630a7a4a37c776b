#include "core/base/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                    const std::string& what) {
  const std::string named = what + " '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    const std::string why = named + " cannot be read: " + std::strerror(e);
    return e == ENOENT ? NotFoundError(why) : InvalidArgumentError(why);
  }
  std::string text;
  char buf[8192];
  int read_errno = 0;
  while (text.size() <= max_bytes) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) read_errno = errno;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (read_errno != 0) {
    return InvalidArgumentError(named + " cannot be read: " + std::strerror(read_errno));
  }
  if (text.size() > max_bytes) {
    return InvalidArgumentError(named + " is larger than " + std::to_string(max_bytes) +
                                " bytes, more than such a file ever holds");
  }
  return text;
}

StatusOr<std::FILE*> OpenForAppend(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    return InvalidArgumentError(
        path + " cannot be opened for appending: " +
        (e == ENXIO ? std::string("it is a FIFO that no process reads") : std::strerror(e)));
  }
  // Writes block again from here on, as a file's do: a reader that is slow holds them up.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  std::FILE* f = ::fdopen(fd, "a");
  if (f == nullptr) {
    const int e = errno;
    ::close(fd);
    return InvalidArgumentError(path + " cannot be opened for appending: " + std::strerror(e));
  }
  return f;
}

}  // namespace gyre
