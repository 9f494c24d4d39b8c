// SPDX-License-Identifier: MIT
// SHADDR_VERIFY=1 (verify.h): the ranks' descriptions of each call compared, the job aborted
// where they differ.
#include "verify_check.h"

#include <mpi.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "state.h"
#include "verify.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose::verify {

const char *const kCallName[SHADDR_IP_COUNT] = {
    "MPI_Barrier",   "MPI_Bcast",    "MPI_Reduce",     "MPI_Allreduce",
    "MPI_Gather",    "MPI_Gatherv",  "MPI_Scatter",    "MPI_Scatterv",
    "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv",
};

[[noreturn]] void abort_job() {
  std::fprintf(stderr, "shaddr-verify: aborting the job (MPI_Abort(MPI_COMM_WORLD, %d))\n",
               kAbortCode);
  std::fflush(stderr);
  // The launcher forwards a rank's output through its proxy and stops forwarding when the
  // abort kills the job: give the report a moment to get out (MPICH's hydra lost it under load).
  usleep(300000);
  PMPI_Abort(MPI_COMM_WORLD, kAbortCode);
  std::_Exit(kAbortCode);  // MPI_Abort does not return; in case it does
}

namespace {

const char *const kOpName[SHADDR_OP_COUNT] = {"MPI_SUM",  "MPI_PROD", "MPI_MIN",    "MPI_MAX",
                                              "MPI_LAND", "MPI_LOR",  "MPI_LXOR",   "MPI_BAND",
                                              "MPI_BOR",  "MPI_BXOR", "MPI_MINLOC", "MPI_MAXLOC"};
constexpr int64_t kOpOther = 99;  // a user-defined op, MPI_REPLACE, MPI_NO_OP

int g_comm_kv = MPI_KEYVAL_INVALID;
uint64_t g_next_id = 0;

int comm_delete(MPI_Comm, int, void *attr, void *) {
  delete static_cast<CommInfo *>(attr);
  return MPI_SUCCESS;
}

// What every rank of the communicator must agree on for one call (-1 / 0: not common to all).
struct Desc {
  int64_t call;
  int64_t coll;
  int64_t root;
  int64_t bytes;
  uint64_t sig;
  int64_t op;
};
static_assert(sizeof(Desc) == 48, "Desc travels as bytes");

std::string desc_str(const Desc &d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "call %" PRId64 " %s, root %s, %s bytes, signature %016" PRIx64 ", op %s",
                d.call, d.coll >= 0 && d.coll < SHADDR_IP_COUNT ? kCallName[d.coll] : "?",
                d.root >= 0 ? std::to_string(d.root).c_str() : "-",
                d.bytes >= 0 ? std::to_string(d.bytes).c_str() : "-", d.sig,
                op_str(d.op).c_str());
  return buf;
}

void check_sequence(const Check &k, const Desc &d) {
  const uint64_t h = shaddr::hash_bytes(&d, sizeof d);
  uint64_t in[2] = {h, ~h}, out[2] = {0, 0};
  if (PMPI_Allreduce(in, out, 2, MPI_UINT64_T, MPI_MAX, k.comm) != MPI_SUCCESS) return;
  if (out[0] == ~out[1]) return;  // max(h) == min(h): every rank described the same call
  std::vector<Desc> all(static_cast<size_t>(k.ci->size));
  PMPI_Allgather(&d, sizeof d, MPI_BYTE, all.data(), sizeof d, MPI_BYTE, k.comm);
  if (k.ci->rank == 0) {
    std::fprintf(stderr,
                 "shaddr-verify: CALL SEQUENCE MISMATCH on communicator #%" PRIu64
                 " \"%s\" (%d ranks) at call %" PRIu64
                 ": the ranks are not in the same collective with matching arguments:\n",
                 k.ci->id, k.ci->name.c_str(), k.ci->size, k.ci->calls);
    for (int r = 0; r < k.ci->size; r++)
      std::fprintf(stderr, "shaddr-verify:   rank %d: %s\n", r, desc_str(all[r]).c_str());
    abort_job();
  }
  PMPI_Barrier(k.comm);  // rank 0 reports and aborts the job meanwhile
  abort_job();
}

}  // namespace

// nullptr: no checks (intercommunicators, MPI_COMM_NULL: forwarded as they are).
CommInfo *info_of(MPI_Comm comm) {
  int inter = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
    return nullptr;
  if (g_comm_kv == MPI_KEYVAL_INVALID &&
      PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete, &g_comm_kv, nullptr) !=
          MPI_SUCCESS)
    return nullptr;
  void *v = nullptr;
  int flag = 0;
  if (PMPI_Comm_get_attr(comm, g_comm_kv, &v, &flag) != MPI_SUCCESS) return nullptr;
  if (flag) return static_cast<CommInfo *>(v);
  auto *ci = new CommInfo;
  ci->id = ++g_next_id;
  PMPI_Comm_rank(comm, &ci->rank);
  PMPI_Comm_size(comm, &ci->size);
  char name[MPI_MAX_OBJECT_NAME] = "";
  int len = 0;
  if (PMPI_Comm_get_name(comm, name, &len) == MPI_SUCCESS) ci->name = name;
  if (ci->name.empty()) ci->name = "unnamed";
  PMPI_Comm_set_attr(comm, g_comm_kv, ci);
  return ci;
}

int64_t op_id(MPI_Op op) {
  shaddr_op sop;
  return map_op(op, &sop) ? static_cast<int64_t>(sop) : kOpOther;
}

std::string op_str(int64_t op) {
  if (op < 0) return "-";
  if (op < SHADDR_OP_COUNT) return kOpName[op];
  return "user-defined/other";
}

std::string Check::where() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "communicator #%" PRIu64 " \"%s\" (%d ranks), rank %d, call %" PRIu64,
                ci->id, ci->name.c_str(), ci->size, ci->rank, ci->calls);
  return buf;
}

bool start(Check &k, MPI_Comm comm, shaddr_interpose_call call, int64_t root, int64_t bytes,
           uint64_t sig, int64_t op) {
  k.call = call;
  k.comm = comm;
  k.ci = info_of(comm);
  if (!k.ci) return false;
  k.ci->calls++;
  const Desc d{static_cast<int64_t>(k.ci->calls), call, root, bytes, sig, op};
  check_sequence(k, d);
  k.forwarded0 = forwarded_calls(call);
  return true;
}

}  // namespace shaddr::interpose::verify
