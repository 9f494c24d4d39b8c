/* SPDX-License-Identifier: MIT */
/*
 * Test-only LD_PRELOAD library for Debian's ScaLAPACK 2.2.1 test drivers
 * (tests/mpi/run-scalapack): the caller's EST is set to zero when PSLACON/PDLACON starts a new
 * estimate (KASE = 0), so the estimator no longer reads an uninitialised variable.
 *
 * Why: ScaLAPACK 2.2.1's PSLACON/PDLACON copy the caller's EST into their work variable on every
 * entry (ESTWORK(1) = EST) but write EST only at the end of an estimate; at the third step they
 * compare the new estimate with that copy (ESTOLD). P?GERFS and P?PORFS never set EST before the
 * first estimate, so the comparison reads whatever their stack held there, and that differs
 * between ranks (stack contents depend on the code paths each rank took, pointers on address-
 * space randomisation). Ranks whose garbage is large return KASE = 1, the others KASE = 2: they
 * call P?GETRS with different TRANS ("On entry to PSGETRS parameter number 1 had an illegal
 * value") or different collectives, and the job hangs. Reference-ScaLAPACK/scalapack#121, fixed
 * in 2.2.3 by setting EST to zero on entry (#122); Debian 12 ships 2.2.1. PSLACON/PDLACON leave
 * EST alone until an estimate ends, so zeroing it at the start of each estimate gives the same
 * run as that fix. PCLACON/PZLACON write EST before they read it and are not wrapped.
 *
 * SHADDR_TEST_LACON_POISON=rank instead stores a value that differs by rank (+1e30 on odd
 * world ranks, -1e30 on even ones) and =same one that does not (+1e30): the lacon-bug check of
 * run-scalapack shows with them, without shaddr, that the drivers fail exactly when the ranks'
 * values differ.
 *
 * The drivers call P?LACON through the PLT of libscalapack, so the preloaded definition wins;
 * the real one is found with dlsym(RTLD_NEXT).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void lacon_fn(int *n, void *v, int *iv, int *jv, int *descv, void *x, int *ix, int *jx,
		      int *descx, int *isgn, void *est, int *kase);

/* What to store in EST at the start of an estimate: 0 normally, or the poison of this rank. */
static double start_value(void) {
	const char *p = getenv("SHADDR_TEST_LACON_POISON");
	if (!p || !*p)
		return 0.0;
	if (!strcmp(p, "same"))
		return 1e30;
	const char *r = getenv("OMPI_COMM_WORLD_RANK");
	if (!r)
		r = getenv("PMI_RANK");
	if (!r) {
		fprintf(stderr, "lacon_est: SHADDR_TEST_LACON_POISON=%s: no rank in the environment\n", p);
		abort();
	}
	return atoi(r) % 2 ? 1e30 : -1e30;
}

static lacon_fn *real(const char *name) {
	lacon_fn *f = (lacon_fn *)dlsym(RTLD_NEXT, name);
	if (!f) {
		fprintf(stderr, "lacon_est: %s not found after this library\n", name);
		abort();
	}
	return f;
}

void pslacon_(int *n, void *v, int *iv, int *jv, int *descv, void *x, int *ix, int *jx,
	      int *descx, int *isgn, void *est, int *kase) {
	static lacon_fn *next;
	if (!next)
		next = real("pslacon_");
	if (*kase == 0)
		*(float *)est = (float)start_value();
	next(n, v, iv, jv, descv, x, ix, jx, descx, isgn, est, kase);
}

void pdlacon_(int *n, void *v, int *iv, int *jv, int *descv, void *x, int *ix, int *jx,
	      int *descx, int *isgn, void *est, int *kase) {
	static lacon_fn *next;
	if (!next)
		next = real("pdlacon_");
	if (*kase == 0)
		*(double *)est = start_value();
	next(n, v, iv, jv, descv, x, ix, jx, descx, isgn, est, kase);
}
