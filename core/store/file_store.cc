#include "core/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "core/base/file_io.h"
#include "core/store/store_internal.h"

namespace gyre::store {
namespace {

using internal::Backoff;
using internal::CallTimer;

// File names stay well below NAME_MAX (255) so a temp name built from them also fits.
constexpr size_t kMaxDirectName = 200;
constexpr char kLockFileName[] = ".lock";

// Serialises the lock sections of every FileStore in this process. flock alone would do
// on a local file system, but on NFS it is emulated with POSIX locks, which do not exclude
// two threads of the same process. (A condition variable rather than std::timed_mutex, so
// the wait is bounded and visible to ThreadSanitizer.)
class ProcessWriteLock {
 public:
  static ProcessWriteLock& Get() {
    static auto* lock = new ProcessWriteLock();
    return *lock;
  }
  bool LockUntil(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    auto free = [this] { return !held_; };
    if (deadline.infinite()) {
      released_.wait(lock, free);
    } else if (!released_.wait_until(lock, deadline.when(), free)) {
      return false;
    }
    held_ = true;
    return true;
  }
  void Unlock() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    released_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable released_;
  bool held_ = false;
};

std::string ErrnoText(int err) {
  char buf[256];
  return strerror_r(err, buf, sizeof(buf));
}

// A full disk, quota or file-size limit is a resource problem; anything else means the
// folder is not usable, which the store reports as unreachable.
Status IoError(const std::string& message, int err) {
  std::string text = message + ": " + ErrnoText(err);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) return ResourceExhaustedError(text);
  return UnavailableError(text);
}

uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A stable (build- and host-independent) 128-bit hash, so every process maps a long key
// to the same file name.
std::string HashHex(const std::string& key) {
  uint64_t a = 0xcbf29ce484222325ULL;
  uint64_t b = 0x84222325cbf29ce4ULL;
  for (unsigned char c : key) {
    a = (a ^ c) * 0x100000001b3ULL;
    b = Mix64(b ^ (c + 0x9e3779b97f4a7c15ULL));
  }
  a = Mix64(a ^ key.size());
  b = Mix64(b + key.size());
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

bool IsHashedName(const std::string& name) { return name.compare(0, 2, "h.") == 0; }

// Hashed files start with the key so a reader can tell a hash collision from its own key.
std::string EncodeHashedContent(const std::string& key, const std::string& value) {
  std::string out;
  uint64_t n = key.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += key;
  out += value;
  return out;
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  const int err = WriteFully(fd, data.data(), data.size());
  return err == 0 ? Status::Ok() : IoError("write " + path, err);
}

Status MakeDirs(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    // The store folder itself is private; folders above it are ordinary ones.
    const mode_t mode = pos == std::string::npos ? 0700 : 0755;
    if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) {
      return IoError("FileStore: cannot create folder " + partial, errno);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return IoError("FileStore: stat " + dir, errno);
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError("FileStore: " + dir + " exists and is not a folder");
  }
  return Status::Ok();
}

// Anyone who can write the folder can plant or replace keys (and so redirect every rank to
// an address of their choosing), so only a folder this user owns and others cannot write
// is used.
Status CheckFolderIsPrivate(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return IoError("FileStore: stat " + dir, errno);
  if (st.st_uid != ::geteuid()) {
    return InvalidArgumentError("FileStore: refusing folder " + dir + ": it is owned by uid " +
                                std::to_string(st.st_uid) + ", not by this user (uid " +
                                std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgumentError(std::string("FileStore: refusing folder ") + dir +
                                ": it is writable by every user (mode " + mode +
                                "); use a folder of your own (chmod o-w)");
  }
  return Status::Ok();
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "host";
  std::string name = buf;
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name.substr(0, 64);
}

}  // namespace

// Holds the in-process mutex and the flock on <dir>/.lock; releases both when destroyed.
class FileStore::LockHolder {
 public:
  explicit LockHolder(int fd) : fd_(fd) {}
  ~LockHolder() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    ProcessWriteLock::Get().Unlock();
  }
  LockHolder(const LockHolder&) = delete;
  LockHolder& operator=(const LockHolder&) = delete;

