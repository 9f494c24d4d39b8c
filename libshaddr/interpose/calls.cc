// SPDX-License-Identifier: MIT
// The intercepted collectives (calls.h), each an adapter from the MPI call to libshaddr (one
// node) or the node/leader hierarchy (several nodes): its eligibility asked (eligible.h), its
// byte views made (views.h), the call routed (agree.h), run, and its outcome counted. A call
// libshaddr does not take goes to PMPI_* unchanged.
//
// Every decision to forward is taken from values that are the same on every rank of the
// communicator (the communicator's state, byte counts that MPI requires to match, root, and
// for reductions the datatype and op), by libshaddr's per-call entry (agree.h), so all ranks
// take the same path. Datatypes that are not contiguous are packed per rank; that is a local
// choice that changes nothing for the others. libshaddr reports a failure on every rank of a
// node alike; one node then redoes the call (or its phase of it) with PMPI_*, from inputs kept
// intact, so no rank returns wrong data.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "agree.h"
#include "calls.h"
#include "eligible.h"
#include "hash.h"
#include "hier.h"
#include "shaddr/mpi_glue.h"
#include "state.h"
#include "types.h"
#include "verify.h"
#include "views.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

using namespace shaddr::interpose;

namespace {

// Single node: shaddr result -> MPI result, or a note that the caller must fall back.
bool failed(State &s, Call &c, const char *name, int rc) {
  rc = inject_fault(s, rc);
  if (!rc) {
    count_accel(c.which, s);
    return false;
  }
  say_fallback(s, name, rc);
  count_fallback(c.which);
  return true;
}

// Counts a hierarchical call. Takes the flag by pointer: it must be read after the algorithm ran
// (function arguments are evaluated in no fixed order).
int hier_done(const State &s, Call &c, int rc, const bool *fell_back_p) {
  const bool fell_back = *fell_back_p;
  if (fell_back)
    count_fallback(c.which);
  else if (rc == MPI_SUCCESS)
    count_accel(c.which, s);
  return rc;
}

}  // namespace

namespace shaddr::interpose::impl {

int barrier(MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_BARRIER, s);
  if (!s || !c.lib(0)) return c.forward([&] { return PMPI_Barrier(comm); });
  if (s->multi()) {
    bool fb = false;
    return hier_done(*s, c, hier_barrier(*s, &fb), &fb);
  }
  // No arguments to differ: no record in the ledger (every rank skips it alike).
  if (failed(*s, c, "Barrier", shaddr_barrier(s->sc))) return PMPI_Barrier(comm);
  return MPI_SUCCESS;
}

int bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_BCAST, s);
  auto mpi = [&] { return PMPI_Bcast(buf, count, type, root, comm); };
  // The cheapest test first: most small calls are forwarded on the type's size alone.
  MPI_Count tsize = 0;
  if (!s || count <= 0 || bad_root(*s, root) || !type_size(type, &tsize) ||
      !c.lib(static_cast<size_t>(count * tsize), 0, root))
    return c.forward(mpi);
  TypeInfo ti = type_info(type);
  if (!ti.ok || buf == MPI_IN_PLACE) return c.forward(mpi);
  const size_t bytes = static_cast<size_t>(count * ti.size);
  View v;
  if (v.init(buf, count, type, ti) || (s->rank == root && v.pack_in())) return c.forward(mpi);
  if (!c.agreed("Bcast")) return mpi();
  int rc = MPI_SUCCESS;
  if (s->multi()) {
    bool fb = false;
    rc = hier_done(*s, c, hier_bcast(*s, v.data(), bytes, root, &fb), &fb);
  } else if (failed(*s, c, "Bcast", shaddr_bcast(s->sc, v.data(), bytes, root))) {
    return mpi();  // the root's data was only read
  }
  if (rc == MPI_SUCCESS && s->rank != root) rc = v.unpack_out();
  return rc;
}

int reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
           int root, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_REDUCE, s);
  auto mpi = [&] { return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm); };
  shaddr_dtype dt;
  shaddr_op sop;
  size_t esize;
  if (!s || count <= 0 || bad_root(*s, root) || bad_buffers(s->rank == root, sendbuf, recvbuf) ||
      null_data(s->rank == root, sendbuf, recvbuf) || !reducible(type, op, &dt, &sop, &esize) ||
      !c.lib(static_cast<size_t>(count) * esize, 0, root, SHADDR_CALL_EXTRA_REDUCE(dt, sop)))
    return c.forward(mpi);
  const size_t bytes = static_cast<size_t>(count) * esize;
  if (!c.agreed("Reduce")) return mpi();
  const bool is_root = s->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  if (s->multi()) {
    bool fb = false;
    return hier_done(*s, c,
                     hier_reduce(*s, in_place ? recvbuf : sendbuf, recvbuf, count, type, op, dt,
                                 sop, root, &fb),
                     &fb);
  }
  // libshaddr leaves in-place input as it was when it fails; only a failure injected after a
  // success (SHADDR_INTERPOSE_FAIL_EVERY) needs a copy.
  Backup keep;
  if (in_place && settings().fail_every) keep.save(static_cast<char *>(recvbuf), bytes);
  int rc = shaddr_reduce(s->sc, shaddr_mpi_reduce_sendbuf(sendbuf, recvbuf, is_root),
                         is_root ? recvbuf : nullptr, count, dt, sop, root);
  if (failed(*s, c, "Reduce", rc)) {
    keep.restore();
    return mpi();
  }
  return MPI_SUCCESS;
}

int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
              MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_ALLREDUCE, s);
  auto mpi = [&] { return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm); };
  shaddr_dtype dt;
  shaddr_op sop;
  size_t esize;
  if (!s || count <= 0 || bad_buffers(sendbuf, recvbuf) || null_data(true, sendbuf, recvbuf) ||
      !reducible(type, op, &dt, &sop, &esize) ||
      !c.lib(static_cast<size_t>(count) * esize, sendbuf == MPI_IN_PLACE ? SHADDR_PLAN_IN_PLACE : 0,
             -1, SHADDR_CALL_EXTRA_REDUCE(dt, sop)))
    return c.forward(mpi);
  const size_t bytes = static_cast<size_t>(count) * esize;
  if (!c.agreed("Allreduce")) return mpi();
  const bool in_place = sendbuf == MPI_IN_PLACE;
  if (s->multi()) {
    bool fb = false;
    return hier_done(*s, c,
                     hier_reduce(*s, in_place ? recvbuf : sendbuf, recvbuf, count, type, op, dt,
                                 sop, -1, &fb),
                     &fb);
  }
  Backup keep;  // as in reduce()
  if (in_place && settings().fail_every) keep.save(static_cast<char *>(recvbuf), bytes);
  int rc = shaddr_allreduce(s->sc, shaddr_mpi_reduce_sendbuf(sendbuf, recvbuf, 1), recvbuf, count,
                            dt, sop);
  if (failed(*s, c, "Allreduce", rc)) {
    keep.restore();
    return mpi();
  }
  return MPI_SUCCESS;
}

int gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
           int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_GATHER, s);
  auto mpi = [&] {
    return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  };
  if (!s || bad_root(*s, root) || s->multi()) return c.forward(mpi);
  const bool is_root = s->rank == root;
  if (bad_buffers(is_root, sendbuf, recvbuf) ||
      !(is_root ? lib_by_size(c, recvcount, recvtype, root)
                : lib_by_size(c, sendcount, sendtype, root)))
    return c.forward(mpi);
  // Per-rank bytes: the root's receive side equals every sender's send side.
  RootedBlock blk;
  if (!blk.init(is_root, sendbuf, sendcount, sendtype, recvcount, recvtype))
    return c.forward(mpi);
  const TypeInfo &sti = blk.one_ti, &rti = blk.all_ti;
  const bool in_place = blk.in_place;
  const size_t bytes = blk.bytes;
  View sv, rv;
  Backup keep;
  if (!in_place && (sv.init(sendbuf, sendcount, sendtype, sti) || sv.pack_in()))
    return c.forward(mpi);
  if (is_root) {
    if (rv.init(recvbuf, static_cast<MPI_Count>(recvcount) * s->size, recvtype, rti) ||
        (in_place && rv.pack_in(static_cast<MPI_Count>(root) * recvcount, recvcount)))
      return c.forward(mpi);
    if (in_place) keep.save(rv.data() + static_cast<size_t>(root) * bytes, bytes);
  }
  if (!c.agreed("Gather")) return mpi();
  int rc = shaddr_gather(s->sc, in_place ? SHADDR_IN_PLACE : sv.data(), bytes,
                         is_root ? rv.data() : nullptr, root);
  if (failed(*s, c, "Gather", rc)) {
    keep.restore();
    return mpi();
  }
  if (!is_root) return MPI_SUCCESS;
  return in_place ? rv.unpack_out_except(static_cast<MPI_Count>(root) * recvcount, recvcount)
                  : rv.unpack_out();
}

int gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
            MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_GATHERV, s);
  auto mpi = [&] {
    return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                        comm);
  };
  // Non-roots do not know the others' counts: no size threshold here, and each transfer checks
  // the sender's count against the root's (a mismatch fails on every rank: PMPI_* reports it).
  if (!s || bad_root(*s, root) || s->multi() || bad_buffers(s->rank == root, sendbuf, recvbuf) ||
      !c.lib(0, SHADDR_CALL_UNSIZED, root))
    return c.forward(mpi);
  const bool is_root = s->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  TypeInfo rti = is_root ? type_info(recvtype) : TypeInfo{};
  if ((!in_place && (!sti.ok || sendcount < 0)) || (is_root && !rti.ok)) return c.forward(mpi);
  View sv;
  VView rv;
  Backup keep;
  size_t sbytes = 0;
  if (!in_place) {
    if (sv.init(sendbuf, sendcount, sendtype, sti) || sv.pack_in()) return c.forward(mpi);
    sbytes = sv.bytes();
  }
  if (is_root) {
    if (rv.init(recvbuf, recvcounts, displs, s->size, recvtype, rti) ||
        (!in_place && sbytes != rv.bytes[root]))
      return c.forward(mpi);
    if (in_place) {
      if (rv.pack_block(root)) return c.forward(mpi);
      sbytes = rv.bytes[root];
      keep.save(rv.base + rv.displs[root], sbytes);
    }
  }
  if (!c.agreed("Gatherv")) return mpi();
  int rc = shaddr_gatherv(s->sc, in_place ? SHADDR_IN_PLACE : sv.data(), sbytes,
                          is_root ? rv.base : nullptr, is_root ? rv.bytes.data() : nullptr,
                          is_root ? rv.displs.data() : nullptr, root);
  if (failed(*s, c, "Gatherv", rc)) {
    keep.restore();
    return mpi();
  }
  return is_root ? rv.unpack_all(in_place ? root : -1) : MPI_SUCCESS;
}

int scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_SCATTER, s);
  auto mpi = [&] {
    return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  };
  if (!s || bad_root(*s, root) || s->multi()) return c.forward(mpi);
  const bool is_root = s->rank == root;
  if (bad_buffers(is_root, recvbuf, sendbuf) ||
      !(is_root ? lib_by_size(c, sendcount, sendtype, root)
                : lib_by_size(c, recvcount, recvtype, root)))
    return c.forward(mpi);
  RootedBlock blk;
  if (!blk.init(is_root, recvbuf, recvcount, recvtype, sendcount, sendtype))
    return c.forward(mpi);
  const TypeInfo &sti = blk.all_ti, &rti = blk.one_ti;
  const bool in_place = blk.in_place;
  const size_t bytes = blk.bytes;
  View sv, rv;
  if (is_root && (sv.init(sendbuf, static_cast<MPI_Count>(sendcount) * s->size, sendtype, sti) ||
                  sv.pack_in()))
    return c.forward(mpi);
  if (!in_place && rv.init(recvbuf, recvcount, recvtype, rti)) return c.forward(mpi);
  if (!c.agreed("Scatter")) return mpi();
  int rc = shaddr_scatter(s->sc, is_root ? sv.data() : nullptr, bytes,
                          in_place ? const_cast<void *>(SHADDR_IN_PLACE) : rv.data(), root);
  if (failed(*s, c, "Scatter", rc)) return mpi();
  return in_place ? MPI_SUCCESS : rv.unpack_out();
}

int scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
             MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
             int root, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_SCATTERV, s);
  auto mpi = [&] {
    return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype,
                         root, comm);
  };
  if (!s || bad_root(*s, root) || s->multi() || bad_buffers(s->rank == root, recvbuf, sendbuf) ||
      !c.lib(0, SHADDR_CALL_UNSIZED, root))
    return c.forward(mpi);
  const bool is_root = s->rank == root;
  const bool in_place = is_root && recvbuf == MPI_IN_PLACE;
  TypeInfo sti = is_root ? type_info(sendtype) : TypeInfo{};
  TypeInfo rti = in_place ? TypeInfo{} : type_info(recvtype);
  if ((is_root && !sti.ok) || (!in_place && (!rti.ok || recvcount < 0))) return c.forward(mpi);
  VView sv;
  View rv;
  size_t rbytes = 0;
  if (is_root) {
    if (sv.init(sendbuf, sendcounts, displs, s->size, sendtype, sti) || sv.pack_all())
      return c.forward(mpi);
  }
  if (!in_place) {
    if (rv.init(recvbuf, recvcount, recvtype, rti)) return c.forward(mpi);
    rbytes = rv.bytes();
    if (is_root && rbytes != sv.bytes[root]) return c.forward(mpi);
  } else {
    rbytes = sv.bytes[root];
  }
  if (!c.agreed("Scatterv")) return mpi();
  int rc = shaddr_scatterv(s->sc, is_root ? sv.base : nullptr, is_root ? sv.bytes.data() : nullptr,
                           is_root ? sv.displs.data() : nullptr,
                           in_place ? const_cast<void *>(SHADDR_IN_PLACE) : rv.data(), rbytes,
                           root);
  if (failed(*s, c, "Scatterv", rc)) return mpi();
  return in_place ? MPI_SUCCESS : rv.unpack_out();
}

