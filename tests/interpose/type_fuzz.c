/* SPDX-License-Identifier: MIT */
/*
 * Generated cases for the interposer's datatype and argument handling, judged against the MPI
 * library's own collectives (PMPI_*, taken from the MPI library itself: mpi_reference.h).
 *
 *   type_fuzz types [--seed S] [--cases N] [--seconds T]
 *     Each case draws a collective, a communicator (world, a dup, a split with shuffled ranks),
 *     a root, a count, MPI_IN_PLACE or not, and for every rank its own send and receive
 *     datatypes: the same type signature (m elements of one basic type) in a layout of its own
 *     (contiguous, indexed with the displacements shuffled, vectors with negative or gapped
 *     strides, resized to negative, zero or padded extents, structs and hindexed types with
 *     holes, types nested in types). Reductions use one predefined type on every rank, as MPI
 *     requires, drawn from C's and Fortran's (INTEGER, REAL, DOUBLE PRECISION, COMPLEX,
 *     LOGICAL, the MINLOC/MAXLOC pairs, ...) with an op MPI defines on it.
 *     The call runs through MPI_* and again through PMPI_* on copies of every buffer; every
 *     byte of every buffer (gaps hold a fill pattern) and the return codes must agree. A failure
 *     prints the seed and the case, so `--seed S` replays the same cases.
 *     TYPE_FUZZ_EXPECT_LIB=1: every reduction must also be counted by the interposer as run by
 *     libshaddr (one node, SHADDR_MIN=0: every predefined type and op drawn is libshaddr's).
 *     TYPE_FUZZ_SAME_MPI=1: MPI_* and PMPI_* are one implementation, the one under test (the
 *     patched MPICH), and reductions are judged against the exact sum: a case where either
 *     call's result is not the expected one is printed ("wrong (MPI_*: ..., PMPI_*: ...)")
 *     for the driver to judge by the collective (run by libshaddr or by the MPI's own code).
 *
 *   type_fuzz mismatch
 *     Erroneous calls whose counts differ between ranks (the cases of a count mismatch that MPI
 *     reports as MPI_ERR_TRUNCATE or leaves undefined), each on its own dup of MPI_COMM_WORLD
 *     with MPI_ERRORS_RETURN and buffers that end right before a PROT_NONE page, so a write or
 *     read past them faults. Prints one line per case and rank: the error class returned. The
 *     driver (tests/interpose/test-type-fuzz) runs this stock and under shaddr-run and requires the
 *     same lines, with a time limit against hangs. --only/--skip take comma-separated case
 *     names (the cases where the MPI itself hangs or corrupts memory are skipped for it).
 */
#define _GNU_SOURCE /* dladdr (mpi_reference.h) */
#include <dlfcn.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shaddr_interpose.h"
#include "mpi_reference.h" /* PMPI_*: the MPI library's own, not the interposer's */

static int g_rank, g_size, g_errors;
static unsigned long long g_seed;
static int g_case;
static int g_stock_wrong; /* cases where the MPI's own collective was wrong */
static int g_same_mpi;	  /* TYPE_FUZZ_SAME_MPI: PMPI_* is the implementation under test */
static int g_expect_lib;  /* TYPE_FUZZ_EXPECT_LIB: every reduction is libshaddr's (below) */
#ifdef OPEN_MPI
static const int g_open_mpi = 1;
#else
static const int g_open_mpi = 0;
#endif

/* --- random numbers: one stream shared by every rank, one per rank ----------------------- */
struct rng {
	uint64_t s;
};

