// SPDX-License-Identifier: MIT
// SHADDR_VERIFY=1 (verify.h): each intercepted collective is checked against the MPI library's
// own PMPI_* on copies of its buffers, and the ranks' call sequences against each other.
#include "verify.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "calls.h"
#include "state.h"
#include "types.h"
#include "verify_check.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose::verify {

int barrier(MPI_Comm comm) {
  Check k;
  k.args = "MPI_Barrier()";
  start(k, comm, SHADDR_IP_BARRIER, -1, 0, 0, -1);
  return impl::barrier(comm);
}

int bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  const TypeInfo ti = type_info(type);
  Check k;
  if (count < 0 || !ti.ok) return impl::bcast(buf, count, type, root, comm);
  if (!start(k, comm, SHADDR_IP_BCAST, root, count * ti.size, digest(count, type), -1) ||
      bad_root(k, root))
    return impl::bcast(buf, count, type, root, comm);
  k.args = args_str("MPI_Bcast", cnt("count", count, type) + ", root " + std::to_string(root));
  Copy ref;
  ref.save(buf, span_of(count, ti));
  const bool ref_ok =
      ref.ok && PMPI_Bcast(ref.as_buf(), count, type, root, comm) == MPI_SUCCESS;
  const int rc = impl::bcast(buf, count, type, root, comm);
  if (rc == MPI_SUCCESS && ref_ok && k.by_libshaddr())
    compare_out(k, k.ci->rank == root ? "the root's buffer" : "the received data", buf, ref,
                type);
  return rc;
}

// Reduce (root >= 0) and Allreduce (root < 0).
int reduction(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
              int root, MPI_Comm comm) {
  const bool all = root < 0;
  const shaddr_interpose_call call = all ? SHADDR_IP_ALLREDUCE : SHADDR_IP_REDUCE;
  auto run = [&] {
    return all ? impl::allreduce(sendbuf, recvbuf, count, type, op, comm)
               : impl::reduce(sendbuf, recvbuf, count, type, op, root, comm);
  };
  const TypeInfo ti = type_info(type);
  Check k;
  if (count < 0 || !ti.ok) return run();
  if (!start(k, comm, call, root, count * ti.size, digest(count, type), op_id(op)) ||
      (!all && bad_root(k, root)))
    return run();
  k.args = args_str(kCallName[call], cnt("count", count, type) + ", " + op_str(op_id(op)) +
                                         (all ? "" : ", root " + std::to_string(root)));
  // Only what libshaddr can reduce is compared. Anything else goes to PMPI_* as it is, and its
  // op must not run twice: a user-defined op may keep state or touch memory beyond what its
  // datatype describes (BLACS's absolute-max ops read their length from a global and process
  // that many elements, which would overrun a copy of the datatype's span).
  shaddr_dtype dt;
  shaddr_op sop;
  if (!map_reduction(type, op, &dt, &sop)) return run();
  const bool is_root = all || k.ci->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  const Span sp = span_of(count, ti);
  Copy in, ref;
  in.save(in_place ? recvbuf : sendbuf, sp);
  if (is_root) ref.save(recvbuf, sp);
  bool ref_ok = in.ok && (!is_root || ref.ok);
  if (ref_ok) {
    const void *s = in_place ? MPI_IN_PLACE : in.as_buf();
    ref_ok = (all ? PMPI_Allreduce(s, ref.as_buf(), count, type, op, comm)
                  : PMPI_Reduce(s, is_root ? ref.as_buf() : nullptr, count, type, op, root,
                                comm)) == MPI_SUCCESS;
  }
  const int rc = run();
  if (!k.by_libshaddr()) return rc;
  // Collective steps first, on every rank alike, then the local comparisons.
  std::vector<char> abs_sum;
  if (float_sum(dt, sop) && in.ok) {
    std::vector<char> a = abs_of(in.bytes.data(), count, dt);  // the span of a predefined type
                                                               // starts at its first element
    abs_sum.assign(a.size(), 0);
    const int arc = all ? PMPI_Allreduce(a.data(), abs_sum.data(), count, type, MPI_SUM, comm)
                        : PMPI_Reduce(a.data(), abs_sum.data(), count, type, MPI_SUM, root, comm);
    if (arc != MPI_SUCCESS) abs_sum.clear();
  }
  if (all) check_identical(k, static_cast<const char *>(recvbuf), count, dt, type);
  if (rc != MPI_SUCCESS || !ref_ok) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, type);
  if (!is_root) return rc;
  maybe_inject(k, recvbuf, sp);
  const char *got = static_cast<const char *>(recvbuf);
  const Diff d = diff_reduction(got, ref.bytes.data(), abs_sum.empty() ? nullptr : abs_sum.data(),
                                count, dt, sop, k.ci->size);
  if (d.any) report(k, "the result", d, got, ref.bytes.data(), sp, type);
  return rc;
}

int reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
           int root, MPI_Comm comm) {
  if (root < 0) return impl::reduce(sendbuf, recvbuf, count, type, op, root, comm);
  return reduction(sendbuf, recvbuf, count, type, op, root, comm);
}

int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
              MPI_Comm comm) {
  return reduction(sendbuf, recvbuf, count, type, op, -1, comm);
}

int gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
           int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  auto run = [&] {
    return impl::gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = is_root ? type_info(recvtype) : TypeInfo{};
  if ((!in_place && (!sti.ok || sendcount < 0)) || (is_root && (!rti.ok || recvcount < 0)))
    return run();
  const int64_t bytes = is_root ? recvcount * rti.size : sendcount * sti.size;
  const uint64_t sig = is_root ? digest(recvcount, recvtype) : digest(sendcount, sendtype);
  start(k, comm, SHADDR_IP_GATHER, root, bytes, sig, -1);
  k.args = args_str("MPI_Gather", (in_place ? std::string("MPI_IN_PLACE")
                                            : cnt("send", sendcount, sendtype)) +
                                      (is_root ? ", " + cnt("recv", recvcount, recvtype) : "") +
                                      ", root " + std::to_string(root));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  if (is_root) ref.save(recvbuf, span_of(static_cast<MPI_Count>(recvcount) * ci->size, rti));
  bool ref_ok = (in_place || in.ok) && (!is_root || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Gather(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                         is_root ? ref.as_buf() : nullptr, recvcount, recvtype, root,
                         comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  if (is_root) compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
            MPI_Comm comm) {
  auto run = [&] {
    return impl::gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                         root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = is_root ? type_info(recvtype) : TypeInfo{};
  if ((!in_place && (!sti.ok || sendcount < 0)) || (is_root && !rti.ok)) return run();
  // Non-roots do not know the counts: only the call and root are common.
  start(k, comm, SHADDR_IP_GATHERV, root, -1, 0, -1);
  k.args = args_str("MPI_Gatherv", (in_place ? std::string("MPI_IN_PLACE")
                                             : cnt("send", sendcount, sendtype)) +
                                       ", root " + std::to_string(root));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  if (is_root) ref.save(recvbuf, vspan_of(recvcounts, displs, ci->size, rti));
  bool ref_ok = (in_place || in.ok) && (!is_root || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Gatherv(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                          is_root ? ref.as_buf() : nullptr, recvcounts, displs, recvtype, root,
                          comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  if (is_root) compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  auto run = [&] {
    return impl::scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && recvbuf == MPI_IN_PLACE;
  const TypeInfo sti = is_root ? type_info(sendtype) : TypeInfo{};
  const TypeInfo rti = in_place ? TypeInfo{} : type_info(recvtype);
  if ((is_root && (!sti.ok || sendcount < 0)) || (!in_place && (!rti.ok || recvcount < 0)))
    return run();
  const int64_t bytes = is_root ? sendcount * sti.size : recvcount * rti.size;
  const uint64_t sig = is_root ? digest(sendcount, sendtype) : digest(recvcount, recvtype);
  start(k, comm, SHADDR_IP_SCATTER, root, bytes, sig, -1);
  k.args = args_str("MPI_Scatter", (is_root ? cnt("send", sendcount, sendtype) + ", " : "") +
                                       (in_place ? std::string("MPI_IN_PLACE")
                                                 : cnt("recv", recvcount, recvtype)) +
                                       ", root " + std::to_string(root));
  Copy in, ref;
  if (is_root) in.save(sendbuf, span_of(static_cast<MPI_Count>(sendcount) * ci->size, sti));
  if (!in_place) ref.save(recvbuf, span_of(recvcount, rti));
  bool ref_ok = (!is_root || in.ok) && (in_place || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Scatter(is_root ? in.as_buf() : nullptr, sendcount, sendtype,
                          in_place ? MPI_IN_PLACE : ref.as_buf(), recvcount, recvtype, root,
                          comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (is_root) compare_in(k, "the root's send buffer", in, sendtype);
  if (!in_place) compare_out(k, "the received block", recvbuf, ref, recvtype);
  return rc;
}

int scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
             MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
             int root, MPI_Comm comm) {
  auto run = [&] {
    return impl::scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype,
                          root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && recvbuf == MPI_IN_PLACE;
  const TypeInfo sti = is_root ? type_info(sendtype) : TypeInfo{};
  const TypeInfo rti = in_place ? TypeInfo{} : type_info(recvtype);
  if ((is_root && !sti.ok) || (!in_place && (!rti.ok || recvcount < 0))) return run();
  start(k, comm, SHADDR_IP_SCATTERV, root, -1, 0, -1);
  k.args = args_str("MPI_Scatterv", (in_place ? std::string("MPI_IN_PLACE")
                                              : cnt("recv", recvcount, recvtype)) +
                                        ", root " + std::to_string(root));
  Copy in, ref;
  if (is_root) in.save(sendbuf, vspan_of(sendcounts, displs, ci->size, sti));
  if (!in_place) ref.save(recvbuf, span_of(recvcount, rti));
  bool ref_ok = (!is_root || in.ok) && (in_place || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Scatterv(is_root ? in.as_buf() : nullptr, sendcounts, displs, sendtype,
                           in_place ? MPI_IN_PLACE : ref.as_buf(), recvcount, recvtype, root,
                           comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (is_root) compare_in(k, "the root's send buffer", in, sendtype);
  if (!in_place) compare_out(k, "the received block", recvbuf, ref, recvtype);
  return rc;
}

int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto run = [&] {
    return impl::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  };
  Check k;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!rti.ok || recvcount < 0 || (!in_place && (!sti.ok || sendcount < 0))) return run();
  if (!start(k, comm, SHADDR_IP_ALLGATHER, -1, recvcount * rti.size,
             digest(recvcount, recvtype), -1))
    return run();
  k.args = args_str("MPI_Allgather", (in_place ? std::string("MPI_IN_PLACE")
                                               : cnt("send", sendcount, sendtype)) +
                                         ", " + cnt("recv", recvcount, recvtype));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  ref.save(recvbuf, span_of(static_cast<MPI_Count>(recvcount) * k.ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Allgather(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                            ref.as_buf(), recvcount, recvtype, comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               const int recvcounts[], const int displs[], MPI_Datatype recvtype,
               MPI_Comm comm) {
  auto run = [&] {
    return impl::allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                            recvtype, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!ci || !rti.ok || (!in_place && (!sti.ok || sendcount < 0))) return run();
  // Every rank knows every count: they are part of the call's description.
  int64_t total = 0;
  uint64_t sig = digest(1, recvtype);
  for (int i = 0; i < ci->size; i++) {
    total += recvcounts[i] * rti.size;
    const int64_t c = recvcounts[i];
    sig = shaddr::hash_bytes(&c, sizeof c, sig);
  }
  start(k, comm, SHADDR_IP_ALLGATHERV, -1, total, sig, -1);
  k.args = args_str("MPI_Allgatherv", (in_place ? std::string("MPI_IN_PLACE")
                                                : cnt("send", sendcount, sendtype)) +
                                          ", recv " + std::to_string(total) + " bytes of " +
                                          type_name(recvtype));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  ref.save(recvbuf, vspan_of(recvcounts, displs, ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Allgatherv(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                             ref.as_buf(), recvcounts, displs, recvtype, comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
             int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto run = [&] {
    return impl::alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  };
  Check k;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!rti.ok || recvcount < 0 || (!in_place && (!sti.ok || sendcount < 0))) return run();
  if (!start(k, comm, SHADDR_IP_ALLTOALL, -1, recvcount * rti.size,
             digest(recvcount, recvtype), -1))
    return run();
  k.args = args_str("MPI_Alltoall", (in_place ? std::string("MPI_IN_PLACE")
                                              : cnt("send", sendcount, sendtype)) +
                                        ", " + cnt("recv", recvcount, recvtype));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(static_cast<MPI_Count>(sendcount) * k.ci->size, sti));
  ref.save(recvbuf, span_of(static_cast<MPI_Count>(recvcount) * k.ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Alltoall(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                           ref.as_buf(), recvcount, recvtype, comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the received data", recvbuf, ref, recvtype);
  return rc;
}

int alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
              MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[],
              MPI_Datatype recvtype, MPI_Comm comm) {
  auto run = [&] {
    return impl::alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                           rdispls, recvtype, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!ci || !rti.ok || (!in_place && !sti.ok)) return run();
  start(k, comm, SHADDR_IP_ALLTOALLV, -1, -1, 0, -1);
  k.args = "MPI_Alltoallv(" + std::string(in_place ? "MPI_IN_PLACE, " : "") + "recv type " +
           type_name(recvtype) + ")";
  Copy in, ref;
  if (!in_place) in.save(sendbuf, vspan_of(sendcounts, sdispls, ci->size, sti));
  ref.save(recvbuf, vspan_of(recvcounts, rdispls, ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Alltoallv(in_place ? MPI_IN_PLACE : in.as_buf(), sendcounts, sdispls,
                            sendtype, ref.as_buf(), recvcounts, rdispls, recvtype,
                            comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the received data", recvbuf, ref, recvtype);
  return rc;
}

}  // namespace shaddr::interpose::verify
