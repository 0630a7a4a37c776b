// The one place that knows which torch gyre's backend is built against. torch 1.x backends
// subclass c10d::ProcessGroup; torch 2.x moved the collective virtuals to c10d::Backend
// (same signatures for the calls gyre implements), wrapped by a ProcessGroup in Python.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace gyre::python {

#if TORCH_VERSION_MAJOR >= 2
using TorchBackendBase = c10d::Backend;
#else
using TorchBackendBase = c10d::ProcessGroup;
#endif

}  // namespace gyre::python