static uint64_t next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int pick(struct rng *r, int n)
{
	return (int)(next(r) % (uint64_t)n);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	if (g_errors++ > 10)
		return;
	fprintf(stderr, "type_fuzz rank %d: seed %llu case %d: ", g_rank, g_seed, g_case);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

/* --- layouts -------------------------------------------------------------------------------- */

/* A datatype with the signature of m elements of @basic (size @bsz), drawn from @r. @recv: no
 * zero extents drawn (MPI forbids receiving into overlapping type maps; receive_layout() checks
 * what the composition makes of negative ones). @desc says what it is, for the failure message. */
static MPI_Datatype layout(struct rng *r, MPI_Datatype basic, int bsz, int m, int recv, int depth,
			   char *desc, size_t dlen)
{
	MPI_Datatype t = MPI_DATATYPE_NULL, inner;
	int kind = pick(r, depth < 2 ? 9 : 7);
	int i;

	switch (kind) {
	case 0:
		MPI_Type_contiguous(m, basic, &t);
		snprintf(desc, dlen, "contig(%d)", m);
		break;
	case 1: { /* indexed, displacements shuffled (a type map out of memory order) */
		int bl[16], dsp[16];

		for (i = 0; i < m; i++) {
			bl[i] = 1;
			dsp[i] = i;
		}
		for (i = m - 1; i > 0; i--) {
			int j = pick(r, i + 1), x = dsp[i];

			dsp[i] = dsp[j];
			dsp[j] = x;
		}
		MPI_Type_indexed(m, bl, dsp, basic, &t);
		snprintf(desc, dlen, "indexed-shuffled(%d)", m);
		break;
	}
	case 2: /* negative stride */
		MPI_Type_vector(m, 1, -1 - pick(r, 2), basic, &t);
		snprintf(desc, dlen, "vector(%d,1,neg)", m);
		break;
	case 3: /* holes */
		MPI_Type_vector(m, 1, 2 + pick(r, 2), basic, &t);
		snprintf(desc, dlen, "vector(%d,1,gap)", m);
		break;
	case 4: { /* resized: negative, zero (send only), equal or padded extent */
		MPI_Type_contiguous(m, basic, &inner);
		/* Receive layouts: no zero extent (overlap). On Open MPI no negative extent at all:
		 * 4.1.4's own Gather fails on one at the root with MPI_ERR_INTERN while the senders
		 * wait, and leaves ranks waiting when a non-root sends with one (stock: no
		 * baseline). */
		int ext_kind = pick(r, recv ? 3 : 4);
#ifdef OPEN_MPI
		if (ext_kind == 0)
			ext_kind = 1;
#endif
		MPI_Aint ext = ext_kind == 0 ? -(MPI_Aint)m * bsz :
			       ext_kind == 1 ? (MPI_Aint)m * bsz :
			       ext_kind == 2 ? (MPI_Aint)(m + 3) * bsz : 0;
		MPI_Aint lb = ext_kind == 0 ? -(MPI_Aint)m * bsz : 0;

		MPI_Type_create_resized(inner, lb, ext, &t);
		MPI_Type_free(&inner);
		snprintf(desc, dlen, "resized(contig(%d),lb=%ld,ext=%ld)", m, (long)lb, (long)ext);
		break;
	}
	case 5: { /* struct with holes, blocks in reverse address order */
		int bl[16];
		MPI_Aint dsp[16];
		MPI_Datatype ty[16];

		for (i = 0; i < m; i++) {
			bl[i] = 1;
			dsp[i] = (MPI_Aint)(m - 1 - i) * 2 * bsz;
			ty[i] = basic;
		}
		MPI_Type_create_struct(m, bl, dsp, ty, &t);
		snprintf(desc, dlen, "struct-reversed-holes(%d)", m);
		break;
	}
	case 6: { /* hindexed in order with a hole at the front (true_lb > 0) */
		int bl[16];
		MPI_Aint dsp[16];

		for (i = 0; i < m; i++) {
			bl[i] = 1;
			dsp[i] = (MPI_Aint)(i + 1) * bsz;
		}
		MPI_Type_create_hindexed(m, bl, dsp, basic, &t);
		snprintf(desc, dlen, "hindexed-offset(%d)", m);
		break;
	}
	case 7: { /* a derived type of a derived type: contiguous of a shuffled or reversed type */
		char sub[160];
		int parts = m % 2 == 0 ? 2 : 1;

		inner = layout(r, basic, bsz, m / parts, recv, depth + 1, sub, sizeof(sub));
		MPI_Type_contiguous(parts, inner, &t);
		MPI_Type_free(&inner);
		snprintf(desc, dlen, "contig(%d,%s)", parts, sub);
		break;
	}
	default: { /* vector of a resized inner: nested with reordered blocks */
		char sub[160];
		int parts = m % 2 == 0 ? 2 : 1;
		MPI_Datatype rs;
		MPI_Aint lb, ext;

		inner = layout(r, basic, bsz, m / parts, recv, depth + 1, sub, sizeof(sub));
		MPI_Type_get_extent(inner, &lb, &ext);
		if (ext < 0)
			ext = -ext;
		MPI_Type_create_resized(inner, 0, ext + (MPI_Aint)bsz * pick(r, 2), &rs);
		MPI_Type_create_hvector(parts, 1, pick(r, 2) ? -ext - bsz : ext + bsz, rs, &t);
		MPI_Type_free(&inner);
		MPI_Type_free(&rs);
		snprintf(desc, dlen, "hvector(%d,%s)", parts, sub);
		break;
	}
	}
	MPI_Type_commit(&t);
	return t;
}

/* Whether a receive into (@t, any count) could write a byte twice, which MPI forbids (the
 * result is whichever writer the MPI takes last). layout() cannot rule it out by construction:
 * by MPI's extent rules a contiguous(2) of resized(lb=-4, ext=-4) has lb = ub = -8, extent 0.
 * So the made type is checked: its elements apart (|extent| >= true extent), and within one
 * element no byte reached twice (a stream whose bytes differ pairwise in one of three byte
 * planes, unpacked and packed again, comes back changed where two bytes land on one). */
static int overlaps(MPI_Datatype t)
{
	MPI_Aint lb, ext, tlb, text;
	int size, plane, pos, bad = 0;

	MPI_Type_size(t, &size);
	MPI_Type_get_extent(t, &lb, &ext);
	MPI_Type_get_true_extent(t, &tlb, &text);
	if (size == 0)
		return 0;
	if ((ext < 0 ? -ext : ext) < text)
		return 1;
	char *mem = calloc((size_t)text, 1), *in = malloc((size_t)size), *out = malloc((size_t)size);

	for (plane = 0; plane < 3 && !bad; plane++) {
		for (pos = 0; pos < size; pos++)
			in[pos] = (char)(pos >> (8 * plane));
		pos = 0;
		MPI_Unpack(in, size, &pos, mem - tlb, 1, t, MPI_COMM_SELF);
		pos = 0;
		MPI_Pack(mem - tlb, 1, t, out, size, &pos, MPI_COMM_SELF);
		bad = memcmp(in, out, (size_t)size) != 0;
	}
	free(mem);
	free(in);
	free(out);
	return bad;
}

/* A receive layout: drawn until it overlaps nowhere (a contiguous one after 16 tries). */
static MPI_Datatype receive_layout(struct rng *r, MPI_Datatype basic, int bsz, int m, char *desc,
				   size_t dlen)
{
	int tries;

	for (tries = 0; tries < 16; tries++) {
		MPI_Datatype t = layout(r, basic, bsz, m, 1, 0, desc, dlen);

		if (!overlaps(t))
			return t;
		MPI_Type_free(&t);
	}
	MPI_Datatype t;

	MPI_Type_contiguous(m, basic, &t);
	MPI_Type_commit(&t);
	snprintf(desc, dlen, "contig(%d)", m);
	return t;
}

/* --- buffers -------------------------------------------------------------------------------- */

/* Memory for @count elements of @t with a margin; .ptr is what the call gets. */
struct buf {
	char *mem;
	size_t len;
	char *ptr;
};

static void span(MPI_Datatype t, int count, MPI_Aint *lo, MPI_Aint *hi)
{
	MPI_Aint lb, ext, tlb, text;

	MPI_Type_get_extent(t, &lb, &ext);
	MPI_Type_get_true_extent(t, &tlb, &text);
	*lo = 0;
	*hi = 0;
	if (count == 0)
		return;
	MPI_Aint first = tlb, last = tlb + (MPI_Aint)(count - 1) * ext;

	*lo = first < last ? first : last;
	*hi = (first > last ? first : last) + text;
}

static void buf_make(struct buf *b, MPI_Datatype t, int count, unsigned char fill)
{
	MPI_Aint lo, hi;

	span(t, count, &lo, &hi);
	b->len = (size_t)(hi - lo) + 64;
	b->mem = malloc(b->len);
	memset(b->mem, fill, b->len);
	b->ptr = b->mem + 32 - lo;
}

static void buf_copy(struct buf *dst, const struct buf *src)
{
	dst->len = src->len;
	dst->mem = malloc(src->len);
	memcpy(dst->mem, src->mem, src->len);
	dst->ptr = dst->mem + (src->ptr - src->mem);
}

static void buf_free(struct buf *b)
{
	free(b->mem);
	b->mem = NULL;
}

/* Reductions: C's and Fortran's predefined types, each with an op MPI defines on it, and how
 * an element is made (element_value): 'i' int, 'l' 64-bit int, 'f' float, 'd' double, 'c'/'z'
 * complex of float/double, 'b' LOGICAL (0 or 1), 'p'/'q'/'r' MINLOC/MAXLOC pairs of
 * int/float/double. Values are integers and halves, so sums are exact in any order: the
 * interposer's result must equal the MPI's bitwise. The data-moving collectives use int. */
struct red {
	MPI_Datatype t;
	MPI_Op op;
	const char *name;
	char kind;
	int size;
};
#define NRED 14

/* The reductions drawn from; with TYPE_FUZZ_SAME_MPI only int and double (sum_put's). */
static int reductions(struct red *out)
{
	const struct red all[NRED] = {
		{ MPI_INT, MPI_SUM, "int", 'i', 4 },
		{ MPI_DOUBLE, MPI_SUM, "double", 'd', 8 },
		{ MPI_INTEGER, MPI_SUM, "INTEGER", 'i', 4 },
		{ MPI_DOUBLE_PRECISION, MPI_SUM, "DOUBLE PRECISION", 'd', 8 },
		{ MPI_REAL8, MPI_MAX, "REAL8 (MAX)", 'd', 8 },
		{ MPI_REAL, MPI_SUM, "REAL", 'f', 4 },
		{ MPI_INTEGER8, MPI_SUM, "INTEGER8", 'l', 8 },
		{ MPI_COMPLEX, MPI_SUM, "COMPLEX", 'c', 8 },
		{ MPI_DOUBLE_COMPLEX, MPI_SUM, "DOUBLE COMPLEX", 'z', 16 },
		{ MPI_LOGICAL, MPI_LOR, "LOGICAL (LOR)", 'b', 4 },
		{ MPI_LOGICAL, MPI_LXOR, "LOGICAL (LXOR)", 'b', 4 },
		{ MPI_2INTEGER, MPI_MINLOC, "2INTEGER (MINLOC)", 'p', 8 },
		{ MPI_2REAL, MPI_MAXLOC, "2REAL (MAXLOC)", 'q', 8 },
		{ MPI_2DOUBLE_PRECISION, MPI_MINLOC, "2DOUBLE_PRECISION (MINLOC)", 'r', 16 },
	};
	const int n = g_same_mpi ? 2 : NRED;

	memcpy(out, all, sizeof(all[0]) * (size_t)n);
	return n;
}

/* Element @i of kind @kind (struct red) of the buffer tagged @tag (rank, block). */
static void element_value(char *p, char kind, int i, int tag)
{
	switch (kind) {
	case 'd':
	case 'z': {
		double v[2] = { tag * 1000003.0 + i * 0.5, tag * 7.0 - i * 0.5 };

		memcpy(p, v, kind == 'd' ? 8 : 16);
		break;
	}
	case 'f':
	case 'c': {
		float v[2] = { (float)((tag * 31 + i) % 4000) * 0.5f, (float)(tag % 50) - 0.5f };

		memcpy(p, v, kind == 'f' ? 4 : 8);
		break;
	}
	case 'l': {
		long long v = tag * 10000000019LL + i;

		memcpy(p, &v, 8);
		break;
	}
	case 'b': {
		int v = (tag + i) % 3 != 0;

		memcpy(p, &v, 4);
		break;
	}
	case 'p': {
		int v[2] = { (tag + i) % 5, tag };

		memcpy(p, v, 8);
		break;
	}
	case 'q': {
		float v[2] = { (float)((tag + i) % 5), (float)tag };

		memcpy(p, v, 8);
		break;
	}
	case 'r': {
		double v[2] = { (tag + i) % 5 - 0.5, tag };

		memcpy(p, v, 16);
		break;
	}
	default: {
		int v = tag * 1000003 + i;

		memcpy(p, &v, 4);
	}
	}
}

/* Fills the data elements (in type-map order) with values of (rank, block, element). */
static void buf_fill(struct buf *b, MPI_Datatype t, int count, char kind, int bsz, int tag)
{
	int tsize, n, pos = 0, i;

	MPI_Type_size(t, &tsize);
	n = tsize / bsz * count;
	if (n == 0)
		return;
	char *vals = malloc((size_t)n * bsz);
	for (i = 0; i < n; i++)
		element_value(vals + (size_t)i * bsz, kind, i, tag);
	MPI_Unpack(vals, n * bsz, &pos, b->ptr, count, t, MPI_COMM_SELF);
	free(vals);
}

/* What MPI's definition says lands in a receive buffer: @nelem elements of @t from element
 * @elem0 get the sender's packed bytes from basic element @value0 on, by MPI_Unpack, which
 * follows the type map. The reference for the data-moving collectives (MPICH 4.0.2's own
 * Allgather misplaces blocks of some negative-stride receive types). */
static void expect_put(struct buf *b, MPI_Datatype t, int elem0, int nelem, const char *stream,
		       int bsz, int value0)
{
	int tsize, pos = 0;
	MPI_Aint lb, ext;

	MPI_Type_size(t, &tsize);
	MPI_Type_get_extent(t, &lb, &ext);
	if (tsize == 0 || nelem == 0)
		return;
	MPI_Unpack(stream + (size_t)value0 * bsz, tsize * nelem, &pos,
		   b->ptr + (MPI_Aint)elem0 * ext, nelem, t, MPI_COMM_SELF);
}

/* Every rank's data as MPI_Pack makes it (its type map's order): streams[r] of rank r. */
struct streams {
	char *all;
	int *len, *off;
};

static void streams_make(struct streams *st, const char *buf, int count, MPI_Datatype t,
			 MPI_Comm comm, int size)
{
	int bytes = 0, pos = 0, i;

	MPI_Pack_size(count, t, MPI_COMM_SELF, &bytes);
	char *mine = malloc((size_t)bytes + 1);
	MPI_Pack(buf, count, t, mine, bytes, &pos, MPI_COMM_SELF);
	st->len = calloc((size_t)size, sizeof(int));
	st->off = calloc((size_t)size, sizeof(int));
	PMPI_Allgather(&pos, 1, MPI_INT, st->len, 1, MPI_INT, comm);
	int total = 0;
	for (i = 0; i < size; i++) {
		st->off[i] = total;
		total += st->len[i];
	}
	st->all = malloc((size_t)total + 1);
	PMPI_Allgatherv(mine, pos, MPI_BYTE, st->all, st->len, st->off, MPI_BYTE, comm);
	free(mine);
}

static void streams_free(struct streams *st)
{
	free(st->all);
	free(st->len);
	free(st->off);
}

/* The MPI_SUM of @count elements of predefined @basic over @size ranks' operands, @in (their
 * packed bytes, contiguous), into @b. */
static void sum_put(struct buf *b, MPI_Datatype basic, int count, const struct streams *in,
		    int size)
{
	for (int i = 0; i < count; i++) {
		double d = 0;
		int v = 0;

		for (int r = 0; r < size; r++) {
			const char *p = in->all + in->off[r];

			if (basic == MPI_DOUBLE) {
				double x;

				memcpy(&x, p + (size_t)i * sizeof(x), sizeof(x));
				d += x;
			} else {
				int x;

				memcpy(&x, p + (size_t)i * sizeof(x), sizeof(x));
				v += x;
			}
		}
		if (basic == MPI_DOUBLE)
			memcpy(b->ptr + (size_t)i * sizeof(d), &d, sizeof(d));
		else
			memcpy(b->ptr + (size_t)i * sizeof(v), &v, sizeof(v));
	}
}

static int buf_differs(const struct buf *a, const struct buf *b)
{
	return a->len != b->len || memcmp(a->mem, b->mem, a->len) != 0;
}

static void buf_same(const struct buf *got, const struct buf *want, const char *what)
{
	for (size_t i = 0; i < got->len; i++) {
		if (got->mem[i] != want->mem[i]) {
			fail("%s: byte %ld (from the call's pointer) is 0x%02x, expected 0x%02x",
			     what, (long)((want->mem + i) - want->ptr), (unsigned char)got->mem[i],
			     (unsigned char)want->mem[i]);
			return;
		}
	}
}

/* --- the generated cases -------------------------------------------------------------------- */

enum coll { BCAST, REDUCE, ALLREDUCE, GATHER, SCATTER, ALLGATHER, ALLTOALL, GATHERV, SCATTERV,
	    ALLGATHERV, ALLTOALLV, NCOLL };
static const char *const coll_name[NCOLL] = { "Bcast", "Reduce", "Allreduce", "Gather", "Scatter",
	"Allgather", "Alltoall", "Gatherv", "Scatterv", "Allgatherv", "Alltoallv" };
static const int counts[] = { 0, 1, 2, 3, 7, 64, 255, 1024, 2048, 5000, 16384 };

/* The gap after each block of a v-collective's receive layout on rank @rank. */
static int v_gap(int c, int rank)
{
	return c == ALLGATHERV ? 1 + rank % 3 : 1;
}

/* Reductions the interposer ran through libshaddr so far (its counters), or 0 without it. */
static uint64_t lib_reductions(void)
{
	int (*get)(struct shaddr_interpose_stats *) =
		(int (*)(struct shaddr_interpose_stats *))dlsym(RTLD_DEFAULT,
								 "shaddr_interpose_get_stats");
	struct shaddr_interpose_stats st;

	if (!get || get(&st))
		return 0;
	return st.accelerated[SHADDR_IP_REDUCE] + st.accelerated[SHADDR_IP_ALLREDUCE];
}

static void one_case(struct rng *shared, struct rng *mine)
{
	enum coll c = (enum coll)pick(shared, NCOLL);
	int reduction = c == REDUCE || c == ALLREDUCE;
	struct red reds[NRED];
	const int nred = reductions(reds);
	const struct red red = reds[reduction ? pick(shared, nred) : 0];
	MPI_Datatype basic = red.t;
	int bsz = red.size;
	int m = 1 + pick(shared, 4);
	int count = counts[pick(shared, (int)(sizeof(counts) / sizeof(counts[0])))];
	int comm_kind = pick(shared, 3);
	/* Debian's MPICH 4.0.2 chooses its Allgatherv algorithm from each rank's own receive
	 * type: when the ranks' receive layouts differ it hangs (stock, from 3 ranks and some
	 * 48 KiB, or at 2 ranks for some pairs of layouts). There every rank receives alike. */
	struct rng alike = { next(shared) };
	int in_place = pick(shared, 4) == 0;
	unsigned root_pick = (unsigned)(next(shared) >> 33);
	MPI_Comm comm;
	int rank, size;
	char sdesc[200], rdesc[200];

	if (comm_kind == 0) {
		comm = MPI_COMM_WORLD;
	} else if (comm_kind == 1) {
		MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	} else {
		/* Two groups when there are enough ranks, ranks in shuffled order. */
		int color = g_size >= 3 ? g_rank % 2 : 0;
		uint64_t key = next(shared) ^ (uint64_t)g_rank * 0x9e3779b97f4a7c15ull;

		MPI_Comm_split(MPI_COMM_WORLD, color, (int)(key % 1000), &comm);
	}
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	const int root = (int)(root_pick % (unsigned)size);
	/* Keep every case small enough for 4 ranks on 2 cores. */
	while ((long)count * m * bsz * size > 4L << 20)
		count /= 2;

	/* Reductions: one predefined type everywhere (MPI requires the same datatype on every
	 * rank, and not every MPI reduces derived types). Others: each rank its own layout. */
	MPI_Datatype st, rt;
	if (reduction) {
		count *= m;
		st = rt = basic;
		snprintf(sdesc, sizeof(sdesc), "%s", red.name);
		snprintf(rdesc, sizeof(rdesc), "%s", sdesc);
	} else {
		st = layout(mine, basic, bsz, m, 0, 0, sdesc, sizeof(sdesc));
		rt = receive_layout(c == ALLGATHERV && !g_open_mpi ? &alike : mine, basic, bsz, m,
				    rdesc, sizeof(rdesc));
	}

	int is_root = rank == root;
	int scount = count, rcount = count;
	int sblocks = 1, rblocks = 1;
	/* g_size entries drawn whatever this communicator's size, so that the shared stream stays
	 * the same on ranks of different split groups. */
	int *cnts = calloc((size_t)g_size, sizeof(int)), *dsp = calloc((size_t)size, sizeof(int));
	int *rcnts = calloc((size_t)size, sizeof(int)), *rdsp = calloc((size_t)size, sizeof(int));
	int i;

	switch (c) {
	case GATHER:
		rblocks = is_root ? size : 0;
		break;
	case SCATTER:
		sblocks = is_root ? size : 0;
		break;
	case ALLGATHER:
		rblocks = size;
		break;
	case ALLTOALL:
		sblocks = rblocks = size;
		break;
	default:
		break;
	}
	/* v-collectives: counts per rank from the shared stream (so every rank knows them), blocks
	 * placed in reverse rank order with a gap; an Allgatherv's gap is each rank's own (MPI
	 * lets the receivers' displacements differ), so its block i is at its own rank i's
	 * displacement dsp[i] + v_shift(i) in rank i's buffer. */
	int vtotal = 0;
	for (i = 0; i < g_size; i++)
		cnts[i] = (int)(next(shared) % (uint64_t)(count + 1));
	for (i = 0, vtotal = 0; i < size; i++) {
		dsp[size - 1 - i] = vtotal;
		vtotal += cnts[size - 1 - i] + v_gap(c, rank);
	}
	/* Alltoallv: rank p sends cnts[(p + q) % size] to q (every rank can compute it). */
	for (i = 0; i < size; i++) {
		rcnts[i] = cnts[(i + rank) % size];
		rdsp[i] = 0;
	}
	int off = 0;
	for (i = size - 1; i >= 0; i--) {
		rdsp[i] = off;
		off += rcnts[i] + 1;
	}
	int *a2a_scnt = calloc((size_t)size, sizeof(int)), *a2a_sdsp = calloc((size_t)size, sizeof(int));
	off = 0;
	for (i = 0; i < size; i++) {
		a2a_scnt[i] = cnts[(rank + i) % size];
		a2a_sdsp[i] = off;
		off += a2a_scnt[i] + 2;
	}

	int selems = scount * sblocks, relems = rcount * rblocks;
	if (c == GATHERV) {
		selems = cnts[rank];
		relems = is_root ? vtotal : 0;
	} else if (c == SCATTERV) {
		selems = is_root ? vtotal : 0;
		relems = cnts[rank];
	} else if (c == ALLGATHERV) {
		selems = cnts[rank];
		relems = vtotal;
	} else if (c == ALLTOALLV) {
		selems = off;
		relems = 0;
		for (i = 0; i < size; i++)
			relems = rdsp[i] + rcnts[i] > relems ? rdsp[i] + rcnts[i] : relems;
	}
	/* MPI_IN_PLACE where the collective allows it; for Allgather(v)/Alltoall(v)/Allreduce on
	 * every rank, for the rooted ones on the root. */
	int ip = 0;
	switch (c) {
	case ALLREDUCE:
	case ALLGATHER:
	case ALLGATHERV:
	case ALLTOALL:
		ip = in_place;
		break;
	case REDUCE:
		/* Debian's MPICH 4.0.2 faults in its own Reduce with MPI_IN_PLACE at a root other
		 * than rank 0 (2,048 doubles and more), and on a split whose ranks are reordered
		 * (stock, without any interposer): the reference run would not survive it. */
		ip = in_place && is_root && root == 0 && comm_kind != 2;
		break;
	case GATHER:
	case GATHERV:
	case SCATTER:
	case SCATTERV:
		ip = in_place && is_root;
		break;
	default:
		break;
	}

	struct buf sb = { 0 }, rb = { 0 }, sb2, rb2;
	buf_make(&sb, st, selems, 0xa5);
	buf_fill(&sb, st, selems, red.kind, bsz, rank + 1);
	buf_make(&rb, rt, relems, 0x5a);
	if (ip || c == BCAST)
		buf_fill(&rb, rt, relems, red.kind, bsz, rank + 101);
	if (c == BCAST) {
		/* Bcast's buffer: the root's send layout is its receive layout. */
		buf_free(&rb);
		buf_make(&rb, is_root ? st : rt, count, 0x5a);
		buf_fill(&rb, is_root ? st : rt, count, red.kind, bsz, is_root ? 7 : rank + 101);
	}
	if (c == GATHER && ip) { /* the root's own block already in place */
		buf_free(&rb);
		buf_make(&rb, rt, count * size, 0x5a);
		buf_fill(&rb, rt, count * size, red.kind, bsz, 55);
	}
	/* 2: the expected result; 3: what the MPI's own PMPI_* makes of the same call. */
	struct buf sb3, rb3;
	buf_copy(&sb2, &sb);
	buf_copy(&rb2, &rb);
	buf_copy(&sb3, &sb);
	buf_copy(&rb3, &rb);

	if (getenv("TYPE_FUZZ_TRACE"))
		fprintf(stderr, "rank %d case %d: %s count %d root %d ip %d %s / %s\n", g_rank, g_case,
			coll_name[c], count, root, ip, sdesc, rdesc);
	if (getenv("TYPE_FUZZ_TRACE") && (c == GATHERV || c == SCATTERV || c == ALLGATHERV))
		for (i = 0; i < size; i++)
			fprintf(stderr, "rank %d case %d: block %d: count %d displacement %d\n", g_rank,
				g_case, i, cnts[i], dsp[i]);
	const char *only = getenv("TYPE_FUZZ_CASE"); /* debugging: run this case alone */
	int skip = only && atoi(only) != g_case;
	const void *sp = ip ? MPI_IN_PLACE : sb.ptr, *sp2 = ip ? MPI_IN_PLACE : sb2.ptr;
	int rc1 = 0, rc2 = 0;
	uint64_t lib_before = 0;
	MPI_Datatype bt = is_root ? st : rt;

	int m_r; /* basic elements per receive element */
	{
		int ts;

		MPI_Type_size(rt, &ts);
		m_r = ts / bsz;
	}
	/* rb2 becomes the expected result: reductions by the MPI's own PMPI_* (with
	 * TYPE_FUZZ_SAME_MPI, the sum of every rank's packed operand: exact, the values are
	 * integers and halves), the others from the senders' packed data (expect_put). */
	struct streams in = { 0 };
	const int own_sum = reduction && g_same_mpi;
	if (!skip && (!reduction || own_sum)) {
		int from_recv = c == BCAST || (ip && (c == ALLGATHER || c == ALLGATHERV || c == ALLTOALL ||
						      reduction));

		streams_make(&in, from_recv ? rb.ptr : sb.ptr, from_recv ? (c == BCAST ? count : relems) : selems,
			     from_recv ? (c == BCAST ? bt : rt) : st, comm, size);
	}
#define FROM(r) (in.all + in.off[r])
	switch (skip ? NCOLL : c) {
	case BCAST:
		rc1 = MPI_Bcast(rb.ptr, count, bt, root, comm);
		if (!is_root)
			expect_put(&rb2, rt, 0, count, FROM(root), bsz, 0);
		break;
	case REDUCE:
		lib_before = lib_reductions();
		rc1 = MPI_Reduce(ip ? MPI_IN_PLACE : sb.ptr, is_root ? rb.ptr : NULL, count, st,
				 red.op, root, comm);
		if (own_sum && is_root)
			sum_put(&rb2, basic, count, &in, size);
		else if (!own_sum)
			rc2 = PMPI_Reduce(ip ? MPI_IN_PLACE : sb2.ptr, is_root ? rb2.ptr : NULL, count,
					  st, red.op, root, comm);
		break;
	case ALLREDUCE:
		lib_before = lib_reductions();
		rc1 = MPI_Allreduce(sp, rb.ptr, count, st, red.op, comm);
		if (own_sum)
			sum_put(&rb2, basic, count, &in, size);
		else
			rc2 = PMPI_Allreduce(sp2, rb2.ptr, count, st, red.op, comm);
		break;
	case GATHER:
		rc1 = MPI_Gather(sp, scount, st, rb.ptr, rcount, rt, root, comm);
		for (i = 0; is_root && i < size; i++)
			if (!(ip && i == root))
				expect_put(&rb2, rt, i * rcount, rcount, FROM(i), bsz, 0);
		break;
	case SCATTER:
		rc1 = MPI_Scatter(sb.ptr, scount, st, ip ? MPI_IN_PLACE : rb.ptr, rcount, rt, root, comm);
		if (!ip)
			expect_put(&rb2, rt, 0, rcount, FROM(root), bsz, rank * rcount * m_r);
		break;
	case ALLGATHER:
		rc1 = MPI_Allgather(sp, scount, st, rb.ptr, rcount, rt, comm);
		for (i = 0; i < size; i++)
			expect_put(&rb2, rt, i * rcount, rcount, FROM(i), bsz,
				   ip ? i * rcount * m_r : 0);
		break;
	case ALLTOALL:
		rc1 = MPI_Alltoall(sp, scount, st, rb.ptr, rcount, rt, comm);
		for (i = 0; i < size; i++)
			expect_put(&rb2, rt, i * rcount, rcount, FROM(i), bsz, rank * rcount * m_r);
		break;
	case GATHERV:
		rc1 = MPI_Gatherv(sp, cnts[rank], st, rb.ptr, cnts, dsp, rt, root, comm);
		for (i = 0; is_root && i < size; i++)
			if (!(ip && i == root))
				expect_put(&rb2, rt, dsp[i], cnts[i], FROM(i), bsz, 0);
		break;
	case SCATTERV:
		rc1 = MPI_Scatterv(sb.ptr, cnts, dsp, st, ip ? MPI_IN_PLACE : rb.ptr, cnts[rank], rt,
				   root, comm);
		if (!ip)
			expect_put(&rb2, rt, 0, cnts[rank], FROM(root), bsz, dsp[rank] * m_r);
		break;
	case ALLGATHERV:
		rc1 = MPI_Allgatherv(sp, cnts[rank], st, rb.ptr, cnts, dsp, rt, comm);
		for (i = 0; i < size; i++) {
			/* in place, block i comes from rank i's own buffer, at its displacement */
			const int theirs = dsp[i] + (size - 1 - i) * (v_gap(c, i) - v_gap(c, rank));

			expect_put(&rb2, rt, dsp[i], cnts[i], FROM(i), bsz, ip ? theirs * m_r : 0);
		}
		break;
	case ALLTOALLV:
		rc1 = MPI_Alltoallv(sb.ptr, a2a_scnt, a2a_sdsp, st, rb.ptr, rcnts, rdsp, rt, comm);
		for (i = 0; i < size; i++) {
			/* Rank i's block for this rank: after the blocks it sends to ranks before. */
			int j, from = 0;

			for (j = 0; j < rank; j++)
				from += cnts[(i + j) % size] + 2;
			expect_put(&rb2, rt, rdsp[i], rcnts[i], FROM(i), bsz, from * m_r);
		}
		break;
	default:
		break;
	}
#undef FROM
	/* TYPE_FUZZ_EXPECT_LIB=1 (one node, SHADDR_MIN=0): each of these predefined types and ops,
	 * C's and Fortran's, is libshaddr's to reduce, never forwarded. */
	if (g_expect_lib && reduction && !skip && count > 0 && size > 1 &&
	    lib_reductions() == lib_before)
		fail("%s %s count %d: forwarded, not run by libshaddr", coll_name[c], red.name, count);
	if (!skip && (!reduction || own_sum))
		streams_free(&in);
	/* The MPI's own result where the expectation is computed: where the MPI itself is wrong
	 * (MPICH 4.0.2 with some negative-extent types), the interposer may be wrong alike, but
	 * never otherwise (the case is counted). */
	const void *sp3 = ip ? MPI_IN_PLACE : sb3.ptr;
	int rc3 = MPI_SUCCESS;
	switch (skip || reduction ? NCOLL : c) {
	case BCAST:
		rc3 = PMPI_Bcast(rb3.ptr, count, bt, root, comm);
		break;
	case GATHER:
		rc3 = PMPI_Gather(sp3, scount, st, rb3.ptr, rcount, rt, root, comm);
		break;
	case SCATTER:
		rc3 = PMPI_Scatter(sb3.ptr, scount, st, ip ? MPI_IN_PLACE : rb3.ptr, rcount, rt, root,
				   comm);
		break;
	case ALLGATHER:
		rc3 = PMPI_Allgather(sp3, scount, st, rb3.ptr, rcount, rt, comm);
		break;
	case ALLTOALL:
		rc3 = PMPI_Alltoall(sp3, scount, st, rb3.ptr, rcount, rt, comm);
		break;
	case GATHERV:
		rc3 = PMPI_Gatherv(sp3, cnts[rank], st, rb3.ptr, cnts, dsp, rt, root, comm);
		break;
	case SCATTERV:
		rc3 = PMPI_Scatterv(sb3.ptr, cnts, dsp, st, ip ? MPI_IN_PLACE : rb3.ptr, cnts[rank], rt,
				    root, comm);
		break;
	case ALLGATHERV:
		rc3 = PMPI_Allgatherv(sp3, cnts[rank], st, rb3.ptr, cnts, dsp, rt, comm);
		break;
	case ALLTOALLV:
		rc3 = PMPI_Alltoallv(sb3.ptr, a2a_scnt, a2a_sdsp, st, rb3.ptr, rcnts, rdsp, rt, comm);
		break;
	default:
		break;
	}
	const int stock_wrong = !reduction && (rc3 != MPI_SUCCESS || buf_differs(&rb3, &rb2));
	if (stock_wrong)
		g_stock_wrong++;
	char what[600];
	snprintf(what, sizeof(what), "%s count %d root %d comm %d%s send %s recv %s",
		 coll_name[c], count, root, comm_kind, ip ? " in-place" : "", sdesc, rdesc);
	if (g_same_mpi) {
		/* MPICH 4.0.2's own wrong results with negative-extent types vary from call to
		 * call (the same case right or wrong per run, MPI_* or PMPI_*), so a wrong case
		 * is listed and the driver judges it by the collective and mode */
		const int wrong = rc1 != rc2 || buf_differs(&rb, &rb2) || buf_differs(&sb, &sb2);

		if (wrong || stock_wrong)
			printf("type_fuzz rank %d: case %d: wrong (MPI_*: %s, PMPI_*: %s): %s\n",
			       g_rank, g_case, wrong ? "wrong" : "right",
			       stock_wrong ? "wrong" : "right", what);
		goto judged;
	}
	if (stock_wrong && rc1 == rc3 && !buf_differs(&rb, &rb3))
		rc1 = rc2 = MPI_SUCCESS; /* as the MPI itself does: judged no further */
	if (rc1 != rc2)
		fail("%s: returned %d, expected %d (the MPI's own: %d)", what, rc1, rc2, rc3);
	char w2[700];
	snprintf(w2, sizeof(w2), "%s: receive buffer", what);
	if (!(stock_wrong && rc1 == MPI_SUCCESS && !buf_differs(&rb, &rb3)))
		buf_same(&rb, &rb2, w2);
	snprintf(w2, sizeof(w2), "%s: send buffer", what);
	buf_same(&sb, &sb2, w2);
judged:
	buf_free(&sb);
	buf_free(&rb);
	buf_free(&sb2);
	buf_free(&rb2);
	buf_free(&sb3);
	buf_free(&rb3);
	free(cnts);
	free(dsp);
	free(rcnts);
	free(rdsp);
	free(a2a_scnt);
	free(a2a_sdsp);
	if (!reduction) {
		MPI_Type_free(&st);
		MPI_Type_free(&rt);
	}
	if (comm != MPI_COMM_WORLD)
		MPI_Comm_free(&comm);
}

static int run_types(int cases, double seconds)
{
	struct rng shared = { g_seed }, mine = { g_seed * 31 + (uint64_t)g_rank * 0x100000001ull + 7 };
	double t0 = MPI_Wtime();
	int done = 0;

	for (g_case = 0; g_case < cases; g_case++) {
		int go = MPI_Wtime() - t0 < seconds;

		PMPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD); /* every rank stops together */
		if (!go)
			break;
		one_case(&shared, &mine);
		done++;
	}
	int errors = g_errors, all = 0, wrong = 0;
	PMPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	PMPI_Allreduce(&g_stock_wrong, &wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("type_fuzz types: seed %llu, %d cases, %d ranks (%d rank-cases where the MPI's "
		       "own collective is wrong): %s\n",
		       g_seed, done, g_size, wrong, all ? "FAILED" : "ok");
	return all ? 1 : 0;
}

/* --- count mismatches ----------------------------------------------------------------------- */

/* @bytes of memory that end right before a PROT_NONE page. */
static char *guarded(size_t bytes, unsigned char fill)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (bytes + page - 1) / page * page;
	char *p = mmap(NULL, len + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	mprotect(p + len, page, PROT_NONE);
	memset(p, fill, len);
	return p + len - bytes;
}

static void unguard(char *p, size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (bytes + page - 1) / page * page;
	char *base = p + bytes - len;

	munmap(base, len + page);
}

/* One erroneous call; @n ints is the size class. Each rank prints its error class. */
static void mismatch_case(const char *name, int n)
{
	MPI_Comm comm;
	int rank, size, rc = MPI_SUCCESS, cls;

	/* TYPE_FUZZ_MISMATCH_COMM=reversed: each case on a new communicator of the ranks in
	 * reverse order, a group the interposer has met before from the second case on (its set-up
	 * must not depend on the erroneous call's counts). */
	const char *kind = getenv("TYPE_FUZZ_MISMATCH_COMM");
	if (kind && !strcmp(kind, "reversed"))
		MPI_Comm_split(MPI_COMM_WORLD, 0, g_size - g_rank, &comm);
	else
		MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	const int small = n / 2 > 0 ? n / 2 : 1;
	const int odd = rank == size - 1; /* the rank with the other count */
	const size_t big = (size_t)n * 4 * (size_t)size;
	char *s = guarded(big, 1), *r = guarded(big, 2);
	/* Each call gets pointers whose ends are at the guard page for the count it passes. */
#define S(cnt) (s + big - (size_t)(cnt) * 4)
#define R(cnt) (r + big - (size_t)(cnt) * 4)
#define R_SHORT(cnt) (r + big - (size_t)(cnt) * 2)

	/* TYPE_FUZZ_MISMATCH_REPEAT=2: the erroneous call twice on the communicator, the second
	 * time after the first set it up (the patched MPICH decides a call on a communicator
	 * with a plan in its dispatch: the first call of a new one goes the other way). */
	const char *again = getenv("TYPE_FUZZ_MISMATCH_REPEAT");
	const int calls = again && atoi(again) == 2 ? 2 : 1;
	for (int call = 0; call < calls; call++) {
		if (!strcmp(name, "bcast-recv-smaller")) {
			int cnt = rank == 0 ? n : small;
			rc = MPI_Bcast(R(cnt), cnt, MPI_INT, 0, comm);
		} else if (!strcmp(name, "bcast-recv-larger")) {
			int cnt = rank == 0 ? small : n;
			rc = MPI_Bcast(R(cnt), cnt, MPI_INT, 0, comm);
		} else if (!strcmp(name, "bcast-smaller-type")) {
			rc = MPI_Bcast(rank == 0 ? R(n) : R_SHORT(n), n, rank == 0 ? MPI_INT : MPI_SHORT, 0,
				       comm);
		} else if (!strcmp(name, "scatter-root-recv-smaller")) {
			int rcnt = rank == 0 ? small : n;
			rc = MPI_Scatter(S((size_t)n * size), n, MPI_INT, R(rcnt), rcnt, MPI_INT, 0, comm);
		} else if (!strcmp(name, "scatter-recv-smaller")) {
			int rcnt = rank == 0 ? n : small;
			rc = MPI_Scatter(S((size_t)n * size), n, MPI_INT, R(rcnt), rcnt, MPI_INT, 0, comm);
		} else if (!strcmp(name, "gather-root-send-smaller")) {
			int scnt = rank == 0 ? small : n;
			rc = MPI_Gather(S(scnt), scnt, MPI_INT, R((size_t)n * size), n, MPI_INT, 0, comm);
		} else if (!strcmp(name, "gather-send-larger")) {
			int scnt = odd ? n : small;
			rc = MPI_Gather(S(scnt), scnt, MPI_INT, R((size_t)small * size), small, MPI_INT, 0,
					comm);
		} else if (!strcmp(name, "allgather-send-smaller")) {
			int scnt = odd ? small : n;
			rc = MPI_Allgather(S(scnt), scnt, MPI_INT, R((size_t)n * size), n, MPI_INT, comm);
		} else if (!strcmp(name, "alltoall-one-rank-smaller")) {
			int cnt = odd ? small : n;
			rc = MPI_Alltoall(S((size_t)cnt * size), cnt, MPI_INT, R((size_t)cnt * size), cnt,
					  MPI_INT, comm);
		} else if (!strcmp(name, "reduce-counts-differ")) {
			int cnt = odd ? small : n;
			rc = MPI_Reduce(S(cnt), rank == 0 ? R(cnt) : NULL, cnt, MPI_INT, MPI_SUM, 0, comm);
		} else if (!strcmp(name, "reduce-integer-counts-differ")) {
			/* a Fortran type libshaddr reduces, counts as in reduce-counts-differ */
			int cnt = odd ? small : n;
			rc = MPI_Reduce(S(cnt), rank == 0 ? R(cnt) : NULL, cnt, MPI_INTEGER, MPI_SUM, 0,
					comm);
		} else if (!strcmp(name, "allreduce-logical-sum")) {
			/* an op MPI does not define on LOGICAL: on every rank */
			rc = MPI_Allreduce(S(n), R(n), n, MPI_LOGICAL, MPI_SUM, comm);
		} else if (!strcmp(name, "allreduce-counts-differ")) {
			int cnt = odd ? small : n;
			rc = MPI_Allreduce(S(cnt), R(cnt), cnt, MPI_INT, MPI_SUM, comm);
		} else if (!strcmp(name, "allreduce-aliased")) {
			/* the send buffer is the receive buffer, not MPI_IN_PLACE: on every rank */
			rc = MPI_Allreduce(R(n), R(n), n, MPI_INT, MPI_SUM, comm);
		} else if (!strcmp(name, "alltoall-aliased")) {
			rc = MPI_Alltoall(R((size_t)n * size), n, MPI_INT, R((size_t)n * size), n, MPI_INT,
					  comm);
		} else if (!strcmp(name, "allgather-recv-in-place")) {
			/* MPI_IN_PLACE where only the send buffer may have it: on every rank */
			rc = MPI_Allgather(S(n), n, MPI_INT, MPI_IN_PLACE, n, MPI_INT, comm);
		} else if (!strcmp(name, "alltoall-recv-in-place")) {
			rc = MPI_Alltoall(S((size_t)n * size), n, MPI_INT, MPI_IN_PLACE, n, MPI_INT, comm);
		} else if (!strcmp(name, "allreduce-recv-in-place")) {
			rc = MPI_Allreduce(S(n), MPI_IN_PLACE, n, MPI_INT, MPI_SUM, comm);
		} else if (!strcmp(name, "allgatherv-recv-in-place") ||
			   !strcmp(name, "alltoallv-recv-in-place")) {
			int *cnt = malloc(sizeof(int) * 2 * (size_t)size), *dsp = cnt + size;

			for (int i = 0; i < size; i++) {
				cnt[i] = n;
				dsp[i] = i * n;
			}
			if (name[3] == 'g')
				rc = MPI_Allgatherv(S(n), n, MPI_INT, MPI_IN_PLACE, cnt, dsp, MPI_INT,
						    comm);
			else
				rc = MPI_Alltoallv(S((size_t)n * size), cnt, dsp, MPI_INT, MPI_IN_PLACE,
						   cnt, dsp, MPI_INT, comm);
			free(cnt);
		} else if (!strncmp(name, "uncommitted-", 12)) {
			/* a derived type never committed, on every rank: n ints in one element */
			MPI_Datatype t;

			MPI_Type_contiguous(n, MPI_INT, &t);
			if (!strcmp(name, "uncommitted-bcast"))
				rc = MPI_Bcast(R(n), 1, t, 0, comm);
			else if (!strcmp(name, "uncommitted-allgather-recv"))
				rc = MPI_Allgather(S(n), n, MPI_INT, R((size_t)n * size), 1, t, comm);
			else if (!strcmp(name, "uncommitted-alltoall-send"))
				rc = MPI_Alltoall(S((size_t)n * size), 1, t, R((size_t)n * size), n,
						  MPI_INT, comm);
			MPI_Type_free(&t);
		}
		MPI_Error_class(rc, &cls);
		printf("mismatch %s n=%d rank %d%s: class %d\n", name, n, rank, call ? " again" : "",
		       cls);
		fflush(stdout);
	}
#undef S
#undef R
#undef R_SHORT
	unguard(s, big);
	unguard(r, big);
	/* Whatever the erroneous call left behind stays on its communicator. */
	MPI_Comm_free(&comm);
	PMPI_Barrier(MPI_COMM_WORLD);
}

static const char *const mismatch_names[] = {
	"bcast-recv-smaller", "bcast-recv-larger", "bcast-smaller-type",
	"scatter-root-recv-smaller", "scatter-recv-smaller", "gather-root-send-smaller",
	"gather-send-larger", "allgather-send-smaller", "alltoall-one-rank-smaller",
	"reduce-counts-differ", "allreduce-counts-differ", "allreduce-aliased", "alltoall-aliased",
	"uncommitted-bcast", "uncommitted-allgather-recv", "uncommitted-alltoall-send",
	"allgather-recv-in-place", "alltoall-recv-in-place", "allreduce-recv-in-place",
	"allgatherv-recv-in-place", "alltoallv-recv-in-place", "reduce-integer-counts-differ",
	"allreduce-logical-sum",
};

/* In a comma-separated list? */
static int listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && !strncmp(p, name, n))
			return 1;
		p = end ? end + 1 : NULL;
	}
	return 0;
}

