/* SPDX-License-Identifier: MIT */
/*
 * What the host runtime (the PMPI interposer, the MPICH patch, a test) hands libshaddr: the
 * node-local rank and size, and two collective callbacks over the node's processes. libshaddr's
 * core has no MPI dependency.
 */
#ifndef SHADDR_HOST_H
#define SHADDR_HOST_H

#include <stddef.h>

#include "shaddr/shaddr.h"

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

/**
 * shaddr_set_progress() - the host's progress engine, for libshaddr's waits
 * @fn: drives the host's communication (MPI: its progress engine) without blocking; NULL: none
 * @ctx: passed to @fn
 *
 * MPI's progress rule: a process blocked in a collective keeps its other operations moving (a
 * passive-target RMA epoch aimed at it, other ranks' messages). libshaddr's waits call @fn at
 * a bounded interval once they stop spinning (SHADDR_WAIT_PROGRESS, microseconds), and sleep
 * no longer than that, in any thread; @fn is never re-entered from within itself. One per
 * process: the last call wins. Set it before the first node communicator is created.
 */
SHADDR_API void shaddr_set_progress(void (*fn)(void *ctx), void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* SHADDR_HOST_H */
