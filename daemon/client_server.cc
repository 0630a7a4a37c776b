#include "daemon/client_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/ipc/ipc.h"
#include "core/algo/collective.h"
#include "glog/logging.h"
#include "proto/client.pb.h"

namespace gyre::daemon {
namespace {

void ToProto(const Status& s, proto::StatusProto* p) {
  p->set_code(static_cast<int>(s.code()));
  p->set_message(s.message());
}

// One client's shared payload area.
struct Mapping {
  void* data = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (data != nullptr) ::munmap(data, bytes);
  }
};

}  // namespace

ClientServer::ClientServer(Communicator* comm, std::string job_id, std::string log_prefix)
    : comm_(comm), job_id_(std::move(job_id)), prefix_(std::move(log_prefix)) {}

ClientServer::~ClientServer() {
  Stop();
  std::lock_guard<std::mutex> lock(threads_mu_);
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  if (!path_.empty()) ::unlink(path_.c_str());
}

Status ClientServer::Listen(const std::string& socket_path) {
  GYRE_ASSIGN_OR_RETURN(listen_fd_, ipc::ListenUnix(socket_path));
  path_ = socket_path;
  LOG(INFO) << prefix_ << "serving clients on " << socket_path;
  return Status::Ok();
}

void ClientServer::Stop() {
  stopping_ = true;
  // Wake connection threads blocked reading an idle client.
  std::lock_guard<std::mutex> lock(threads_mu_);
  for (int fd : live_fds_) ::shutdown(fd, SHUT_RDWR);
}

void ClientServer::Serve(bool until_first_client_leaves) {
  while (!stopping_ && !(until_first_client_leaves && client_left_)) {
    pollfd p{listen_fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, 100);
    if (rc <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(threads_mu_);
    live_fds_.push_back(fd);
    threads_.emplace_back([this, fd] { HandleConnection(fd); });
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
}

void ClientServer::HandleConnection(int fd) {
  Mapping map;
  bool said_hello = false;
  const std::string what = "client connection";
  while (!stopping_) {
    proto::ClientRequest req;
    // Idle clients are allowed (a program may compute for hours between calls); the read
    // wakes every second to notice a shutdown.
    Status rs = ipc::ReadMessage(fd, &req, Deadline::Infinite(), what);
    if (!rs.ok()) {
      if (rs.code() != StatusCode::kUnavailable) {
        LOG(WARNING) << prefix_ << "dropping a client connection: " << rs.message();
      } else {
        LOG(INFO) << prefix_ << "client disconnected";
      }
      break;
    }
    proto::ClientResponse resp;
    resp.set_id(req.id());
    Status result;
    if (req.has_hello()) {
      said_hello = true;
      resp.set_rank(comm_->rank());
      resp.set_world_size(comm_->size());
      resp.set_job_id(job_id_);
      LOG(INFO) << prefix_ << "client pid " << req.hello().client_pid() << " connected";
    } else if (!said_hello) {
      result = InvalidArgumentError("the first request on a connection must be hello");
    } else if (req.has_map_buffer()) {
      const std::string& path = req.map_buffer().path();
      const size_t bytes = req.map_buffer().bytes();
      struct stat st {};
      int mfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      if (mfd < 0) {
        result =
            InvalidArgumentError("cannot open shared memory " + path + ": " + std::strerror(errno));
      } else if (::fstat(mfd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes ||
                 st.st_uid != ::geteuid()) {
        result = InvalidArgumentError("shared memory " + path +
                                      " is smaller than announced or not owned by this user");
        ::close(mfd);
      } else {
        void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        ::close(mfd);
        if (m == MAP_FAILED) {
          result = ResourceExhaustedError("cannot map " + path + ": " + std::strerror(errno));
        } else {
          if (map.data != nullptr) ::munmap(map.data, map.bytes);
          map.data = m;
          map.bytes = bytes;
        }
      }
    } else if (req.has_collective()) {
      const proto::CollectiveCall& c = req.collective();
      algo::CollectiveSpec spec;
      spec.collective = static_cast<algo::Collective>(c.collective());
      spec.count = c.count();
      spec.dtype = static_cast<DataType>(c.dtype());
      spec.op = static_cast<ReduceOp>(c.reduce_op());
      spec.root = c.root();
      spec.world_size = comm_->size();
      CallOptions opts;
      opts.algorithm = static_cast<algo::Algorithm>(c.algorithm());
      opts.deterministic = c.deterministic();
      if (c.timeout_ms() > 0) opts.timeout = Millis(c.timeout_ms());
      if (c.deadline_ms() > 0) {
        opts.deadline = Deadline::After(*SteadyClock::Get(), Millis(c.deadline_ms()));
      }
      if (c.collective() < 0 || c.collective() >= algo::kNumCollectives || c.algorithm() < 0 ||
          c.algorithm() >= algo::kNumAlgorithms) {
        result = InvalidArgumentError("unknown collective or algorithm value in request");
      } else {
        result = algo::ValidateSpec(spec);
      }
      const void* in = nullptr;
      void* out = nullptr;
      if (result.ok()) {
        const size_t es = DataTypeSize(spec.dtype);
        const size_t in_bytes = static_cast<size_t>(algo::InputCount(spec, comm_->rank())) * es;
        const size_t out_bytes = static_cast<size_t>(algo::OutputCount(spec, comm_->rank())) * es;
        auto fits = [&](uint64_t off, size_t n) {
          return n == 0 || (map.data != nullptr && off <= map.bytes && n <= map.bytes - off);
        };
        if (!fits(c.input_offset(), in_bytes) || !fits(c.output_offset(), out_bytes)) {
          result = InvalidArgumentError("the call's buffers (" + std::to_string(in_bytes) +
                                        " in, " + std::to_string(out_bytes) +
                                        " out) do not fit the mapped shared memory of " +
                                        std::to_string(map.bytes) + " bytes");
        } else {
          if (in_bytes > 0) in = static_cast<unsigned char*>(map.data) + c.input_offset();
          if (out_bytes > 0) out = static_cast<unsigned char*>(map.data) + c.output_offset();
        }
      }
      if (result.ok()) {
        std::lock_guard<std::mutex> lock(call_mu_);
        result = comm_->Run(spec, in, out, opts);
        const OpResult& r = comm_->last();
        resp.set_algorithm(static_cast<int>(r.spec.algorithm));
        resp.set_seq(r.seq);
        resp.set_elapsed_ns(r.elapsed.count());
        resp.set_bytes_sent(r.counters.bytes_sent());
        resp.set_msgs_sent(r.counters.msgs_sent());
        resp.set_bytes_recv(r.counters.bytes_recv());
        resp.set_msgs_recv(r.counters.msgs_recv());
        ++calls_;
        if (!result.ok()) LOG(ERROR) << prefix_ << result.ToString();
      }
    } else {
      result = InvalidArgumentError("empty request");
    }
    ToProto(result, resp.mutable_status());
    Status ws =
        ipc::WriteMessage(fd, resp, Deadline::After(*SteadyClock::Get(), Seconds(30)), what);
    if (!ws.ok()) {
      LOG(WARNING) << prefix_ << "cannot answer the client: " << ws.message();
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    live_fds_.erase(std::remove(live_fds_.begin(), live_fds_.end(), fd), live_fds_.end());
  }
  ::close(fd);
  if (said_hello) client_left_ = true;
}

}  // namespace gyre::daemon
