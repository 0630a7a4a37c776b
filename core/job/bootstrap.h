// Joining a job: open the store, bind this rank's TCP listener, rendezvous (publish the
// address, learn everyone's, or fail naming the missing or conflicting ranks), connect the
// transport and hand back a Communicator. Used by gyred and by the embedded client alike.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/job/identity.h"
#include "core/store/rendezvous.h"
#include "core/store/store.h"

namespace gyre::job {

struct JoinOptions {
  Identity identity;
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;
  Duration rendezvous_timeout = Seconds(60);
  CommOptions comm;
};

struct Joined {
  std::unique_ptr<store::Store> store;
  std::unique_ptr<Communicator> comm;
  std::vector<store::PeerRecord> peers;
  std::string address;  // this rank's listening address
};

StatusOr<Joined> JoinJob(const JoinOptions& options);

}  // namespace gyre::job
