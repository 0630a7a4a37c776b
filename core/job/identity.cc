#include "core/job/identity.h"

#include <cerrno>
#include <cstdlib>

namespace gyre::job {
namespace {

StatusOr<int> ParseInt(const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || end == nullptr || *end != '\0' || errno != 0 || v < INT32_MIN ||
      v > INT32_MAX) {
    return InvalidArgumentError(name + "='" + value + "' is not an integer");
  }
  return static_cast<int>(v);
}

}  // namespace

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup MapEnvironment(std::map<std::string, std::string> env) {
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

StatusOr<Identity> ResolveIdentity(const IdentityOverrides& o, const EnvLookup& env) {
  Identity id;
  struct Source {
    const char* name;
    const char* rank;
    const char* size;
    const char* local_rank;
  };
  const Source sources[] = {
      {"GYRE_*", "GYRE_RANK", "GYRE_WORLD_SIZE", "GYRE_LOCAL_RANK"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  if (o.rank && o.world_size) {
    id.rank = *o.rank;
    id.world_size = *o.world_size;
    id.source = "flags";
  } else {
    for (const Source& s : sources) {
      auto r = env(s.rank);
      auto n = env(s.size);
      if (!r || !n) continue;
      GYRE_ASSIGN_OR_RETURN(id.rank, ParseInt(s.rank, *r));
      GYRE_ASSIGN_OR_RETURN(id.world_size, ParseInt(s.size, *n));
      if (auto l = env(s.local_rank)) {
        GYRE_ASSIGN_OR_RETURN(id.local_rank, ParseInt(s.local_rank, *l));
      }
      id.source = s.name;
      break;
    }
    if (o.rank) id.rank = *o.rank;
    if (o.world_size) id.world_size = *o.world_size;
    if (id.source.empty()) {
      if (!o.rank || !o.world_size) {
        return InvalidArgumentError(
            "cannot tell this process's rank and world size: pass --rank and --world_size, or "
            "set GYRE_RANK/GYRE_WORLD_SIZE (or torchrun's RANK/WORLD_SIZE, Open MPI's "
            "OMPI_COMM_WORLD_RANK/SIZE, Slurm's SLURM_PROCID/SLURM_NTASKS)");
      }
    } else if (o.rank || o.world_size) {
      id.source += " + flags";
    }
  }
  if (id.world_size < 1) {
    return InvalidArgumentError("world size " + std::to_string(id.world_size) +
                                " must be at least 1 (from " + id.source + ")");
  }
  if (id.rank < 0 || id.rank >= id.world_size) {
    return InvalidArgumentError("rank " + std::to_string(id.rank) +
                                " is out of range for world size " + std::to_string(id.world_size) +
                                " (from " + id.source + ")");
  }
  // Store: explicit, GYRE_STORE, torchrun's MASTER_ADDR:MASTER_PORT.
  if (o.store_url && !o.store_url->empty()) {
    id.store_url = *o.store_url;
  } else if (auto s = env("GYRE_STORE")) {
    id.store_url = *s;
  } else if (auto a = env("MASTER_ADDR")) {
    auto port = env("MASTER_PORT");
    if (!port) return InvalidArgumentError("MASTER_ADDR is set but MASTER_PORT is not");
    GYRE_ASSIGN_OR_RETURN(int pnum, ParseInt("MASTER_PORT", *port));
    id.store_url = "tcp://" + *a + ":" + std::to_string(pnum);
  }
  if (o.job_id && !o.job_id->empty()) {
    id.job_id = *o.job_id;
  } else if (auto j = env("GYRE_JOB_ID")) {
    id.job_id = *j;
  } else if (auto j2 = env("TORCHELASTIC_RUN_ID")) {
    id.job_id = *j2;
  } else if (auto j3 = env("SLURM_JOB_ID")) {
    id.job_id = "slurm-" + *j3;
  } else {
    id.job_id = "default";
  }
  if (o.secret_file && !o.secret_file->empty()) {
    id.secret_file = *o.secret_file;
  } else if (auto f = env("GYRE_SECRET_FILE")) {
    id.secret_file = *f;
  }
  return id;
}

}  // namespace gyre::job
