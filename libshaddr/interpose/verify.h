// SPDX-License-Identifier: MIT
// SHADDR_VERIFY=1: every intercepted collective is checked while it runs.
//
//  1. Call sequence: before the call, the ranks of the communicator agree (one PMPI_Allreduce
//     of a hash) on (call number on this communicator, collective, root, bytes and type
//     signature that MPI requires to match, op). On disagreement rank 0 of the communicator
//     prints every rank's call, and the job is aborted.
//  2. Result: the MPI library's own PMPI_* runs first on copies of the buffers; then the call
//     runs as implemented (impl::*, calls.h); where libshaddr did the work (not forwarded to
//     PMPI_*), its output must equal the copy's, byte for byte (floating-point sums and products:
//     within the rounding that a different order of operands can give, from the operands'
//     absolute sum), send buffers must be unchanged, and an Allreduce result must be bitwise the
//     same on every rank. A difference is printed (communicator, call number, collective, first
//     differing byte offset, both values) and the job is aborted: MPI_Abort(MPI_COMM_WORLD, 70).
//
// Testing aid: SHADDR_VERIFY_INJECT=n corrupts the n-th result this process checks on a rank
// that is the last of its communicator (after the call, before the comparison), so the
// tests can see that a wrong result is caught and reported.
#pragma once

#include <mpi.h>

#include "state.h"

namespace shaddr::interpose::verify {

constexpr int kAbortCode = 70;  // MPI_Abort's error code on a mismatch (EX_SOFTWARE)

// SHADDR_VERIFY=1 and the interposer is active (not SHADDR_INTERPOSE=0 or MPI_THREAD_MULTIPLE).
// Asked by every intercepted call: inline, one load when off.
inline bool on() { return settings().verify && interposer_active(); }

int barrier(MPI_Comm comm);
int bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
           int root, MPI_Comm comm);
int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
              MPI_Comm comm);
int gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
           int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
            MPI_Comm comm);
int scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
             MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
             int root, MPI_Comm comm);
int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               const int recvcounts[], const int displs[], MPI_Datatype recvtype,
               MPI_Comm comm);
int alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
             int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
              MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[],
              MPI_Datatype recvtype, MPI_Comm comm);

}  // namespace shaddr::interpose::verify
