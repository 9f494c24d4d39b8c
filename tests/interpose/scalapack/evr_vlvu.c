/* SPDX-License-Identifier: MIT */
/*
 * Test-only LD_PRELOAD observer for Debian's ScaLAPACK 2.2.1 eigensolver drivers xssyevr,
 * xdsyevr, xcheevr and xzheevr (tests/interpose/run-scalapack): notes on stderr when the driver calls
 * P?SYEVR/P?HEEVR with VL or VU holding a NaN. It changes nothing.
 *
 * Why: their testers (P?SEPRTST) pass VL and VU without ever setting them to the subtests with
 * RANGE = 'A' and 'I' (which do not use them), and P?SEPRSUBTST then checks that the call left
 * them alone with VL.NE.OLDVL and VU.NE.OLDVU. Whatever the stack held there is compared with
 * itself: if it happens to be a NaN the comparison fails and the test is reported failed with
 * "IL, IU, VL or VU altered by P?HEEVR", whatever the solver did. Which bits the stack holds
 * depends on what ran before (under SHADDR_VERIFY=1 xcheevr's VU was 0xffffff80 on every rank
 * and 132 of its 136 tests failed so; stock Open MPI passes with pointer bits there). A NaN seen
 * here on entry, before the solver ran, is that driver bug, not a result of the run.
 *
 * The drivers call the solvers through the PLT, so these definitions win; the real ones are found
 * with dlsym(RTLD_NEXT). Arguments as in ScaLAPACK 2.2.1 (VL and VU are the 9th and 10th;
 * P?HEEVR has RWORK and LRWORK more than P?SYEVR), plus the three hidden character lengths.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef void *P;
typedef void syevr_fn(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,
		      size_t, size_t, size_t);
typedef void heevr_fn(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,
		      P, size_t, size_t, size_t);

static void *real(const char *name) {
	void *f = dlsym(RTLD_NEXT, name);
	if (!f) {
		fprintf(stderr, "evr_vlvu: %s not found after this library\n", name);
		abort();
	}
	return f;
}

static void note(const char *routine, const char *range, int nan_vl, int nan_vu) {
	static int said;
	if (said++ < 3)
		fprintf(stderr,
			"evr_vlvu: %s called with RANGE=%c and %s%s%s a NaN on entry (never set by "
			"the driver): its \"altered\" check cannot pass\n",
			routine, *range, nan_vl ? "VL" : "", nan_vl && nan_vu ? " and " : "",
			nan_vu ? "VU" : "");
}

#define SYEVR(name, T)                                                                          \
	void name##_(P jobz, P range, P uplo, P n, P a, P ia, P ja, P desca, P vl, P vu, P il,  \
		     P iu, P m, P nz, P w, P z, P iz, P jz, P descz, P work, P lwork, P iwork,  \
		     P liwork, P info, size_t l1, size_t l2, size_t l3) {                        \
		static syevr_fn *next;                                                          \
		if (!next)                                                                      \
			next = (syevr_fn *)real(#name "_");                                     \
		if (isnan(*(T *)vl) || isnan(*(T *)vu))                                         \
			note(#name, range, isnan(*(T *)vl), isnan(*(T *)vu));                   \
		next(jobz, range, uplo, n, a, ia, ja, desca, vl, vu, il, iu, m, nz, w, z, iz,   \
		     jz, descz, work, lwork, iwork, liwork, info, l1, l2, l3);                  \
	}

#define HEEVR(name, T)                                                                          \
	void name##_(P jobz, P range, P uplo, P n, P a, P ia, P ja, P desca, P vl, P vu, P il,  \
		     P iu, P m, P nz, P w, P z, P iz, P jz, P descz, P work, P lwork, P rwork,  \
		     P lrwork, P iwork, P liwork, P info, size_t l1, size_t l2, size_t l3) {     \
		static heevr_fn *next;                                                          \
		if (!next)                                                                      \
			next = (heevr_fn *)real(#name "_");                                     \
		if (isnan(*(T *)vl) || isnan(*(T *)vu))                                         \
			note(#name, range, isnan(*(T *)vl), isnan(*(T *)vu));                   \
		next(jobz, range, uplo, n, a, ia, ja, desca, vl, vu, il, iu, m, nz, w, z, iz,   \
		     jz, descz, work, lwork, rwork, lrwork, iwork, liwork, info, l1, l2, l3);   \
	}

SYEVR(pssyevr, float)
SYEVR(pdsyevr, double)
HEEVR(pcheevr, float)
HEEVR(pzheevr, double)
