// SPDX-License-Identifier: MIT
// Where calls enter the interposer: every intercepted function is exported twice, as MPI_* and
// as PMPI_* (an alias of the same function), because the MPIs' own language bindings call
// either:
//   Open MPI 4.1  mpif.h, use mpi (libmpi_mpifh) and use mpi_f08 (libmpi_usempif08, through
//                 ompi_*_f in libmpi_mpifh) call PMPI_* for everything;
//   MPICH 4.0     mpif.h and use mpi (libmpichfort) call MPI_*; use mpi_f08 calls MPI_* for
//                 the collectives but PMPI_Barrier, PMPI_Init(_thread) and PMPI_Finalize.
// A PMPI-based tool layered on the interposer (its MPI_* calling PMPI_*) reaches it through
// PMPI_*. Each call enters once: the interposer's own calls go to the MPI's functions
// (next_mpi.h), never back here. The MPI library calls some of these PMPI_* itself: ROMIO's
// MPI-IO (in libmpich, and Open MPI's mca_io_romio321) calls collectives on its own duplicates
// of the file's communicator, from inside MPI_File_* calls; they are taken like the user's. No
// call comes before MPI_Init (the state is made from an initialised MPI only) and none after
// the interposer's MPI_Finalize began (finalize_all: everything forwarded from then on).
#include <dlfcn.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "calls.h"
#include "state.h"
#include "verify.h"

#define SHADDR_DEFINES_ENTRIES  // the PMPI_* names stay this file's exported entries
#include "next_mpi.h"

namespace shaddr::interpose {
namespace next {

namespace {
template <class Fn>
void resolve(Fn *fn, const char *name) {
  *fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  if (*fn) return;
  std::fprintf(stderr, "shaddr-interpose: %s not found in the MPI library loaded after the "
                       "interposer (was it built for another MPI?)\n", name);
  std::abort();
}
}  // namespace

const Entries &mpi() {
  static const Entries e = [] {
    Entries r{};
    resolve(&r.init, "PMPI_Init");
    resolve(&r.init_thread, "PMPI_Init_thread");
    resolve(&r.finalize, "PMPI_Finalize");
    resolve(&r.barrier, "PMPI_Barrier");
    resolve(&r.bcast, "PMPI_Bcast");
    resolve(&r.reduce, "PMPI_Reduce");
    resolve(&r.allreduce, "PMPI_Allreduce");
    resolve(&r.gather, "PMPI_Gather");
    resolve(&r.gatherv, "PMPI_Gatherv");
    resolve(&r.scatter, "PMPI_Scatter");
    resolve(&r.scatterv, "PMPI_Scatterv");
    resolve(&r.allgather, "PMPI_Allgather");
    resolve(&r.allgatherv, "PMPI_Allgatherv");
    resolve(&r.alltoall, "PMPI_Alltoall");
    resolve(&r.alltoallv, "PMPI_Alltoallv");
    return r;
  }();
  return e;
}

}  // namespace next

namespace {

// The Fortran bindings of this MPI, how their calls reach the interposer, and a symbol each
// defines (present in the process when the program uses that binding).
struct FortranBinding {
  const char *name, *probe, *through;
};
#ifdef OPEN_MPI
constexpr FortranBinding kFortran[] = {
    {"mpif.h/use mpi", "mpi_bcast_", "PMPI_*"},
    {"use mpi_f08", "mpi_bcast_f08_", "PMPI_*"},
};
#else
constexpr FortranBinding kFortran[] = {
    {"mpif.h/use mpi", "mpi_bcast_", "MPI_*"},
    {"use mpi_f08", "mpi_bcast_f08ts_", "MPI_*, PMPI_Barrier/Init/Finalize"},
};
#endif

// SHADDR_VERBOSE=1: which bindings this process uses and that each is intercepted.
void say_bindings() {
  if (!settings().verbose || !interposer_active()) return;
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  std::string out = "C (MPI_*, PMPI_*)";
  for (const FortranBinding &b : kFortran)
    if (dlsym(RTLD_DEFAULT, b.probe))
      out += std::string(", Fortran ") + b.name + " (through " + b.through + ")";
  std::fprintf(stderr, "shaddr-interpose: bindings intercepted: %s\n", out.c_str());
}

// After a successful MPI_Init(_thread), through whichever entry.
int started(int rc) {
  if (rc != MPI_SUCCESS) return rc;
  init_globals(true);
  say_bindings();
  return rc;
}

}  // namespace
}  // namespace shaddr::interpose

