/* SPDX-License-Identifier: MIT */
/*
 * The C side of shaddr-fortran-bench (fortran_bench.F90): @iters calls of MPI_Allreduce
 * (@which 0: @a summed into @b) or MPI_Bcast (1: @b from rank 0) of @n doubles from C, after a
 * barrier. Return: seconds per call, the slowest rank's.
 */
#include <mpi.h>

double fbench_c(int which, double *a, double *b, int n, int iters)
{
	double t;
	int i;

	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	for (i = 0; i < iters; i++) {
		if (which == 0)
			MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		else
			MPI_Bcast(b, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	}
	t = (MPI_Wtime() - t) / iters;
	MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return t;
}
