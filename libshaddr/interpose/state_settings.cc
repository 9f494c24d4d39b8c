// SPDX-License-Identifier: MIT
// The interposer's settings, read once per process (state_parts.h; agreed at MPI_Init in
// state.cc).
#include <cctype>
#include <cerrno>

#include "state_parts.h"

namespace shaddr::interpose {
namespace {

// SHADDR_INTERPOSE_FORWARD: the calls named are always forwarded (Call::lib asks the route
// with SHADDR_CALL_FALLBACK). 0, or -EINVAL with *why.
int read_forward(SettingsReader &in, Settings *st, std::string *why) {
  static const struct {
    const char *name;
    shaddr_interpose_call call;
  } names[] = {
      {"barrier", SHADDR_IP_BARRIER},     {"bcast", SHADDR_IP_BCAST},
      {"reduce", SHADDR_IP_REDUCE},       {"allreduce", SHADDR_IP_ALLREDUCE},
      {"gather", SHADDR_IP_GATHER},       {"gatherv", SHADDR_IP_GATHERV},
      {"scatter", SHADDR_IP_SCATTER},     {"scatterv", SHADDR_IP_SCATTERV},
      {"allgather", SHADDR_IP_ALLGATHER}, {"allgatherv", SHADDR_IP_ALLGATHERV},
      {"alltoall", SHADDR_IP_ALLTOALL},   {"alltoallv", SHADDR_IP_ALLTOALLV},
  };
  static_assert(sizeof(names) / sizeof(names[0]) == SHADDR_IP_COUNT,
                "every intercepted collective has a name");
  const std::string list = in.text("SHADDR_INTERPOSE_FORWARD", "");
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string w = list.substr(at, end - at);
    w.erase(0, w.find_first_not_of(" \t"));
    w.erase(w.find_last_not_of(" \t") + 1);
    for (char &ch : w) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    at = end + 1;
    if (w.empty()) continue;
    bool known = false;
    for (const auto &n : names)
      if (w == n.name || w == "all") {
        st->forward[n.call] = true;
        known = true;
      }
    if (!known) {
      *why = "SHADDR_INTERPOSE_FORWARD: unknown call `" + w + "` (barrier, bcast, reduce, "
             "allreduce, gather, gatherv, scatter, scatterv, allgather, allgatherv, alltoall, "
             "alltoallv, all)";
      return -EINVAL;
    }
  }
  return 0;
}

}  // namespace

int read_settings(Settings *st, std::string *why) {
  SettingsReader in;
  if (int err = read_forward(in, st, why)) return err;
  st->verbose = shaddr::verbose();
  st->nodes = static_cast<int>(in.size("SHADDR_NODES", 0));
  st->off = !in.flag("SHADDR_INTERPOSE", true);
  st->fail_every = in.size("SHADDR_INTERPOSE_FAIL_EVERY", 0);
  st->verify = in.flag("SHADDR_VERIFY", false);
  st->verify_inject = in.size("SHADDR_VERIFY_INJECT", 0);
  st->preload_children = in.flag("SHADDR_PRELOAD_CHILDREN", false);
  *why = in.why();
  return in.error();
}

}  // namespace shaddr::interpose
