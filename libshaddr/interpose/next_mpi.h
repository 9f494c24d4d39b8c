// SPDX-License-Identifier: MIT
// The MPI library's own functions for the entries this library exports under both names,
// MPI_* and PMPI_* (bindings.cc). Under LD_PRELOAD the interposer comes first in the lookup
// order, so a call to PMPI_Bcast from the interposer itself would reach its own PMPI_Bcast
// again; these are the definitions next in the lookup order (dlsym(RTLD_NEXT): the MPI
// library's), resolved once.
//
// Every interposer source that calls these PMPI_* includes this header last, after <mpi.h>:
// from there on the names below call the MPI's function. bindings.cc, which defines the
// exported entries, must not include it (it says so with #error).
#pragma once

#include <mpi.h>

namespace shaddr::interpose::next {

struct Entries {
  decltype(&::PMPI_Init) init;
  decltype(&::PMPI_Init_thread) init_thread;
  decltype(&::PMPI_Finalize) finalize;
  decltype(&::PMPI_Barrier) barrier;
  decltype(&::PMPI_Bcast) bcast;
  decltype(&::PMPI_Reduce) reduce;
  decltype(&::PMPI_Allreduce) allreduce;
  decltype(&::PMPI_Gather) gather;
  decltype(&::PMPI_Gatherv) gatherv;
  decltype(&::PMPI_Scatter) scatter;
  decltype(&::PMPI_Scatterv) scatterv;
  decltype(&::PMPI_Allgather) allgather;
  decltype(&::PMPI_Allgatherv) allgatherv;
  decltype(&::PMPI_Alltoall) alltoall;
  decltype(&::PMPI_Alltoallv) alltoallv;
};

// The MPI's functions; a missing one aborts the process with a message at the first call
// (the interposer was loaded without the MPI it was built for).
const Entries &mpi();

}  // namespace shaddr::interpose::next

#ifndef SHADDR_DEFINES_ENTRIES
#define PMPI_Init (::shaddr::interpose::next::mpi().init)
#define PMPI_Init_thread (::shaddr::interpose::next::mpi().init_thread)
#define PMPI_Finalize (::shaddr::interpose::next::mpi().finalize)
#define PMPI_Barrier (::shaddr::interpose::next::mpi().barrier)
#define PMPI_Bcast (::shaddr::interpose::next::mpi().bcast)
#define PMPI_Reduce (::shaddr::interpose::next::mpi().reduce)
#define PMPI_Allreduce (::shaddr::interpose::next::mpi().allreduce)
#define PMPI_Gather (::shaddr::interpose::next::mpi().gather)
#define PMPI_Gatherv (::shaddr::interpose::next::mpi().gatherv)
#define PMPI_Scatter (::shaddr::interpose::next::mpi().scatter)
#define PMPI_Scatterv (::shaddr::interpose::next::mpi().scatterv)
#define PMPI_Allgather (::shaddr::interpose::next::mpi().allgather)
#define PMPI_Allgatherv (::shaddr::interpose::next::mpi().allgatherv)
#define PMPI_Alltoall (::shaddr::interpose::next::mpi().alltoall)
#define PMPI_Alltoallv (::shaddr::interpose::next::mpi().alltoallv)
#endif
