// Who a rank is: rank, world size, store, job id, resolved from explicit settings first and
// then from the environment of whatever launched the process, in this order: gyre's own
// variables (GYRE_*), torchrun's (RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT), Open
// MPI's (OMPI_COMM_WORLD_RANK/SIZE) and Slurm's (SLURM_PROCID SLURM_NTASKS SLURM_LOCALID; the
// store on the first host of SLURM_STEP_NODELIST). The result says which source it used.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

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
  // The host this rank runs on, as other ranks and messages name it: GYRE_HOST, else Slurm's
  // SLURMD_NODENAME, else gethostname(). Ranks with the same host share a machine.
  std::string host;
  // Interface filter for the addresses this rank advertises (core/job/address.h syntax):
  // GYRE_IFACES; empty means listen where told and advertise only that.
  std::string ifaces;
  // A multi-host job may use loopback addresses only when this is set (GYRE_ALLOW_LOOPBACK=1).
  bool allow_loopback = false;
  // gyrerun's id of this run (GYRE_LAUNCH_ID): the ranks it saw exit are marked in the store
  // under it, so that the others stop waiting for them at the rendezvous
  // (store::MarkExit). Empty outside gyrerun.
  std::string launch_id;
};

// Values given explicitly (e.g. by flags); unset fields fall through to the environment.
struct IdentityOverrides {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<std::string> store_url;
  std::optional<std::string> job_id;
  std::optional<std::string> secret_file;
  std::optional<std::string> host;
  std::optional<std::string> ifaces;
  std::optional<bool> allow_loopback;
};

// Expands a Slurm host list: "node[1-3,7],gpu[01-02]" -> node1 node2 node3 node7 gpu01
// gpu02 (zero padding kept). InvalidArgument naming the list when it does not parse.
StatusOr<std::vector<std::string>> ExpandHostList(const std::string& list);

// The TCP port of the store of a Slurm job when none is given: 20000 + SLURM_JOB_ID % 20000,
// so concurrent jobs on one node rarely collide and every task computes the same one.
int SlurmStorePort(int64_t job_id);

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnvironment();
EnvLookup MapEnvironment(std::map<std::string, std::string> env);

// `value` of the variable `name` as a whole number in [min, max]; otherwise InvalidArgument
// naming the variable and the value (unlike atoi, "30s" and "abc" are errors).
StatusOr<int64_t> ParseEnvInteger(const std::string& name, const std::string& value, int64_t min,
                                  int64_t max);

// `value` of the switch `name`: 0/false or 1/true; otherwise InvalidArgument naming both.
StatusOr<bool> ParseEnvSwitch(const std::string& name, const std::string& value);

// A job id as every part of gyre takes it: not empty, without '/' (the store's keys are
// built from it), at most auth::kMaxJobIdBytes bytes (every handshake carries it), and text
// (CheckText). InvalidArgument naming it otherwise.
Status CheckJobId(const std::string& job_id);
// Text the ranks' messages can carry: well-formed UTF-8 without control characters (a rank's
// state and records hold it in protobuf strings, which refuse other bytes, and a refused one
// took every control answer, and so every verdict, with it). InvalidArgument naming `what`.
Status CheckText(const std::string& what, const std::string& value);
// The longest host name a job takes. A DNS name is at most 253 bytes written out (255 on the
// wire), and Linux's HOST_NAME_MAX, what gethostname can return, is 64; so no host is named
// by more, and a longer one is a mistake. Every rank's record and every verdict and error line
// that names a rank carries its host name, so a 70 KB one made each of them 70 KB long.
inline constexpr size_t kMaxHostNameBytes = 255;
// A host name for the job (GYRE_HOST, --host_name, --hosts): text, not empty, at most
// kMaxHostNameBytes bytes (a longer one is refused with its length and only a short prefix of
// it), without spaces.
Status CheckHostName(const std::string& what, const std::string& host);

// InvalidArgument naming the variable when a value does not parse, when rank/world size
// cannot be found anywhere, or when 0 <= rank < world_size does not hold.
StatusOr<Identity> ResolveIdentity(const IdentityOverrides& overrides, const EnvLookup& env);

}  // namespace gyre::job
