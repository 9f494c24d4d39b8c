// SPDX-License-Identifier: MIT
// The intercepted collectives as implemented (calls.cc): MPI_* calls these directly, or
// through the checks of SHADDR_VERIFY=1 (verify.h). Same arguments and results as MPI_*.
#pragma once

#include <mpi.h>

namespace shaddr::interpose::impl {

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

}  // namespace shaddr::interpose::impl
