// gyre as a torch.distributed backend: every c10d collective becomes one gyre call queued on
// a CallRunner; the returned Work (and its Future, which DDP uses) completes from gyre's
// completion, with gyre's verdict as the exception when the call failed.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/algo/collective.h"
#include "python/call_runner.h"
#include "python/torch_compat.h"

namespace gyre::python {

// How the backend joins.
struct BackendSpec {
  c10::intrusive_ptr<c10d::Store> store;  // torch's store for this group
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};  // becomes gyre's progress timeout
  bool deterministic = false;
  std::string algorithm;  // "" for gyre's choice
  std::string job_id = "torch";
  // Join through gyre's own environment (gyrerun: daemon or embedded) instead of torch's
  // store, when the rank and size agree with it.
  bool use_gyre_environment = true;
};

class GyreProcessGroup final : public TorchBackendBase {
 public:
  // Throws StatusError when joining fails.
  explicit GyreProcessGroup(const BackendSpec& spec);
  ~GyreProcessGroup() override;

  const std::string getBackendName() const override { return "gyre"; }
  // "embedded" or "daemon", and whether the job was found through gyre's environment.
  std::string mode() const;
  // Waits on this thread may raise KeyboardInterrupt; call from the Python main thread.
  static void RememberPythonMainThread();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  // Queues `call` (which runs on gyre's worker thread and may use ATen); the Work's result
  // is `outputs`.
  // A collective method that threw before it queued its call: the call is refused in its
  // place in the sequence (Comm::RefuseCall) with the exception's text.
  void RefuseUnlessEnqueued(const char* collective, const std::exception& e);
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type, const char* what,
                                         std::vector<at::Tensor> outputs,
                                         std::function<Status(Comm&)> call);
  // Posts a send (`send`) or receive of `buffer` at once, beside the queued collectives
  // (CallRunner::StartMessage); for a receive into a strided tensor, `buffer` is a dense
  // copy whose contents land in `tensor` when the message completes.
  c10::intrusive_ptr<c10d::Work> StartMessage(bool send, const at::Tensor& tensor,
                                              const at::Tensor& buffer, int peer, int tag);

  // The group's options for one collective: the group's algorithm only where that collective
  // has it (configure(algorithm="ring") steers allreduce and allgather; a broadcast or a
  // barrier, which DDP makes first, chooses its own), and the call's timeout when it gives one.
  gyre::Options OptionsFor(algo::Collective c, std::chrono::milliseconds timeout) const;

  gyre::Options options_;
  algo::Algorithm algorithm_ = algo::Algorithm::kAuto;  // options_.algorithm, parsed
  std::unique_ptr<CallRunner> runner_;
  // Where Works and Futures are marked done: their callbacks are user code, which may make
  // collectives and wait for them, so they must not run on the runner's worker.
  std::shared_ptr<Completions> completions_ = std::make_shared<Completions>();
  bool from_environment_ = false;
};

}  // namespace gyre::python
