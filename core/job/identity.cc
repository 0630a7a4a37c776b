#include "core/job/identity.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/auth/handshake.h"
#include "core/store/rendezvous.h"
#include "core/store/store.h"

namespace gyre::job {

StatusOr<int64_t> ParseEnvInteger(const std::string& name, const std::string& value, int64_t min,
                                  int64_t max) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size() || v < min ||
      v > max) {
    return InvalidArgumentError(name + "=\"" + value.substr(0, 64) +
                                "\" is not a whole number from " + std::to_string(min) + " to " +
                                std::to_string(max));
  }
  return v;
}

StatusOr<bool> ParseEnvSwitch(const std::string& name, const std::string& value) {
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false") return false;
  return InvalidArgumentError(name + "=\"" + value.substr(0, 64) + "\" is not 0, 1, false or true");
}

namespace {

StatusOr<int> ParseInt(const std::string& name, const std::string& value) {
  GYRE_ASSIGN_OR_RETURN(int64_t v, ParseEnvInteger(name, value, INT32_MIN, INT32_MAX));
  return static_cast<int>(v);
}

// A TCP port: its error gives the range a port has.
StatusOr<int> ParsePort(const std::string& name, const std::string& value) {
  GYRE_ASSIGN_OR_RETURN(int64_t v, ParseEnvInteger(name, value, 1, 65535));
  return static_cast<int>(v);
}

// Splits on commas that are not inside brackets.
std::vector<std::string> SplitTopLevel(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

int SlurmStorePort(int64_t job_id) { return 20000 + static_cast<int>(job_id % 20000); }

StatusOr<std::vector<std::string>> ExpandHostList(const std::string& list) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("host list '" + list + "' does not parse: " + why);
  };
  std::vector<std::string> hosts;
  for (const std::string& item : SplitTopLevel(list)) {
    if (item.empty()) return bad("empty entry");
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      hosts.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == std::string::npos) return bad("'[' without ']' in '" + item + "'");
    const std::string prefix = item.substr(0, open);
    const std::string suffix = item.substr(close + 1);
    if (suffix.find('[') != std::string::npos) return bad("more than one range in '" + item + "'");
    std::string ranges = item.substr(open + 1, close - open - 1);
    size_t start = 0;
    while (start <= ranges.size()) {
      const size_t comma = ranges.find(',', start);
      const std::string r =
          ranges.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t dash = r.find('-');
      const std::string lo = r.substr(0, dash);
      const std::string hi = dash == std::string::npos ? lo : r.substr(dash + 1);
      if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
          hi.find_first_not_of("0123456789") != std::string::npos || lo.size() > 9 ||
          hi.size() > 9) {
        return bad("range '" + r + "' is not N or N-M");
      }
      const long a = std::atol(lo.c_str());
      const long b = std::atol(hi.c_str());
      if (b < a || b - a > 100000) return bad("range '" + r + "' is empty or too large");
      for (long v = a; v <= b; ++v) {
        std::string num = std::to_string(v);
        // "node[01-10]": every number is as wide as the range's first bound.
        if (num.size() < lo.size()) num = std::string(lo.size() - num.size(), '0') + num;
        hosts.push_back(prefix + num + suffix);
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return hosts;
}

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

Status CheckText(const std::string& what, const std::string& value) {
  const auto* s = reinterpret_cast<const unsigned char*>(value.data());
  const size_t n = value.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    auto bad = [&](const char* why) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", c);
      return InvalidArgumentError(what + " " + store::QuoteKey(value) + " " + why + " (byte " +
                                  hex + " at offset " + std::to_string(i) +
                                  "): it must be UTF-8 text without control characters");
    };
    if (c < 0x20 || c == 0x7f) return bad("holds a control character");
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The length of the sequence and the smallest code point it may encode (no overlong
    // forms), then its continuation bytes; surrogates and past U+10FFFF are refused.
    int len = 0;
    uint32_t cp = 0, least = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, least = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, least = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, least = 0x10000;
    } else {
      return bad("is not UTF-8");
    }
    if (i + len > n) return bad("is not UTF-8");
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return bad("is not UTF-8");
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return bad("is not UTF-8");
    if (cp >= 0x80 && cp < 0xa0) return bad("holds a control character");
    i += len;
  }
  return Status::Ok();
}

Status CheckHostName(const std::string& what, const std::string& host) {
  if (host.empty()) return InvalidArgumentError(what + " is empty: a host needs a name");
  if (host.size() > kMaxHostNameBytes) {
    // Not the whole name: this message is printed by every rank, and by gyrerun.
    size_t shown = 24;
    while (shown > 0 && (static_cast<unsigned char>(host[shown]) & 0xc0) == 0x80) --shown;
    return InvalidArgumentError(what + " " + store::QuoteKey(host.substr(0, shown)) + "... is " +
                                std::to_string(host.size()) + " bytes long, more than the " +
                                std::to_string(kMaxHostNameBytes) + " a host name may have");
  }
  GYRE_RETURN_IF_ERROR(CheckText(what, host));
  if (host.find(' ') != std::string::npos) {
    return InvalidArgumentError(what + " " + store::QuoteKey(host) + " contains a space");
  }
  return Status::Ok();
}

