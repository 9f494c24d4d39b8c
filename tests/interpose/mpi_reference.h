/* SPDX-License-Identifier: MIT */
/*
 * The MPI library's own PMPI_* functions, as the differential tests' reference. The preloaded
 * interposer exports PMPI_* as well (its entries for the MPIs' Fortran layers and for PMPI
 * tools, libshaddr/interpose/bindings.cc), so a plain PMPI_* call from a test program would
 * reach the implementation under test and compare it with itself. Included after <mpi.h>,
 * this header sends every PMPI_* name the program calls to the definition in the MPI library
 * (the object that defines PMPI_Comm_rank, which the interposer does not).
 */
#ifndef SHADDR_TESTS_MPI_REFERENCE_H
#define SHADDR_TESTS_MPI_REFERENCE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *mpi_reference(const char *name)
{
	static void *lib;
	void *fn;

	if (!lib) {
		Dl_info info;
		void *any = dlsym(RTLD_DEFAULT, "PMPI_Comm_rank");

		if (!any || !dladdr(any, &info) ||
		    !(lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD))) {
			fprintf(stderr, "mpi_reference: the MPI library is not found\n");
			abort();
		}
	}
	fn = dlsym(lib, name);
	if (!fn) {
		fprintf(stderr, "mpi_reference: %s is not in the MPI library\n", name);
		abort();
	}
	return fn;
}

#define MPI_REFERENCE(name) ((__typeof__(&name))mpi_reference(#name))
#define PMPI_Barrier MPI_REFERENCE(PMPI_Barrier)
#define PMPI_Bcast MPI_REFERENCE(PMPI_Bcast)
#define PMPI_Reduce MPI_REFERENCE(PMPI_Reduce)
#define PMPI_Allreduce MPI_REFERENCE(PMPI_Allreduce)
#define PMPI_Gather MPI_REFERENCE(PMPI_Gather)
#define PMPI_Gatherv MPI_REFERENCE(PMPI_Gatherv)
#define PMPI_Scatter MPI_REFERENCE(PMPI_Scatter)
#define PMPI_Scatterv MPI_REFERENCE(PMPI_Scatterv)
#define PMPI_Allgather MPI_REFERENCE(PMPI_Allgather)
#define PMPI_Allgatherv MPI_REFERENCE(PMPI_Allgatherv)
#define PMPI_Alltoall MPI_REFERENCE(PMPI_Alltoall)
#define PMPI_Alltoallv MPI_REFERENCE(PMPI_Alltoallv)

#endif
