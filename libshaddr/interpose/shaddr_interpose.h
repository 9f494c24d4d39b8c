/* SPDX-License-Identifier: MIT */
/*
 * What the LD_PRELOAD interposer (libshaddr-mpich.so, libshaddr-openmpi.so) did in this process.
 * A program (or a test) that wants to know looks the function up at run time, so it builds and
 * runs unchanged without the interposer:
 *
 *     int (*get)(struct shaddr_interpose_stats *) = dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
 */
#ifndef SHADDR_INTERPOSE_H
#define SHADDR_INTERPOSE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The intercepted collectives, in the order of the arrays below. */
enum shaddr_interpose_call {
	SHADDR_IP_BARRIER,
	SHADDR_IP_BCAST,
	SHADDR_IP_REDUCE,
	SHADDR_IP_ALLREDUCE,
	SHADDR_IP_GATHER,
	SHADDR_IP_GATHERV,
	SHADDR_IP_SCATTER,
	SHADDR_IP_SCATTERV,
	SHADDR_IP_ALLGATHER,
	SHADDR_IP_ALLGATHERV,
	SHADDR_IP_ALLTOALL,
	SHADDR_IP_ALLTOALLV,
	SHADDR_IP_COUNT
};

/**
 * struct shaddr_interpose_stats - this process's counters
 * @accelerated: calls completed through libshaddr (node) or the node/leader hierarchy
 * @hierarchical: of @accelerated, those on communicators spanning several (virtual) nodes
 * @forwarded: calls passed to PMPI_* as they were (not eligible: see docs/interposer.md)
 * @fallbacks: calls where libshaddr failed on every rank of a node and PMPI_* redid the work
 * @lib_calls: collectives libshaddr's node communicators ran (their own statistics, summed
 *             over live and freed communicators)
 * @comms_created: communicators that got shaddr state; @comms_freed: of those, freed again
 * @mesh_alltoall: leaders' exchanges of a hierarchical Alltoall done in two phases over the
 *                 2D virtual mesh of the leaders (short blocks combined per row and column)
 * @cache_misses: libshaddr's registration-cache misses (each a mapping system call), summed
 *                like @lib_calls; @cache_evictions: mappings it dropped to make room;
 *                @cache_refusals: transfers that copied because every mapping was in use
 * @bytes_mapped: peers' memory that this process's live communicators have mapped now
 * @heap_transfers: reads and mappings of peers' memory served from their heap files (libshaddr's
 *                  heap layer: a pointer into a peer's heap mapped once), summed like
 *                  @lib_calls; @heap_bytes: bytes of @heap_transfers
 * @world_nodes: the nodes MPI_COMM_WORLD spans, as the interposer found them (MPI's
 *               MPI_COMM_TYPE_SHARED split, or SHADDR_NODES), once its state is made and usable
 *               (its first intercepted collective); 0 before, or when it is forwarded
 */
struct shaddr_interpose_stats {
	uint64_t accelerated[SHADDR_IP_COUNT];
	uint64_t hierarchical[SHADDR_IP_COUNT];
	uint64_t forwarded[SHADDR_IP_COUNT];
	uint64_t fallbacks[SHADDR_IP_COUNT];
	uint64_t lib_calls;
	uint64_t comms_created;
	uint64_t comms_freed;
	uint64_t mesh_alltoall;
	uint64_t cache_misses;
	uint64_t cache_evictions;
	uint64_t cache_refusals;
	uint64_t bytes_mapped;
	uint64_t heap_transfers;
	uint64_t heap_bytes;
	uint64_t world_nodes;
};

/* 0, or -EINVAL for NULL. */
int shaddr_interpose_get_stats(struct shaddr_interpose_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* SHADDR_INTERPOSE_H */