int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_ALLGATHER, s);
  auto mpi = [&] {
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  };
  if (!s || bad_buffers(sendbuf, recvbuf) || !lib_by_size(c, recvcount, recvtype))
    return c.forward(mpi);
  EqualBlocks blk;
  if (!blk.init(sendbuf, sendcount, sendtype, recvcount, recvtype)) return c.forward(mpi);
  const TypeInfo &rti = blk.rti, &sti = blk.sti;
  const bool in_place = blk.in_place;
  const size_t bytes = blk.bytes;
  if (s->multi() && !fits_int(bytes * s->size)) return c.forward(mpi);
  View sv, rv;
  if (rv.init(recvbuf, static_cast<MPI_Count>(recvcount) * s->size, recvtype, rti))
    return c.forward(mpi);
  const MPI_Count own_first = static_cast<MPI_Count>(s->rank) * recvcount;
  if (in_place ? rv.pack_in(own_first, recvcount)
               : (sv.init(sendbuf, sendcount, sendtype, sti) || sv.pack_in()))
    return c.forward(mpi);
  if (!c.agreed("Allgather")) return mpi();
  auto unpack = [&] {
    return in_place ? rv.unpack_out_except(own_first, recvcount) : rv.unpack_out();
  };
  char *own = rv.data() + static_cast<size_t>(s->rank) * bytes;
  if (s->multi()) {
    bool fb = false;
    int rc = hier_done(*s, c, hier_allgather(*s, in_place ? own : sv.data(), bytes, rv.data(), &fb),
                       &fb);
    return rc ? rc : unpack();
  }
  Backup keep;
  if (in_place) keep.save(own, bytes);
  int rc = shaddr_allgather(s->sc, in_place ? SHADDR_IN_PLACE : sv.data(), bytes, rv.data());
  if (failed(*s, c, "Allgather", rc)) {
    keep.restore();
    return mpi();
  }
  return unpack();
}

int allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               const int recvcounts[], const int displs[], MPI_Datatype recvtype,
               MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_ALLGATHERV, s);
  auto mpi = [&] {
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                           comm);
  };
  TypeInfo rti = type_info(recvtype);
  if (!s || !rti.ok || s->multi() || bad_buffers(sendbuf, recvbuf)) return c.forward(mpi);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  if (!in_place && (!sti.ok || sendcount < 0)) return c.forward(mpi);
  size_t total = 0;  // every rank knows all counts: a size threshold is consistent here
  uint64_t layout = 0;
  for (int i = 0; i < s->size; i++) {
    const size_t b = static_cast<size_t>(recvcounts[i] * rti.size);
    total += b;
    layout = shaddr::hash_mix(layout, b);
  }
  // The plan keys an Allgatherv by its mean block.
  if (!c.lib(total ? std::max<size_t>(total / s->size, 1) : 0, 0, -1, layout))
    return c.forward(mpi);
  VView rv;
  View sv;
  if (rv.init(recvbuf, recvcounts, displs, s->size, recvtype, rti)) return c.forward(mpi);
  size_t sbytes = rv.bytes[s->rank];
  Backup keep;
  if (in_place) {
    if (rv.pack_block(s->rank)) return c.forward(mpi);
    keep.save(rv.base + rv.displs[s->rank], sbytes);
  } else {
    if (sv.init(sendbuf, sendcount, sendtype, sti) || sv.bytes() != sbytes || sv.pack_in())
      return c.forward(mpi);
  }
  if (!c.agreed("Allgatherv")) return mpi();
  int rc = shaddr_allgatherv(s->sc, in_place ? SHADDR_IN_PLACE : sv.data(), sbytes, rv.base,
                             rv.bytes.data(), rv.displs.data());
  if (failed(*s, c, "Allgatherv", rc)) {
    keep.restore();
    return mpi();
  }
  return rv.unpack_all(in_place ? s->rank : -1);
}

int alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
             int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_ALLTOALL, s);
  auto mpi = [&] {
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  };
  if (!s || bad_buffers(sendbuf, recvbuf) || !lib_by_size(c, recvcount, recvtype))
    return c.forward(mpi);
  EqualBlocks blk;
  if (!blk.init(sendbuf, sendcount, sendtype, recvcount, recvtype)) return c.forward(mpi);
  const TypeInfo &rti = blk.rti, &sti = blk.sti;
  const bool in_place = blk.in_place;
  const size_t bytes = blk.bytes;
  const size_t n = static_cast<size_t>(s->size);
  if (s->multi() && !fits_int(bytes * n * n)) return c.forward(mpi);
  View sv, rv;
  if (rv.init(recvbuf, static_cast<MPI_Count>(recvcount) * s->size, recvtype, rti))
    return c.forward(mpi);
  std::vector<char> in_copy;  // in place: the input, kept apart from the output
  const char *in;
  if (in_place) {
    if (rv.pack_in()) return c.forward(mpi);
    in_copy.assign(rv.data(), rv.data() + n * bytes);
    in = in_copy.data();
  } else {
    if (sv.init(sendbuf, static_cast<MPI_Count>(sendcount) * s->size, sendtype, sti) ||
        sv.pack_in())
      return c.forward(mpi);
    in = sv.data();
  }
  if (!c.agreed("Alltoall")) return mpi();
  if (s->multi()) {
    bool fb = false;
    int rc = hier_done(*s, c, hier_alltoall(*s, in, bytes, rv.data(), &fb), &fb);
    return rc ? rc : rv.unpack_out();
  }
  int rc = shaddr_alltoall(s->sc, in, bytes, rv.data());
  if (failed(*s, c, "Alltoall", rc)) {
    if (in_place) {  // put the input back where PMPI_Alltoall reads it
      std::memcpy(rv.data(), in_copy.data(), n * bytes);
      if (int urc = rv.unpack_out()) return urc;
    }
    return mpi();
  }
  return rv.unpack_out();
}

int alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
              MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[],
              MPI_Datatype recvtype, MPI_Comm comm) {
  State *s = state_of(comm);
  Call c(SHADDR_IP_ALLTOALLV, s);
  auto mpi = [&] {
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                          recvtype, comm);
  };
  // Each rank knows only its own counts: each transfer checks them against the reader's (a
  // mismatch fails on every rank: PMPI_* reports it).
  TypeInfo rti = type_info(recvtype);
  if (!s || !rti.ok || s->multi() || bad_buffers(sendbuf, recvbuf) ||
      !c.lib(0, SHADDR_CALL_UNSIZED))
    return c.forward(mpi);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  if (!in_place && !sti.ok) return c.forward(mpi);
  VView sv, rv;
  if (rv.init(recvbuf, recvcounts, rdispls, s->size, recvtype, rti)) return c.forward(mpi);
  std::vector<char> in_copy;
  const char *in;
  const size_t *sbytes, *sdisp;
  if (in_place) {
    // The input is the receive layout; copy it out so the output can overwrite it.
    if (rv.pack_all()) return c.forward(mpi);
    size_t end = 0;
    for (int i = 0; i < s->size; i++) end = std::max(end, rv.displs[i] + rv.bytes[i]);
    in_copy.assign(rv.base, rv.base + end);
    in = in_copy.data();
    sbytes = rv.bytes.data();
    sdisp = rv.displs.data();
  } else {
    if (sv.init(sendbuf, sendcounts, sdispls, s->size, sendtype, sti) || sv.pack_all())
      return c.forward(mpi);
    in = sv.base;
    sbytes = sv.bytes.data();
    sdisp = sv.displs.data();
  }
  if (!c.agreed("Alltoallv")) return mpi();
  int rc = shaddr_alltoallv(s->sc, in, sbytes, sdisp, rv.base, rv.bytes.data(), rv.displs.data());
  if (failed(*s, c, "Alltoallv", rc)) {
    if (in_place) {
      std::memcpy(rv.base, in_copy.data(), in_copy.size());
      if (int urc = rv.unpack_all()) return urc;
    }
    return mpi();
  }
  return rv.unpack_all();
}

}  // namespace shaddr::interpose::impl
