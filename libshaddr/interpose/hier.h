// SPDX-License-Identifier: MIT
// Collectives over communicators that span several (virtual) nodes: libshaddr inside each node,
// the host MPI between the node leaders (a two-level hierarchy over real or virtual nodes).
//
// A libshaddr failure fails on every rank of that node alike, so the node redoes only its own
// phase with PMPI_* on the node communicator (the data it needs is still intact): no agreement
// across nodes is needed. Return: MPI_SUCCESS or the error of a PMPI_* call.
#pragma once

#include "state.h"

namespace shaddr::interpose {

int hier_barrier(State &s, bool *fell_back);
// buf: bytes on every rank (the root's data on the root).
int hier_bcast(State &s, char *buf, size_t bytes, int root, bool *fell_back);
// in: this rank's operand (never MPI_IN_PLACE); out: the result on the root (root >= 0) or on
// every rank (root < 0; the leaders' allreduce is segmented and pipelined into the node
// broadcast, like hier_bcast); count elements of t / dt.
int hier_reduce(State &s, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op,
                shaddr_dtype dt, shaddr_op sop, int root, bool *fell_back);
// in: this rank's block (may lie inside out, at its own place); out: size * bytes.
int hier_allgather(State &s, const char *in, size_t bytes, char *out, bool *fell_back);
// in: size blocks to send (not overlapping out); out: size blocks received.
int hier_alltoall(State &s, const char *in, size_t bytes, char *out, bool *fell_back);

// PMPI_Bcast of any number of bytes (chunked to int counts).
int bcast_bytes(void *buf, size_t bytes, int root, MPI_Comm comm);

}  // namespace shaddr::interpose
