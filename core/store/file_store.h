// FileStore: a Store on a folder shared by every rank (local disk for one host, NFS or
// similar for many). One file per key, published atomically (temp file, fsync, rename);
// read-modify-write calls (Add, CompareSet) and writes serialise on a lock file with flock,
// so many processes may share one folder. Blocking calls poll with capped backoff; Wait
// counts a key as present once it has been seen, even if it is deleted afterwards.
#pragma once

#include <memory>
#include <string>

#include "core/store/store.h"

namespace gyre::store {

class FileStore final : public Store {
 public:
  // Opens (and creates, with parents, if missing; the folder itself with mode 0700) the
  // folder `dir`. A relative `dir` is taken from the current directory. Refuses
  // (InvalidArgument) a folder owned by another user or writable by every user: whoever can
  // write it can rewrite the rendezvous. Errors name the path and the errno text.
  static StatusOr<std::unique_ptr<FileStore>> Open(const std::string& dir);

  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  StatusOr<std::string> Get(const std::string& key, Deadline deadline) override;
  StatusOr<std::optional<std::string>> TryGet(const std::string& key, Deadline deadline) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status Delete(const std::string& key, Deadline deadline) override;
  std::string Describe() const override { return "file://" + dir_; }

  const std::string& dir() const { return dir_; }

  // The file name that holds `key`: "k." + the key with every byte outside [A-Za-z0-9_.-]
  // written as %XX, or, when that would be too long for a file name, "h." + a 128-bit hash
  // of the key (the file then also records the key, so a collision is detected).
  static std::string FileNameForKey(const std::string& key);

 private:
  class LockHolder;

  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  std::string PathFor(const std::string& key) const { return dir_ + "/" + FileNameForKey(key); }
  // nullopt when the key has no file.
  StatusOr<std::optional<std::string>> ReadKey(const char* op, const std::string& key) const;
  StatusOr<bool> KeyExists(const char* op, const std::string& key) const;
  // A write in two parts: StageKey writes the value to a new temporary file and flushes it
  // (no lock needed: the slow part stays outside the store's lock) and returns its path;
  // PublishKey, under the lock, renames it over the key's file (or removes it on failure).
  // WriteKey does both.
  StatusOr<std::string> StageKey(const char* op, const std::string& key, const std::string& value);
  Status PublishKey(const char* op, const std::string& key, const std::string& temp);
  Status WriteKey(const char* op, const std::string& key, const std::string& value);
  class Staged;
  // Takes the folder's write lock (in-process mutex, then flock on <dir>/.lock) within the
  // deadline.
  StatusOr<std::unique_ptr<LockHolder>> Lock(const char* op, const std::string& key,
                                             Deadline deadline);

  const std::string dir_;
};

}  // namespace gyre::store
