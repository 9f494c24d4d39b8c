/* SPDX-License-Identifier: MIT */
/*
 * A PMPI profiling tool as users layer them: its MPI_Bcast, MPI_Allreduce and MPI_Barrier count
 * the call and pass it on to PMPI_*. Preloaded before the interposer (tool_layer.c), its
 * PMPI_* calls reach the interposer's PMPI_* entries.
 */
#include <mpi.h>

static int g_calls;

int pmpi_tool_calls(void)
{
	return g_calls;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
	g_calls++;
	return PMPI_Bcast(buf, count, type, root, comm);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
		  MPI_Comm comm)
{
	g_calls++;
	return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Barrier(MPI_Comm comm)
{
	g_calls++;
	return PMPI_Barrier(comm);
}
