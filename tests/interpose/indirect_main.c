/* SPDX-License-Identifier: MIT */
/*
 * A program that reaches MPI only through a library (indirect_lib.c): run under shaddr-run, the
 * interposer must be loaded and must have accelerated the Allreduce (more than one rank).
 */
#include <dlfcn.h>
#include <stdio.h>

#include "shaddr_interpose.h"

int indirect_allreduce(int *argc, char ***argv, int *nranks);

int main(int argc, char **argv)
{
	int (*get)(struct shaddr_interpose_stats *) =
		(int (*)(struct shaddr_interpose_stats *))dlsym(RTLD_DEFAULT, "shaddr_interpose_get_stats");
	struct shaddr_interpose_stats st;
	int nranks = 0;

	if (indirect_allreduce(&argc, &argv, &nranks)) {
		fprintf(stderr, "indirect: wrong Allreduce result\n");
		return 1;
	}
	if (!get) {
		fprintf(stderr, "indirect: the interposer is not loaded\n");
		return 1;
	}
	if (get(&st) || (nranks > 1 && st.accelerated[SHADDR_IP_ALLREDUCE] == 0)) {
		fprintf(stderr, "indirect: the Allreduce did not go through libshaddr\n");
		return 1;
	}
	printf("indirect: ok (%d ranks)\n", nranks);
	return 0;
}
