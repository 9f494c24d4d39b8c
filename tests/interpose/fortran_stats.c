/* SPDX-License-Identifier: MIT */
/*
 * The interposer's counters for the Fortran tests (fortran_coll.F90), looked up at run time
 * (shaddr_interpose.h): per intercepted collective, the calls run by libshaddr and those
 * forwarded, and the collectives libshaddr's node communicators ran. Return: 0, or -1 without
 * the interposer.
 */
#include <dlfcn.h>
#include <stdint.h>

#include "shaddr_interpose.h"

int shaddr_test_stats(int64_t accel[SHADDR_IP_COUNT], int64_t fwd[SHADDR_IP_COUNT],
		      int64_t *lib_calls)
{
	int (*get)(struct shaddr_interpose_stats *) =
		(int (*)(struct shaddr_interpose_stats *))dlsym(RTLD_DEFAULT,
								 "shaddr_interpose_get_stats");
	struct shaddr_interpose_stats st;
	int i;

	if (!get || get(&st) != 0)
		return -1;
	for (i = 0; i < SHADDR_IP_COUNT; i++) {
		accel[i] = (int64_t)st.accelerated[i];
		fwd[i] = (int64_t)st.forwarded[i];
	}
	*lib_calls = (int64_t)st.lib_calls;
	return 0;
}
