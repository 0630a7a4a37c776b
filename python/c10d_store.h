// gyre's rendezvous Store on top of the c10d store torch hands to a backend, so that
// whatever init_method the program used (file://, tcp://, env://) is where gyre's ranks
// find each other. c10d calls throw; each is caught and returned as a Status naming the key.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "core/store/store.h"

namespace gyre::python {

class C10dStore final : public store::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  StatusOr<std::string> Get(const std::string& key, Deadline deadline) override;
  StatusOr<std::optional<std::string>> TryGet(const std::string& key, Deadline deadline) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status Delete(const std::string& key, Deadline deadline) override;
  std::string Describe() const override { return "torch c10d store"; }

 private:
  // Waits for `keys` with c10d's wait, bounded by `deadline`.
  Status WaitKeys(const std::vector<std::string>& keys, Deadline deadline);

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace gyre::python