 private:
  int fd_;
};

StatusOr<std::unique_ptr<FileStore>> FileStore::Open(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("FileStore: empty folder path");
  std::string abs = dir;
  if (abs[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return IoError("FileStore: getcwd", errno);
    abs = std::string(cwd) + "/" + abs;
  }
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  GYRE_RETURN_IF_ERROR(MakeDirs(abs));
  GYRE_RETURN_IF_ERROR(CheckFolderIsPrivate(abs));
  std::string lock_path = abs + "/" + kLockFileName;
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return IoError("FileStore: cannot create lock file " + lock_path, errno);
  ::close(fd);
  return std::unique_ptr<FileStore>(new FileStore(abs));
}

std::string FileStore::FileNameForKey(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string name = "k.";
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-' || c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 0xf];
    }
    if (name.size() > kMaxDirectName) return "h." + HashHex(key);
  }
  return name;
}

StatusOr<std::unique_ptr<FileStore::LockHolder>> FileStore::Lock(const char* op,
                                                                 const std::string& key,
                                                                 Deadline deadline) {
  CallTimer timer(deadline);
  std::string lock_path = dir_ + "/" + kLockFileName;
  auto lock_timeout = [&] {
    return DeadlineExceededError(Describe() + ": " + op + " of key " + QuoteKey(key) +
                                 ": could not take the lock " + lock_path + " " +
                                 timer.AfterText() + "; another writer holds it");
  };
  ProcessWriteLock& process_lock = ProcessWriteLock::Get();
  if (!process_lock.LockUntil(deadline)) return lock_timeout();
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    int err = errno;
    process_lock.Unlock();
    return IoError(Describe() + ": " + op + " of key " + QuoteKey(key) + ": open " + lock_path,
                   err);
  }
  Backoff backoff(std::chrono::microseconds(100), Millis(5));
  while (true) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return std::make_unique<LockHolder>(fd);
    int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) {
      ::close(fd);
      process_lock.Unlock();
      return IoError(Describe() + ": " + op + " of key " + QuoteKey(key) + ": flock " + lock_path,
                     err);
    }
    if (!backoff.SleepWithin(deadline)) {
      ::close(fd);
      process_lock.Unlock();
      return lock_timeout();
    }
  }
}

StatusOr<std::optional<std::string>> FileStore::ReadKey(const char* op,
                                                        const std::string& key) const {
  const std::string name = FileNameForKey(key);
  const std::string path = dir_ + "/" + name;
  const std::string where = Describe() + ": " + op + " of key " + QuoteKey(key);
  // O_NONBLOCK: a FIFO put at a key's path would block the open past every deadline.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return IoError(where + ": open " + path, errno);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return IoError(where + ": fstat " + path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InternalError(where + ": " + path +
                         " is not a regular file; it was not written by gyre");
  }
  const size_t limit = kMaxValueBytes + kMaxKeyBytes + 8;
  if (static_cast<uint64_t>(st.st_size) > limit) {
    ::close(fd);
    return InternalError(where + ": " + path + " holds " + std::to_string(st.st_size) +
                         " bytes, more than any value can; it was not written by gyre");
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(fd, &data[done], data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return IoError(where + ": read " + path, err);
    }
    if (n == 0) break;  // published files never shrink; treat a short read as the content
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(done);
  if (!IsHashedName(name)) return std::optional<std::string>(std::move(data));
  uint64_t key_len = 0;
  for (int i = 0; i < 8 && static_cast<size_t>(i) < data.size(); ++i) {
    key_len |= static_cast<uint64_t>(static_cast<unsigned char>(data[i])) << (8 * i);
  }
  if (data.size() < 8 || key_len > data.size() - 8) {
    return InternalError(where + ": " + path + " is corrupt (bad key header)");
  }
  if (data.compare(8, key_len, key) != 0) {
    return InternalError(where + ": hash collision: " + path + " holds key " +
                         QuoteKey(data.substr(8, key_len)));
  }
  return std::optional<std::string>(data.substr(8 + key_len));
}

