#include "core/store/store_wire.h"

namespace gyre::store::internal {

bool EncodeFrame(const google::protobuf::MessageLite& message, std::string* frame) {
  size_t size = message.ByteSizeLong();
  if (size > kMaxFrameBytes) return false;
  frame->resize(kFrameHeaderBytes + size);
  EncodeFrameLength(static_cast<uint32_t>(size), reinterpret_cast<unsigned char*>(&(*frame)[0]));
  return message.SerializeToArray(&(*frame)[kFrameHeaderBytes], static_cast<int>(size));
}

Status CheckRequest(const proto::StoreRequest& request, const std::string& where) {
  const proto::StoreOp op = request.op();
  if (op <= proto::STORE_OP_UNSPECIFIED || op > proto::STORE_OP_TRY_GET_MANY) {
    return InvalidArgumentError(where + ": unknown store op " +
                                std::to_string(static_cast<int>(op)));
  }
  const size_t keys = static_cast<size_t>(request.keys_size());
  if (op == proto::STORE_OP_WAIT || op == proto::STORE_OP_TRY_GET_MANY) {
    if (keys == 0 || keys > kMaxWaitKeys) {
      return InvalidArgumentError(where + ": " + StoreOpName(op) + " names " +
                                  std::to_string(keys) + " keys; it must name 1 to " +
                                  std::to_string(kMaxWaitKeys));
    }
  } else if (keys != 1) {
    return InvalidArgumentError(where + ": " + StoreOpName(op) + " needs exactly one key, got " +
                                std::to_string(keys));
  }
  for (const std::string& key : request.keys()) GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_RETURN_IF_ERROR(CheckValue(request.keys(0), request.value()));
  GYRE_RETURN_IF_ERROR(CheckValue(request.keys(0), request.expected()));
  return Status::Ok();
}

void SetResponseStatus(const Status& status, proto::StoreResponse* response) {
  response->set_code(static_cast<int32_t>(status.code()));
  response->set_message(status.message());
}

Status ResponseStatus(const proto::StoreResponse& response) {
  if (response.code() == 0) return Status::Ok();
  if (!IsKnownStatusCode(response.code())) {
    return InternalError("store server answered with unknown status code " +
                         std::to_string(response.code()) + ": " + response.message());
  }
  return Status(static_cast<StatusCode>(response.code()), response.message());
}

const char* StoreOpName(proto::StoreOp op) {
  switch (op) {
    case proto::STORE_OP_SET:
      return "Set";
    case proto::STORE_OP_GET:
      return "Get";
    case proto::STORE_OP_TRY_GET:
      return "TryGet";
    case proto::STORE_OP_ADD:
      return "Add";
    case proto::STORE_OP_COMPARE_SET:
      return "CompareSet";
    case proto::STORE_OP_WAIT:
      return "Wait";
    case proto::STORE_OP_DELETE:
      return "Delete";
    case proto::STORE_OP_TRY_GET_MANY:
      return "TryGetMany";
    default:
      return "UnknownOp";
  }
}

}  // namespace gyre::store::internal
