/* SPDX-License-Identifier: MIT */
/*
 * finalize_probe: preloaded into the ranks of tests/multihost, says on stderr when a rank enters
 * and leaves the MPI library's own PMPI_Finalize ("finalize-probe: rank R entered|left"). By
 * then the program and shaddr's interposer (whose MPI_Finalize releases its state first) are
 * done: a job that hangs after every rank entered is hung inside the MPI library's finalize
 * (Debian's MPICH 4.0.2 over UCX 1.13's tcp transport: see docs/multihost.md).
 * No MPI header: the symbol is looked up further down the library chain.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static const char *rank_env(void) {
	const char *names[] = {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"};
	for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
		if (getenv(names[i]))
			return getenv(names[i]);
	return "?";
}

int PMPI_Finalize(void) {
	int (*next)(void);
	*(void **)&next = dlsym(RTLD_NEXT, "PMPI_Finalize");
	if (!next) {
		fprintf(stderr, "finalize-probe: no PMPI_Finalize below the probe\n");
		abort();
	}
	fprintf(stderr, "finalize-probe: rank %s entered PMPI_Finalize\n", rank_env());
	fflush(stderr);
	int rc = next();
	fprintf(stderr, "finalize-probe: rank %s left PMPI_Finalize\n", rank_env());
	fflush(stderr);
	return rc;
}