StatusOr<bool> FileStore::KeyExists(const char* op, const std::string& key) const {
  const std::string name = FileNameForKey(key);
  if (IsHashedName(name)) {
    // Only the content tells a colliding key apart.
    GYRE_ASSIGN_OR_RETURN(std::optional<std::string> value, ReadKey(op, key));
    return value.has_value();
  }
  const std::string path = dir_ + "/" + name;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return IoError(Describe() + ": " + op + " of key " + QuoteKey(key) + ": stat " + path, errno);
}

StatusOr<std::string> FileStore::StageKey(const char* op, const std::string& key,
                                          const std::string& value) {
  static std::atomic<uint64_t> counter{0};
  static const std::string host = HostName();
  const std::string where = Describe() + ": " + op + " of key " + QuoteKey(key);
  const std::string temp = dir_ + "/.tmp." + host + "." + std::to_string(::getpid()) + "." +
                           std::to_string(counter.fetch_add(1));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return IoError(where + ": create " + temp, errno);
  const bool hashed = IsHashedName(FileNameForKey(key));
  Status status = WriteAll(fd, hashed ? EncodeHashedContent(key, value) : value, temp);
  if (status.ok() && ::fsync(fd) != 0) status = IoError("fsync " + temp, errno);
  if (::close(fd) != 0 && status.ok()) status = IoError("close " + temp, errno);
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status.WithContext(where);
  }
  return temp;
}

Status FileStore::PublishKey(const char* op, const std::string& key, const std::string& temp) {
  const std::string name = FileNameForKey(key);
  const std::string path = dir_ + "/" + name;
  const std::string where = Describe() + ": " + op + " of key " + QuoteKey(key);
  Status status;
  if (IsHashedName(name)) {
    // The caller holds the lock, so this check and the rename below cannot interleave with
    // another writer.
    StatusOr<std::optional<std::string>> existing = ReadKey(op, key);
    if (!existing.ok()) status = existing.status();
  }
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = IoError(where + ": rename " + temp + " to " + path, errno);
  }
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

Status FileStore::WriteKey(const char* op, const std::string& key, const std::string& value) {
  GYRE_ASSIGN_OR_RETURN(std::string temp, StageKey(op, key, value));
  return PublishKey(op, key, temp);
}

// A staged file that was not published: removed with the call's end, whichever way it ends.
class FileStore::Staged {
 public:
  explicit Staged(std::string path) : path_(std::move(path)) {}
  ~Staged() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  // The path, now PublishKey's to rename or remove.
  std::string Release() { return std::exchange(path_, std::string()); }

 private:
  std::string path_;
};

Status FileStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_RETURN_IF_ERROR(CheckValue(key, value));
  // Written and flushed before the lock is taken: under it only the rename, so writers
  // queue behind microseconds rather than each other's fsync.
  GYRE_ASSIGN_OR_RETURN(std::string temp, StageKey("Set", key, value));
  Staged staged(std::move(temp));
  GYRE_ASSIGN_OR_RETURN(auto lock, Lock("Set", key, deadline));
  return PublishKey("Set", key, staged.Release());
}

StatusOr<std::string> FileStore::Get(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  CallTimer timer(deadline);
  Backoff backoff(Millis(1), Millis(50));
  while (true) {
    GYRE_ASSIGN_OR_RETURN(std::optional<std::string> value, ReadKey("Get", key));
    if (value.has_value()) return std::move(*value);
    if (!backoff.SleepWithin(deadline)) break;
  }
  return internal::KeyNotSetError(Describe(), "Get", key, timer);
}

