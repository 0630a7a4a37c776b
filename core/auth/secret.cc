#include "core/auth/secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace gyre::auth {
namespace {

std::string ErrnoText(int err) {
  char buf[256];
  return strerror_r(err, buf, sizeof(buf));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

StatusOr<Secret> Secret::FromBytes(std::string key) {
  if (key.size() < kMinSecretBytes) {
    size_t size = key.size();
    OPENSSL_cleanse(key.data(), key.size());
    return InvalidArgumentError("a job secret needs at least " + std::to_string(kMinSecretBytes) +
                                " bytes, got " + std::to_string(size));
  }
  return Secret(std::move(key));
}

StatusOr<Secret> Secret::Generate() {
  std::string key(kGeneratedSecretBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    return InternalError("the system random source failed to produce a job secret");
  }
  return Secret(std::move(key));
}

Secret& Secret::operator=(const Secret& other) {
  if (this != &other) {
    Wipe();
    key_ = other.key_;
  }
  return *this;
}

Secret::Secret(Secret&& other) noexcept : key_(std::move(other.key_)) { other.Wipe(); }

Secret& Secret::operator=(Secret&& other) noexcept {
  if (this != &other) {
    Wipe();
    key_ = std::move(other.key_);
    other.Wipe();
  }
  return *this;
}

Secret::~Secret() { Wipe(); }

void Secret::Wipe() {
  if (!key_.empty()) OPENSSL_cleanse(key_.data(), key_.size());
  key_.clear();
}

StatusOr<Secret> LoadSecretFile(const std::string& path) {
  const std::string where = "secret file " + path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    struct stat link {};
    if (err == ELOOP && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      // On purpose: whoever can change the link can point it at a file of their choosing.
      return InvalidArgumentError(
          "the " + where +
          " is a symbolic link; gyre reads a secret only from a regular file of its own user "
          "(mode 0600): copy it, e.g. install -m 600 SOURCE FILE, as deploy/k8s/gyre-job.yaml "
          "does with a mounted Secret");
    }
    return InvalidArgumentError("cannot open the " + where + ": " + ErrnoText(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return InvalidArgumentError("cannot stat the " + where + ": " + ErrnoText(err));
  }
  std::string problem;
  if (!S_ISREG(st.st_mode)) {
    problem = "is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    problem = "is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
              std::to_string(::geteuid()) + ")";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    problem =
        std::string("has mode ") + mode + "; group and others must have no access (chmod 600)";
  } else if (st.st_size > static_cast<off_t>(kMaxSecretFileBytes)) {
    problem = "holds " + std::to_string(st.st_size) + " bytes, more than a secret file can (" +
              std::to_string(kMaxSecretFileBytes) + ")";
  }
  if (!problem.empty()) {
    ::close(fd);
    return InvalidArgumentError("refusing the " + where + ": it " + problem);
  }
  std::string text(kMaxSecretFileBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      OPENSSL_cleanse(text.data(), text.size());
      return InvalidArgumentError("cannot read the " + where + ": " + ErrnoText(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  size_t begin = 0, end = got;
  while (begin < end && IsSpace(text[begin])) ++begin;
  while (end > begin && IsSpace(text[end - 1])) --end;
  std::string key;
  bool hex = (end - begin) % 2 == 0;
  for (size_t i = begin; hex && i < end; i += 2) {
    int hi = HexValue(text[i]), lo = HexValue(text[i + 1]);
    if (hi < 0 || lo < 0) {
      hex = false;
      break;
    }
    key.push_back(static_cast<char>(hi * 16 + lo));
  }
  OPENSSL_cleanse(text.data(), text.size());
  if (!hex || key.size() < kMinSecretBytes) {
    size_t digits = end - begin;
    OPENSSL_cleanse(key.data(), key.size());
    return InvalidArgumentError(
        "the " + where + " must hold at least " + std::to_string(2 * kMinSecretBytes) +
        " hexadecimal digits (e.g. from `openssl rand -hex 32`); it holds " +
        std::to_string(digits) + " characters" +
        (hex ? "" : " that are not an even run of hex digits"));
  }
  return Secret::FromBytes(std::move(key));
}

Status WriteSecretFile(const std::string& path, const Secret& secret) {
  if (secret.empty()) return InvalidArgumentError("refusing to write an empty secret to " + path);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return UnavailableError("cannot create the secret file " + path + ": " + ErrnoText(errno));
  }
  // The umask can only take bits away, but be explicit: the mode is the protection.
  ::fchmod(fd, 0600);
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char c : secret.key()) {
    text.push_back(kDigits[c >> 4]);
    text.push_back(kDigits[c & 0xf]);
  }
  text.push_back('\n');
  size_t done = 0;
  Status status;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = UnavailableError("cannot write the secret file " + path + ": " + ErrnoText(errno));
      break;
    }
    done += static_cast<size_t>(n);
  }
  OPENSSL_cleanse(text.data(), text.size());
  if (::close(fd) != 0 && status.ok()) {
    status = UnavailableError("cannot write the secret file " + path + ": " + ErrnoText(errno));
  }
  if (!status.ok()) ::unlink(path.c_str());
  return status;
}

StatusOr<Secret> SecretFromEnvironment() {
  const char* path = std::getenv(kSecretFileEnv);
  if (path == nullptr || *path == '\0') return Secret();
  StatusOr<Secret> secret = LoadSecretFile(path);
  if (!secret.ok()) return secret.status().WithContext(std::string("from ") + kSecretFileEnv);
  return secret;
}

}  // namespace gyre::auth