static int run_mismatch(const char *only, const char *skip)
{
	static const int sizes[] = { 16, 2048, 65536 };

	for (size_t k = 0; k < sizeof(mismatch_names) / sizeof(mismatch_names[0]); k++)
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
			if ((!only || listed(only, mismatch_names[k])) &&
			    !listed(skip, mismatch_names[k]))
				mismatch_case(mismatch_names[k], sizes[z]);
	return 0;
}

int main(int argc, char **argv)
{
	int cases = 400, rc;
	double seconds = 90;
	const char *mode = argc > 1 ? argv[1] : "types", *only = NULL, *skip = NULL;

	const char *env_seed = getenv("SHADDR_TYPE_FUZZ_SEED");
	const char *same_mpi = getenv("TYPE_FUZZ_SAME_MPI");

	g_same_mpi = same_mpi && atoi(same_mpi);
	g_expect_lib = getenv("TYPE_FUZZ_EXPECT_LIB") && atoi(getenv("TYPE_FUZZ_EXPECT_LIB"));

	g_seed = env_seed && *env_seed ? strtoull(env_seed, NULL, 0) :
					 (unsigned long long)time(NULL) ^ (unsigned long long)getpid() << 20;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			g_seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--cases") && i + 1 < argc)
			cases = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--skip") && i + 1 < argc)
			skip = argv[++i];
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_size);
	PMPI_Bcast(&g_seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
	if (!strcmp(mode, "types")) {
		/* An error of the MPI's own (it cannot do some of these types) is compared too. */
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		if (g_rank == 0)
			fprintf(stderr, "type_fuzz types: seed %llu (SHADDR_TYPE_FUZZ_SEED replays it)\n",
				g_seed);
		rc = run_types(cases, seconds);
	} else if (!strcmp(mode, "mismatch")) {
		rc = run_mismatch(only, skip);
	} else {
		if (g_rank == 0)
			fprintf(stderr, "usage: type_fuzz types|mismatch [--seed S] [--cases N] "
					"[--seconds T] [--only CASES] [--skip CASES]\n");
		rc = 2;
	}
	MPI_Finalize();
	return rc;
}