StatusOr<std::optional<std::string>> FileStore::TryGet(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  return ReadKey("TryGet", key);
}

StatusOr<int64_t> FileStore::Add(const std::string& key, int64_t delta, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_ASSIGN_OR_RETURN(auto lock, Lock("Add", key, deadline));
  GYRE_ASSIGN_OR_RETURN(std::optional<std::string> current, ReadKey("Add", key));
  GYRE_ASSIGN_OR_RETURN(int64_t result, internal::AddToCounter(Describe(), key, current, delta));
  GYRE_RETURN_IF_ERROR(WriteKey("Add", key, std::to_string(result)));
  return result;
}

StatusOr<std::string> FileStore::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_RETURN_IF_ERROR(CheckValue(key, desired));
  // A comparison that fails already is answered without writing: in a rendezvous every rank
  // but the first finds the world size set, and staging its value cost a write and an fsync.
  // A failing CompareSet changes nothing, so an unlocked read (keys are replaced by rename:
  // it sees a whole value) answers it as the locked one would have at that moment.
  GYRE_ASSIGN_OR_RETURN(std::optional<std::string> seen, ReadKey("CompareSet", key));
  if (!internal::CompareSetMatches(seen, expected)) {
    if (!seen.has_value()) return internal::KeyAbsentForCompareSet(Describe(), key);
    return std::move(*seen);
  }
  // Staged before the lock, as Set is; removed again when the comparison fails after all.
  GYRE_ASSIGN_OR_RETURN(std::string temp, StageKey("CompareSet", key, desired));
  Staged staged(std::move(temp));
  GYRE_ASSIGN_OR_RETURN(auto lock, Lock("CompareSet", key, deadline));
  GYRE_ASSIGN_OR_RETURN(std::optional<std::string> current, ReadKey("CompareSet", key));
  if (!internal::CompareSetMatches(current, expected)) {
    if (!current.has_value()) return internal::KeyAbsentForCompareSet(Describe(), key);
    return std::move(*current);
  }
  GYRE_RETURN_IF_ERROR(PublishKey("CompareSet", key, staged.Release()));
  return desired;
}

Status FileStore::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const std::string& key : keys) GYRE_RETURN_IF_ERROR(CheckKey(key));
  CallTimer timer(deadline);
  Backoff backoff(Millis(1), Millis(50));
  // A key seen once counts as present, so only the first key not yet seen is polled: every
  // key must appear anyway, and with p ranks each waiting for p keys, polling all that are
  // missing on every turn was p^2 file lookups per turn (a 1024-rank rendezvous on one host
  // took minutes of CPU). The keys still missing are listed when the wait gives up.
  size_t seen = 0;
  while (true) {
    while (seen < keys.size()) {
      GYRE_ASSIGN_OR_RETURN(bool exists, KeyExists("Wait", keys[seen]));
      if (!exists) break;
      ++seen;
    }
    if (seen == keys.size()) return Status::Ok();
    if (!backoff.SleepWithin(deadline)) break;
  }
  std::vector<std::string> missing;
  for (size_t i = seen; i < keys.size(); ++i) {
    GYRE_ASSIGN_OR_RETURN(bool exists, KeyExists("Wait", keys[i]));
    if (!exists) missing.push_back(keys[i]);
  }
  if (missing.empty()) return Status::Ok();  // the last ones came while the wait gave up
  return internal::KeysMissingError(Describe(), missing, keys.size(), timer);
}

Status FileStore::Delete(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_ASSIGN_OR_RETURN(auto lock, Lock("Delete", key, deadline));
  const std::string path = PathFor(key);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return internal::KeyNotFoundForDelete(Describe(), key);
    return IoError(Describe() + ": Delete of key " + QuoteKey(key) + ": unlink " + path, errno);
  }
  return Status::Ok();
}

}  // namespace gyre::store
