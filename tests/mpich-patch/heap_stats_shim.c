// SPDX-License-Identifier: MIT
/*
 * heap_stats_shim: what the patched MPICH loads instead of libshaddr in run-mpich-tests' heap
 * mode (MPIR_CVAR_CH4_POSIX_SHADDR_LIBRARY), so that the shared heap's counters can be checked.
 *
 * MPICH dlopens this library and dlsyms libshaddr's C API in it: every name but
 * shaddr_comm_free is found in its dependency, libshaddr.so.0 (DT_NEEDED). shaddr_comm_free is
 * defined here: before the real one runs, every rank prints one line with its node
 * communicator's heap counters (struct shaddr_comm_stats' heap_* fields), which the patched
 * MPICH's own verbose line (rank 0, calls only) does not show:
 *
 *   shaddr heap stats: pid P, backend heap+cma: heap_transfers=N heap_bytes=N
 *   heap_exposures=N heap_peers=N
 *
 * run-mpich-tests sums heap_transfers over these lines: it must be > 0 in heap mode.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include <shaddr/coll.h>

int shaddr_comm_free(shaddr_comm_t *comm)
{
	static int (*real_free)(shaddr_comm_t *);
	struct shaddr_comm_stats st;

	if (!real_free) {
		void *lib = dlopen("libshaddr.so.0", RTLD_NOW | RTLD_NOLOAD);
		if (lib)
			*(void **)&real_free = dlsym(lib, "shaddr_comm_free");
		if (!real_free) {
			fprintf(stderr, "heap_stats_shim: libshaddr's shaddr_comm_free not found\n");
			return -1;
		}
	}
	if (comm && shaddr_comm_get_stats(comm, &st) == 0)
		fprintf(stderr,
			"shaddr heap stats: pid %d, backend %s: heap_transfers=%llu heap_bytes=%llu "
			"heap_exposures=%llu heap_peers=%llu\n",
			(int)getpid(), shaddr_comm_backend(comm),
			(unsigned long long)st.heap_transfers, (unsigned long long)st.heap_bytes,
			(unsigned long long)st.heap_exposures, (unsigned long long)st.heap_peers);
	return real_free(comm);
}
