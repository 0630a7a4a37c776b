// gyre._gyre_torch: the pybind11 face of GyreProcessGroup, so that gyre/distributed.py can
// register it with torch.distributed.Backend.register_backend("gyre", ...).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "python/process_group.h"

namespace py = pybind11;

PYBIND11_MODULE(_gyre_torch, m) {
  using gyre::python::BackendSpec;
  using gyre::python::GyreProcessGroup;
  m.doc() = "gyre as a torch.distributed backend";
  // The base class must be registered (by torch) before gyre's subclass is.
  py::module_::import("torch.distributed");
  // gyre.GyreError and the translator that raises it come with the plain module.
  py::module_::import("gyre._gyre");
  GyreProcessGroup::RememberPythonMainThread();

  py::class_<GyreProcessGroup, gyre::python::TorchBackendBase,
             c10::intrusive_ptr<GyreProcessGroup>>(m, "ProcessGroupGyre")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, bool deterministic,
                       const std::string& algorithm, const std::string& job_id,
                       bool use_gyre_environment) {
             BackendSpec spec;
             spec.store = store;
             spec.rank = rank;
             spec.size = size;
             spec.timeout = timeout;
             spec.deterministic = deterministic;
             spec.algorithm = algorithm;
             spec.job_id = job_id;
             spec.use_gyre_environment = use_gyre_environment;
             return c10::make_intrusive<GyreProcessGroup>(spec);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("deterministic") = false, py::arg("algorithm") = "", py::arg("job_id") = "torch",
           py::arg("use_gyre_environment") = true, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("mode", &GyreProcessGroup::mode);
}
