// SPDX-License-Identifier: MIT
// The per-call entry (struct shaddr_call in coll.h): the one place a call with a fallback is
// decided (a compare with the plan's lib_from, then one lookup), recorded in the node's call
// ledger (comm.h) and its step handed down to the collective that runs it; the ledger's own C
// entry points; and the library's registry of plans for callers without a node communicator.
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "comm.h"
#include "error.h"
#include "hash.h"
#include "plan.h"

namespace shaddr {
namespace {

// The flags that make a different call (its token), as against how it is recorded.
constexpr unsigned kVariantFlags =
    SHADDR_PLAN_IN_PLACE | SHADDR_PLAN_SEGMENTED | SHADDR_CALL_V | SHADDR_CALL_UNSIZED;

bool valid(const shaddr_call *call) {
  int coll;
  std::memcpy(&coll, &call->coll, sizeof(coll));
  return coll >= 0 && coll < SHADDR_COLL_COUNT;
}

// The decision on @p, both outputs set. A forwarded short call, the common one, costs the
// flags test and one compare. Inline in the route: every call a caller hands over runs it.
[[gnu::always_inline]] inline int decide(const shaddr_plan &p, shaddr_call *call) {
  call->step = nullptr;
  const shaddr_coll coll = call->coll;
  const size_t lib_from = p.ranks ? p.lib_from[coll] : SIZE_MAX;
  call->lib_any = lib_from != SIZE_MAX;
  if (call->flags & SHADDR_CALL_FALLBACK) return SHADDR_ROUTE_FALLBACK;
  if (call->flags & SHADDR_CALL_UNSIZED) return SHADDR_ROUTE_LIBSHADDR;
  if (call->bytes < lib_from || (call->bytes == 0 && coll != SHADDR_COLL_BARRIER))
    return SHADDR_ROUTE_FALLBACK;
  call->step = &plan_step(p, plan_table(coll, call->flags), call->bytes);
  return call->step->use_fallback ? SHADDR_ROUTE_FALLBACK : SHADDR_ROUTE_LIBSHADDR;
}

static_assert(kVariantFlags < (1u << 16) && SHADDR_COLL_COUNT < (1 << 16));

// The token is computed on every call for libshaddr just before its record, which the peers
// wait for: three independent rounds and one joining them, two rounds of latency where a chain
// of one round per field took four.
[[gnu::always_inline]] inline uint64_t token(const shaddr_call &call) {
  const uint64_t id = uint64_t{static_cast<uint32_t>(call.coll)} << 48 |
                      uint64_t{call.flags & kVariantFlags} << 32 |
                      static_cast<uint32_t>(call.root);
  const uint64_t a = hash_mix(kHashSeed, id);
  const uint64_t b = hash_mix(kHashSeed + 1, call.bytes);
  const uint64_t c = hash_mix(kHashSeed + 2, call.extra);
  const uint64_t t = hash_mix(a, b ^ (c << 32 | c >> 32));
  return t == kCallForwarded ? 1 : t;
}

// shaddr_call_route() past its common case: the lookup, and the record of any call.
[[gnu::noinline]] int route(Comm &c, const shaddr_plan &p, shaddr_call *call) {
  const int r = decide(p, call);
  // Every rank decides a Barrier alike (it has no arguments): nothing to record.
  if (call->coll == SHADDR_COLL_BARRIER) return r;
  if (r == SHADDR_ROUTE_FALLBACK) {
    c.forward_call();
    return r;
  }
  // The v-calls run their own choice (Allgatherv by its largest block): nothing to hand down.
  if (call->step && !(call->flags & SHADDR_CALL_V))
    c.hand_down(call->step, call->coll, call->bytes, plan_table(call->coll, call->flags));
  if (!(call->flags & SHADDR_CALL_PREPARE)) c.announce_pending(token(*call));
  return r;
}

// Plans kept for callers that hold no node communicator (shaddr_plan_intern): few (one per node
// size and fallback), kept until the process exits.
std::mutex g_interned_lock;
std::vector<std::unique_ptr<shaddr_plan>> g_interned;

}  // namespace
}  // namespace shaddr

