/* SPDX-License-Identifier: MIT */
/*
 * What a communicator costs: a loop of (MPI_Comm_dup of MPI_COMM_WORLD, one 8-byte
 * MPI_Allreduce on it, MPI_Comm_free), in microseconds per iteration, and the first collective
 * that libshaddr runs on a fresh communicator (a 1 MiB Allreduce: the interposer's set-up of
 * the communicator, then the call), against the same call once set up. Run it with and without
 * shaddr-run to compare; the numbers are printed (rank 0: a line, and the same as one line of
 * JSON), nothing is asserted (only the results).
 *
 *   comm_cost [ITERATIONS]    (default 300)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const int iterations = argc > 1 ? atoi(argv[1]) : 300;
	double in = 1.0, out = 0.0;
	int errors = 0;
	/* Warm-up: MPI_COMM_WORLD's own first collectives. */
	MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	const double t0 = MPI_Wtime();
	for (int i = 0; i < iterations; i++) {
		MPI_Comm c;
		MPI_Comm_dup(MPI_COMM_WORLD, &c);
		MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, c);
		errors += out != size;
		MPI_Comm_free(&c);
	}
	const double loop = (MPI_Wtime() - t0) / iterations * 1e6;

	/* The first large collective on a fresh communicator, then the same call again: on a dup
	 * of MPI_COMM_WORLD (whose set-up the interposer may share), and on a communicator of
	 * another group (the ranks in reverse order), freed each time: its first time ever, and
	 * the next times. */
	const int n = (1 << 20) / 8;
	double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
	for (int i = 0; i < n; i++)
		a[i] = i;
	const int reps = 20;
	double t_dup = 0, t_new0 = 0, t_new = 0, t_again = 0;
	for (int r = 0; r < 2 * reps; r++) {
		MPI_Comm c;
		if (r < reps)
			MPI_Comm_dup(MPI_COMM_WORLD, &c);
		else
			MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &c);
		MPI_Barrier(MPI_COMM_WORLD);
		double t = MPI_Wtime();
		MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, c);
		t = MPI_Wtime() - t;
		if (r < reps)
			t_dup += t;
		else if (r == reps)
			t_new0 = t;
		else
			t_new += t;
		MPI_Barrier(MPI_COMM_WORLD);
		t = MPI_Wtime();
		MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, c);
		t_again += MPI_Wtime() - t;
		errors += b[n - 1] != (double)(n - 1) * size;
		MPI_Comm_free(&c);
	}
	const double dup_us = t_dup / reps * 1e6, new_first_us = t_new0 * 1e6;
	const double new_later_us = t_new / (reps - 1) * 1e6;
	const double set_up_us = t_again / (2 * reps) * 1e6;
	if (rank == 0) {
		printf("comm_cost: %d ranks: dup + 8-byte Allreduce + free: %.1f us/iteration (%d); "
		       "1 MiB Allreduce, first on a fresh communicator: dup %.0f us, new group first "
		       "%.0f us, new group later %.0f us; once set up %.0f us%s\n",
		       size, loop, iterations, dup_us, new_first_us, new_later_us, set_up_us,
		       errors ? ": WRONG RESULTS" : "");
		/* The same as one JSON line, for tools/shaddr_bench/commcost.py. */
		printf("{\"tool\": \"comm_cost\", \"ranks\": %d, \"iterations\": %d, "
		       "\"loop_us\": %.3f, \"dup_us\": %.3f, \"new_first_us\": %.3f, "
		       "\"new_later_us\": %.3f, \"set_up_us\": %.3f, \"wrong\": %s}\n",
		       size, iterations, loop, dup_us, new_first_us, new_later_us, set_up_us,
		       errors ? "true" : "false");
	}
	free(a);
	free(b);
	MPI_Finalize();
	return errors ? 1 : 0;
}
