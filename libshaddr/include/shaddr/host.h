/* SPDX-License-Identifier: MIT */
/*
 * What the host runtime (the PMPI interposer, the MPICH patch, a test) hands libshaddr: the
 * node-local rank and size, and two collective callbacks over the node's processes. libshaddr's
 * core has no MPI dependency.
 */
#ifndef SHADDR_HOST_H
#define SHADDR_HOST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * struct shaddr_host - the node communicator as libshaddr sees it
 * @rank: this process's rank on the node, 0 <= rank < size
 * @size: processes on the node
 * @allgather: every rank contributes @bytes at @send; @recv (size * @bytes) receives all
 *             contributions in rank order. Returns 0 or a negative errno.
 * @barrier: returns when every rank has entered it. Returns 0 or a negative errno.
 * @ctx: passed to both callbacks
 */
struct shaddr_host {
	int rank;
	int size;
	int (*allgather)(const void *send, void *recv, size_t bytes, void *ctx);
	int (*barrier)(void *ctx);
	void *ctx;
};

#ifdef __cplusplus
}
#endif

#endif /* SHADDR_HOST_H */