using shaddr::Comm;

extern "C" {

SHADDR_API int shaddr_call_route(shaddr_comm_t *comm, enum shaddr_fallback fallback,
                                 struct shaddr_call *call) {
  int f;
  std::memcpy(&f, &fallback, sizeof(f));
  if (!comm || !call || f < 0 || f >= SHADDR_FALLBACK_COUNT || !shaddr::valid(call))
    return -EINVAL;
  Comm &c = *shaddr::from_handle(comm);
  const shaddr_plan &p = c.plan(fallback);
  // The common call first: a short one the plan gives the caller, forwarded on one compare (a
  // plan that could not be built has lib_from 0 and goes the long way).
  const size_t lib_from = p.lib_from[call->coll];
  if (call->bytes < lib_from && !(call->flags & (SHADDR_CALL_FALLBACK | SHADDR_CALL_UNSIZED)) &&
      call->coll != SHADDR_COLL_BARRIER) {
    call->step = nullptr;
    call->lib_any = lib_from != SIZE_MAX;
    c.forward_call();
    return SHADDR_ROUTE_FALLBACK;
  }
  return shaddr::route(c, p, call);
}

SHADDR_API int shaddr_call_commit(shaddr_comm_t *comm, const struct shaddr_call *call, int ready) {
  if (!comm || !call) return -EINVAL;
  Comm &c = *shaddr::from_handle(comm);
  if (call->coll == SHADDR_COLL_BARRIER) return ready ? SHADDR_ROUTE_LIBSHADDR : SHADDR_ROUTE_FALLBACK;
  if (!ready) {
    c.drop_handed_down();
    c.forward_call();
    return SHADDR_ROUTE_FALLBACK;
  }
  c.announce_pending(shaddr::token(*call));
  return SHADDR_ROUTE_LIBSHADDR;
}

SHADDR_API int shaddr_call_decide(const struct shaddr_plan *plan, struct shaddr_call *call) {
  if (!call || !shaddr::valid(call)) return -EINVAL;
  if (!plan) {
    call->step = nullptr;
    call->lib_any = 0;
    return SHADDR_ROUTE_FALLBACK;
  }
  return shaddr::decide(*plan, call);
}

SHADDR_API uint64_t shaddr_call_token(const struct shaddr_call *call) {
  return call ? shaddr::token(*call) : 1;
}

// The call's record in the node's ledger: every rank runs the call the way the plan says,
// with the same arguments, or every rank learns that one does not (comm.h, the ledger).
SHADDR_API int shaddr_call_agree(shaddr_comm_t *comm, uint64_t token) {
  // A forwarded call's record cannot fail and is on every short call's path: it leaves the
  // thread's last error alone (a thread-local access) and goes first.
  if (comm && token == shaddr::kCallForwarded) {
    shaddr::from_handle(comm)->forward_call();
    return 0;
  }
  shaddr::clear_error();
  if (int err = shaddr::check_comm(comm)) return err;
  return shaddr::from_handle(comm)->agree_call(token);
}

SHADDR_API int shaddr_call_announce(shaddr_comm_t *comm, uint64_t token) {
  shaddr::clear_error();
  if (int err = shaddr::check_comm(comm)) return err;
  if (token == shaddr::kCallForwarded)
    return shaddr::fail(-EINVAL, "shaddr_call_announce: SHADDR_CALL_FORWARDED is shaddr_call_agree's");
  shaddr::from_handle(comm)->announce_pending(token);
  return 0;
}

SHADDR_API const struct shaddr_plan *shaddr_plan_intern(const struct shaddr_plan *plan) {
  if (!plan || !plan->ranks) return nullptr;
  std::lock_guard<std::mutex> hold(shaddr::g_interned_lock);
  for (const auto &p : shaddr::g_interned)
    if (p->digest == plan->digest) return p.get();  // every step alike: the same decisions
  std::unique_ptr<shaddr_plan> copy(new (std::nothrow) shaddr_plan(*plan));
  if (!copy) return nullptr;
  try {
    shaddr::g_interned.push_back(std::move(copy));
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
  return shaddr::g_interned.back().get();
}

}  // extern "C"
