/* SPDX-License-Identifier: MIT */
/*
 * Test-only LD_PRELOAD library for Debian's ScaLAPACK 2.2.1 test drivers
 * (tests/interpose/run-scalapack): the caller's EST is set to zero when PSLACON/PDLACON starts a new
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
 * values differ. =trace leaves EST as the caller left it and prints, per rank and call, the EST
 * the call found and the KASE it got and returned, into SHADDR_TEST_LACON_TRACE_DIR/rank-R
 * (stderr without it): what a failing run's ranks disagreed on (run-scalapack lacon-trace).
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

static const char *world_rank(void) {
	const char *r = getenv("OMPI_COMM_WORLD_RANK");

	if (!r)
		r = getenv("PMI_RANK");
	return r ? r : "?";
}

/* What to store in EST at the start of an estimate: 0 normally, or the poison of this rank. */
static double start_value(void) {
	const char *p = getenv("SHADDR_TEST_LACON_POISON");
	if (!p || !*p || !strcmp(p, "trace"))
		return 0.0;
	if (!strcmp(p, "same"))
		return 1e30;
	const char *r = world_rank();
	if (!strcmp(r, "?")) {
		fprintf(stderr, "lacon_est: SHADDR_TEST_LACON_POISON=%s: no rank in the environment\n", p);
		abort();
	}
	return atoi(r) % 2 ? 1e30 : -1e30;
}

static int tracing(void) {
	const char *p = getenv("SHADDR_TEST_LACON_POISON");

	return p && !strcmp(p, "trace");
}

/* One line per call: the EST it found, KASE in and out (1: the caller solves with A, 2: with A
 * transposed, 0: the estimate is done). */
static void trace(const char *name, int *n_call, double est, int kase_in, int kase_out) {
	union {
		double d;
		unsigned long long u;
	} bits = { .d = est };

	static FILE *out;

	if (!out) {
		/* Rank 0's stdout is the driver's report: its lines would cut into ours. */
		const char *dir = getenv("SHADDR_TEST_LACON_TRACE_DIR");
		char path[4096];

		out = stderr;
		if (dir && *dir) {
			snprintf(path, sizeof(path), "%s/rank-%s", dir, world_rank());
			out = fopen(path, "w");
			if (!out) {
				perror(path);
				abort();
			}
			setvbuf(out, NULL, _IOLBF, 0);
		}
	}
	fprintf(out, "lacon_est: rank %s %s call %d: EST on entry %.9g (0x%016llx), KASE %d -> %d\n",
		world_rank(), name, ++*n_call, est, bits.u, kase_in, kase_out);
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
	static int n_call;
	const int kase_in = *kase;
	const float found = *(float *)est;

	if (kase_in == 0 && !tracing())
		*(float *)est = (float)start_value();
	next(n, v, iv, jv, descv, x, ix, jx, descx, isgn, est, kase);
	if (tracing())
		trace("PSLACON", &n_call, found, kase_in, *kase);
}

void pdlacon_(int *n, void *v, int *iv, int *jv, int *descv, void *x, int *ix, int *jx,
	      int *descx, int *isgn, void *est, int *kase) {
	static lacon_fn *next;
	if (!next)
		next = real("pdlacon_");
	static int n_call;
	const int kase_in = *kase;
	const double found = *(double *)est;

	if (kase_in == 0 && !tracing())
		*(double *)est = start_value();
	next(n, v, iv, jv, descv, x, ix, jx, descx, isgn, est, kase);
	if (tracing())
		trace("PDLACON", &n_call, found, kase_in, *kase);
}