#if defined(PMPI_Bcast)
#error "bindings.cc defines the PMPI_* entries: the names must not be next_mpi.h's macros here"
#endif

using namespace shaddr::interpose;

namespace {
// A collective's entry: checked against the MPI's own result with SHADDR_VERIFY=1 (verify.h),
// else run as implemented (calls.h).
template <auto checked, auto plain, class... Args>
int enter(Args... args) {
  return verify::on() ? checked(args...) : plain(args...);
}
}  // namespace

// The entries are this library's interface (MPICH's mpi.h does not mark them visible, and the
// library is built with hidden visibility).
#pragma GCC visibility push(default)
extern "C" {

int MPI_Init(int *argc, char ***argv) { return started(next::mpi().init(argc, argv)); }

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  return started(next::mpi().init_thread(argc, argv, required, provided));
}

int MPI_Finalize(void) {
  finalize_all();
  return next::mpi().finalize();
}

int MPI_Barrier(MPI_Comm comm) {
  return verify::on() ? verify::barrier(comm) : impl::barrier(comm);
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  return enter<verify::bcast, impl::bcast>(buf, count, type, root, comm);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm) {
  return enter<verify::reduce, impl::reduce>(sendbuf, recvbuf, count, type, op, root, comm);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  return enter<verify::allreduce, impl::allreduce>(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return enter<verify::gather, impl::gather>(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                             recvtype, root, comm);
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm) {
  return enter<verify::gatherv, impl::gatherv>(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                               displs, recvtype, root, comm);
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return enter<verify::scatter, impl::scatter>(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                               recvtype, root, comm);
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm) {
  return enter<verify::scatterv, impl::scatterv>(sendbuf, sendcounts, displs, sendtype, recvbuf,
                                                 recvcount, recvtype, root, comm);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return enter<verify::allgather, impl::allgather>(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                                   recvtype, comm);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
  return enter<verify::allgatherv, impl::allgatherv>(sendbuf, sendcount, sendtype, recvbuf,
                                                     recvcounts, displs, recvtype, comm);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return enter<verify::alltoall, impl::alltoall>(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                                 recvtype, comm);
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
  return enter<verify::alltoallv, impl::alltoallv>(sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                                                   recvcounts, rdispls, recvtype, comm);
}

// The PMPI_* names of the same functions.
#define SHADDR_PMPI_ALIAS(name) \
  decltype(MPI_##name) PMPI_##name __attribute__((alias("MPI_" #name)));
SHADDR_PMPI_ALIAS(Init)
SHADDR_PMPI_ALIAS(Init_thread)
SHADDR_PMPI_ALIAS(Finalize)
SHADDR_PMPI_ALIAS(Barrier)
SHADDR_PMPI_ALIAS(Bcast)
SHADDR_PMPI_ALIAS(Reduce)
SHADDR_PMPI_ALIAS(Allreduce)
SHADDR_PMPI_ALIAS(Gather)
SHADDR_PMPI_ALIAS(Gatherv)
SHADDR_PMPI_ALIAS(Scatter)
SHADDR_PMPI_ALIAS(Scatterv)
SHADDR_PMPI_ALIAS(Allgather)
SHADDR_PMPI_ALIAS(Allgatherv)
SHADDR_PMPI_ALIAS(Alltoall)
SHADDR_PMPI_ALIAS(Alltoallv)
#undef SHADDR_PMPI_ALIAS

}  // extern "C"
#pragma GCC visibility pop