Status CheckJobId(const std::string& job_id) {
  if (job_id.empty()) return InvalidArgumentError("the job id is empty");
  GYRE_RETURN_IF_ERROR(CheckText("job id", job_id));
  if (job_id.find('/') != std::string::npos) {
    return InvalidArgumentError("job id " + store::QuoteKey(job_id) +
                                " contains '/', which the store's keys cannot hold");
  }
  if (job_id.size() > auth::kMaxJobIdBytes) {
    return InvalidArgumentError("job id " + store::QuoteKey(job_id) + " is " +
                                std::to_string(job_id.size()) + " bytes, more than the " +
                                std::to_string(auth::kMaxJobIdBytes) + " a job id may have");
  }
  return Status::Ok();
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
  // Before the rank sizes its descriptor limit from it: a world of 2147483647 asked for
  // `ulimit -n 6442451002`, which no kernel grants, instead of saying that gyre has no such job.
  if (id.world_size > store::kMaxWorldSize) {
    return InvalidArgumentError("world size " + std::to_string(id.world_size) + " (from " +
                                id.source + ") is more than the " +
                                std::to_string(store::kMaxWorldSize) +
                                " ranks a gyre job may have");
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
    GYRE_ASSIGN_OR_RETURN(int pnum, ParsePort("MASTER_PORT", *port));
    id.store_url = "tcp://" + *a + ":" + std::to_string(pnum);
  } else if (auto nodes = env("SLURM_STEP_NODELIST"); nodes && id.source.rfind("Slurm", 0) == 0) {
    // Under srun the first node of the step serves the store (gyrerun --slurm there).
    GYRE_ASSIGN_OR_RETURN(std::vector<std::string> hosts, ExpandHostList(*nodes));
    auto job = env("SLURM_JOB_ID");
    int port = 0;
    if (auto p = env("GYRE_STORE_PORT")) {
      GYRE_ASSIGN_OR_RETURN(port, ParsePort("GYRE_STORE_PORT", *p));
    } else {
      if (!job) return InvalidArgumentError("SLURM_STEP_NODELIST is set but SLURM_JOB_ID is not");
      GYRE_ASSIGN_OR_RETURN(int j, ParseInt("SLURM_JOB_ID", *job));
      port = SlurmStorePort(j);
    }
    id.store_url = "tcp://" + hosts.front() + ":" + std::to_string(port);
  } else if (env("MASTER_PORT")) {
    // Half of torchrun's store address, and no other store: said as the reverse case is,
    // rather than as "no store given", which hid the variable that was set.
    return InvalidArgumentError("MASTER_PORT is set but MASTER_ADDR is not");
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
  if (auto l = env("GYRE_LAUNCH_ID")) {
    const bool word = std::all_of(l->begin(), l->end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (l->empty() || l->size() > 128 || !word) {
      return InvalidArgumentError(
          "GYRE_LAUNCH_ID must be 1 to 128 letters, digits, '-', '_' or '.' (gyrerun sets it; "
          "unset it to run without)");
    }
    id.launch_id = *l;
  }
  if (o.secret_file && !o.secret_file->empty()) {
    id.secret_file = *o.secret_file;
  } else if (auto f = env("GYRE_SECRET_FILE")) {
    id.secret_file = *f;
  }
  if (o.host && !o.host->empty()) {
    id.host = *o.host;
    GYRE_RETURN_IF_ERROR(CheckHostName("the host name", id.host));
  } else if (auto h = env("GYRE_HOST")) {
    id.host = *h;
    GYRE_RETURN_IF_ERROR(CheckHostName("GYRE_HOST", id.host));
  } else if (auto n = env("SLURMD_NODENAME")) {
    id.host = *n;
    GYRE_RETURN_IF_ERROR(CheckHostName("SLURMD_NODENAME", id.host));
  } else {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    id.host = name;
  }
  if (o.ifaces) {
    id.ifaces = *o.ifaces;
  } else if (auto f = env("GYRE_IFACES")) {
    id.ifaces = *f;
  }
  if (o.allow_loopback) {
    id.allow_loopback = *o.allow_loopback;
  } else if (auto l = env("GYRE_ALLOW_LOOPBACK"); l && !l->empty()) {
    // "yes" or "2" read as false, silently: refused by name, as GYRE_DETERMINISTIC is.
    GYRE_ASSIGN_OR_RETURN(id.allow_loopback, ParseEnvSwitch("GYRE_ALLOW_LOOPBACK", *l));
  }
  // Read where the ranks spin-wait (ipc::SpinWaitPays), but checked here, so that a rank
  // refuses a bad one before it joins.
  if (auto local = env("GYRE_LOCAL_WORLD_SIZE"); local && !local->empty()) {
    GYRE_RETURN_IF_ERROR(ParseEnvInteger("GYRE_LOCAL_WORLD_SIZE", *local, 1, INT32_MAX).status());
  }
  // Before anything is opened: a bad id otherwise fails at the store or the first handshake.
  GYRE_RETURN_IF_ERROR(CheckJobId(id.job_id));
  return id;
}

}  // namespace gyre::job
