// SPDX-License-Identifier: MIT
// One intercepted call's route and agreement: libshaddr's per-call entry (shaddr_call_route,
// coll.h) decides it, records it in the node's call ledger and hands its step to the
// collective; this file adds what only the interposer knows: its counters, its settings
// (SHADDR_INTERPOSE_FORWARD) and, over several nodes, the agreement no ledger spans.
//
// Every rank ends up in the same place: ranks whose arguments differ (an erroneous program) or
// that chose differently all run PMPI_*, which reports the error as it would without the
// interposer, instead of some waiting in libshaddr for the others. On one node through the
// ledger: a forwarded call is recorded by the route, a call for libshaddr is announced once its
// buffers are ready (agreed()) and settled by the libshaddr collective that follows, which
// returns -EXDEV where the ranks' calls differ. Over several nodes, for the calls the hierarchy
// takes, with agree_nodes (a node reduce and broadcast of 16 bytes and the leaders'
// PMPI_Allreduce of them, per call and also per forwarded call: a rank that forwards must tell
// the others, which wait for every rank), unless the plan sends no size of that call to
// libshaddr: then every rank forwards it whatever its arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shaddr/coll.h"
#include "state.h"

namespace shaddr::interpose {

// What runs when the interposer does not call libshaddr: this MPI's own collectives.
#ifdef OMPI_MAJOR_VERSION
constexpr shaddr_fallback kFallback = SHADDR_FALLBACK_OPENMPI;
#else
constexpr shaddr_fallback kFallback = SHADDR_FALLBACK_MPICH;
#endif

// Over several nodes: true when every rank of s.comm passed @token and it is not
// SHADDR_CALL_FORWARDED; the same answer on every rank (agree.cc).
bool agree_nodes(State &s, uint64_t token);

// libshaddr's view of an intercepted call: its collective, and SHADDR_CALL_V for a v-call.
struct CallKind {
  shaddr_coll coll;
  unsigned flags;
};
extern const CallKind kCallKind[SHADDR_IP_COUNT];

class Call {
 public:
  Call(shaddr_interpose_call w, State *st) : which(w), s(st) {}

  // Whether libshaddr runs the call (@bytes as the plan keys them, @flags SHADDR_PLAN_* and
  // SHADDR_CALL_UNSIZED, @root, @extra: struct shaddr_call), by the route: on one node a
  // forwarded call is recorded in the ledger here; a call for libshaddr is recorded by agreed()
  // or forward(), once this rank knows whether it can carry it out. Over several nodes the
  // group's plan decides, and agreed()/forward() agree.
  bool lib(size_t bytes, unsigned flags = 0, int root = -1, uint64_t extra = 0) {
    call_ = shaddr_call{kCallKind[which].coll,
                        flags | kCallKind[which].flags | SHADDR_CALL_PREPARE |
                            (settings().forward[which] ? SHADDR_CALL_FALLBACK : 0u),
                        bytes, root, extra, nullptr, 0};
    decided_ = true;
    const int r = s->multi() ? shaddr_call_decide(s->plan, &call_)
                             : shaddr_call_route(s->sc, kFallback, &call_);
    routed_ = r == SHADDR_ROUTE_LIBSHADDR;
    recorded_ = !routed_ && !s->multi();
    return routed_;
  }

  // Runs the call in PMPI_*; the peers learn it before this rank blocks there.
  template <typename Run>
  int forward(Run &&run) {
    if (s && !recorded_) record_forwarded();
    count_forward(which);
    return run();
  }

  // True when every rank (of the node, or of the communicator over several nodes) makes this
  // call alike; false: the caller runs it in PMPI_* with its own arguments, as every other rank
  // does. On one node the call is only announced here: the libshaddr collective that follows
  // settles it, and returns -EXDEV, which failed() turns into the same PMPI_* run.
  bool agreed(const char *name) {
    if (s->multi()) return agreed_nodes(name);
    recorded_ = true;
    const int rc = shaddr_call_commit(s->sc, &call_, 1);
    if (rc == SHADDR_ROUTE_LIBSHADDR) return true;
    say_fallback(*s, name, rc);
    count_fallback(which);
    return false;
  }

  const shaddr_interpose_call which;
  State *const s;

 private:
  // Over several nodes: the calls with arguments that the hierarchy takes (the others are
  // forwarded on such communicators whatever their arguments, as are calls that
  // SHADDR_INTERPOSE_FORWARD names), where the plan sends some size of them to libshaddr.
  bool across();
  bool agreed_nodes(const char *name);  // agreed() over several nodes
  void record_forwarded();  // agree.cc: the forwarded record of a call not yet recorded

  shaddr_call call_{};
  bool decided_ = false;   // lib() ran: call_ holds the route's answer
  bool routed_ = false;    // lib() said libshaddr
  bool recorded_ = false;  // the ledger holds this call's record (one node)
};

}  // namespace shaddr::interpose
