// Who a rank is: rank, world size, store, job id, resolved from explicit settings first and
// then from the environment of whatever launched the process, in this order: gyre's own
// variables (GYRE_*), torchrun's (RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT), Open
// MPI's (OMPI_COMM_WORLD_RANK/SIZE) and Slurm's (SLURM_PROCID SLURM_NTASKS). The result says
// which source it used, so logs can tell.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "core/base/status.h"

namespace gyre::job {

struct Identity {
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;
  std::string store_url;  // "file:///dir" or "tcp://host:port"
  std::string job_id;
  std::string source;  // "flags", "GYRE_*", "torchrun", "Open MPI", "Slurm"
  // The job's secret file (core/auth/secret.h): the override, else GYRE_SECRET_FILE; empty
  // when the job runs without a secret.
  std::string secret_file;
};

// Values given explicitly (e.g. by flags); unset fields fall through to the environment.
struct IdentityOverrides {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<std::string> store_url;
  std::optional<std::string> job_id;
  std::optional<std::string> secret_file;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnvironment();
EnvLookup MapEnvironment(std::map<std::string, std::string> env);

// InvalidArgument naming the variable when a value does not parse, when rank/world size
// cannot be found anywhere, or when 0 <= rank < world_size does not hold.
StatusOr<Identity> ResolveIdentity(const IdentityOverrides& overrides, const EnvLookup& env);

}  // namespace gyre::job
