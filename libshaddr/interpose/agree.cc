// SPDX-License-Identifier: MIT
// One intercepted call's agreement (agree.h): the records a call makes where the route did not
// make them, and the agreement over several nodes.
#include "agree.h"

#include <mpi.h>

#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose {

const CallKind kCallKind[SHADDR_IP_COUNT] = {
    {SHADDR_COLL_BARRIER, 0},   {SHADDR_COLL_BCAST, 0},
    {SHADDR_COLL_REDUCE, 0},    {SHADDR_COLL_ALLREDUCE, 0},
    {SHADDR_COLL_GATHER, 0},    {SHADDR_COLL_GATHER, SHADDR_CALL_V},
    {SHADDR_COLL_SCATTER, 0},   {SHADDR_COLL_SCATTER, SHADDR_CALL_V},
    {SHADDR_COLL_ALLGATHER, 0}, {SHADDR_COLL_ALLGATHER, SHADDR_CALL_V},
    {SHADDR_COLL_ALLTOALL, 0},  {SHADDR_COLL_ALLTOALL, SHADDR_CALL_V},
};

// No call ledger spans the communicator: the ranks agree on @token by AND-ing {token, ~token}
// over it, whose two results cover every bit exactly when no two tokens differ. libshaddr
// reduces in each node to its leader, the leaders PMPI_Allreduce 16 bytes, libshaddr broadcasts
// the verdict in each node (a node whose libshaddr step fails, every rank of it alike, does that
// step with PMPI_* on the node).
bool agree_nodes(State &s, uint64_t token) {
  uint64_t v[2] = {token, ~token};
  uint64_t mine[2] = {v[0], v[1]};
  const bool lead = s.leader();
  if (s.sc &&
      shaddr_reduce(s.sc, mine, lead ? v : nullptr, 2, SHADDR_UINT64, SHADDR_OP_BAND, 0) != 0 &&
      PMPI_Reduce(mine, lead ? v : nullptr, 2, MPI_UINT64_T, MPI_BAND, 0, s.node) != MPI_SUCCESS)
    v[0] = v[1] = 0;  // no verdict: this node forwards (the error is MPI's to report)
  if (lead && PMPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_BAND, s.leaders) != MPI_SUCCESS)
    v[0] = v[1] = 0;
  if (s.sc && shaddr_bcast(s.sc, v, sizeof(v), 0) != 0 &&
      PMPI_Bcast(v, 2, MPI_UINT64_T, 0, s.node) != MPI_SUCCESS)
    v[0] = v[1] = 0;
  return (v[0] | v[1]) == ~uint64_t{0} && v[0] != SHADDR_CALL_FORWARDED;
}

bool Call::across() {
  if (!s->multi() || settings().forward[which]) return false;
  if (which != SHADDR_IP_BCAST && which != SHADDR_IP_REDUCE && which != SHADDR_IP_ALLREDUCE &&
      which != SHADDR_IP_ALLGATHER && which != SHADDR_IP_ALLTOALL)
    return false;
  if (!decided_) {  // forwarded on its arguments before lib(): the plan's answer for the kind
    call_ = shaddr_call{kCallKind[which].coll, kCallKind[which].flags | SHADDR_CALL_FALLBACK, 0,
                        -1, 0, nullptr, 0};
    shaddr_call_decide(s->plan, &call_);
    decided_ = true;
  }
  return call_.lib_any != 0;
}

void Call::record_forwarded() {
  recorded_ = true;
  if (s->multi()) {
    if (across()) agree_nodes(*s, SHADDR_CALL_FORWARDED);
  } else if (routed_) {  // libshaddr's, but this rank cannot carry it out
    shaddr_call_commit(s->sc, &call_, 0);
  } else {  // forwarded on its arguments before lib(): the route records it
    call_ = shaddr_call{kCallKind[which].coll, kCallKind[which].flags | SHADDR_CALL_FALLBACK, 0,
                        -1, 0, nullptr, 0};
    shaddr_call_route(s->sc, kFallback, &call_);
  }
}

bool Call::agreed_nodes(const char *name) {
  recorded_ = true;
  if (!across() || agree_nodes(*s, shaddr_call_token(&call_))) return true;
  say(s, "%s: the ranks' arguments differ: PMPI_*", name);
  count_fallback(which);
  return false;
}

}  // namespace shaddr::interpose
