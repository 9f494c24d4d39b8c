/* SPDX-License-Identifier: MIT */
/*
 * The C side of shaddr-fortran-bench (fortran_bench.F90): the calls from C, and the output.
 */
#include <mpi.h>
#include <stdio.h>

/*
 * @iters calls of MPI_Allreduce (@which 0: @a summed into @b) or MPI_Bcast (1: @b from rank 0)
 * of @n doubles from C, after a barrier. Return: seconds per call, the slowest rank's.
 */

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

/*
 * The result (rank 0): @best in seconds, Fortran's best(2, 2) (Allreduce C, Bcast C, Allreduce
 * Fortran, Bcast Fortran), @ok 0 when a result was wrong. A line, and the same as one line of
 * JSON for tools/shaddr_bench/fortran.py.
 */
void fbench_report(const char *binding, int nproc, const double *best, int ok)
{
	const double ar_c = best[0] * 1e6, bc_c = best[1] * 1e6;
	const double ar_f = best[2] * 1e6, bc_f = best[3] * 1e6;

	printf("fortran_bench: %s %d ranks: allreduce C %.1f us, Fortran %.1f us; bcast C %.1f us, "
	       "Fortran %.1f us; %s\n",
	       binding, nproc, ar_c, ar_f, bc_c, bc_f, ok ? "ok" : "WRONG");
	printf("{\"tool\": \"fortran_bench\", \"binding\": \"%s\", \"ranks\": %d, "
	       "\"ar_c\": %.3f, \"ar_f\": %.3f, \"bc_c\": %.3f, \"bc_f\": %.3f, \"ok\": %s}\n",
	       binding, nproc, ar_c, ar_f, bc_c, bc_f, ok ? "true" : "false");
	fflush(stdout);
}
