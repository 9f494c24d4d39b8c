/* SPDX-License-Identifier: MIT */
/*
 * MPI_BOTTOM with absolute addresses on either side of the data-moving collectives (Bcast,
 * Gather, Scatter, Allgather, Alltoall): a side so described has its blocks of ints in a
 * shuffled order with holes between them, named by a struct type of absolute addresses
 * (MPI_Get_address), resized so that each rank's block is one element of it, and passes
 * MPI_BOTTOM as the buffer; the other side of the same rank is a plain contiguous buffer.
 * Which side uses MPI_BOTTOM alternates between ranks and rounds. The type signature is the
 * same on every rank, so the program is correct MPI. Each result is checked element by
 * element against the values the senders put in, in type-map order, and the holes must keep
 * their fill. Short (16 ints) and long (256 Ki ints per block: libshaddr's single-copy paths)
 * messages; the root moves every round.
 *
 *   bottom [--rounds N]     exit 0 when every check passed on every rank
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILL (-7777)
#define BLOCKS 8

static int g_rank, g_size, g_errors;

/* Rank @r's @i-th sent value (element i of its type map). */
static int value(int r, int i, int round)
{
	return r * 1000003 + i * 7 + round;
}

/* @regions regions of @n ints each, every region as BLOCKS blocks in one shuffled order with a
 * hole of 3 ints after each block; its type describes region 0 by absolute addresses, resized
 * so that region q is element q of it (count 1 per region, from MPI_BOTTOM). */
struct scattered {
	int *mem;
	size_t len;	   /* ints in mem */
	size_t region_len; /* ints per region */
	int n;		   /* ints per region */
	int bidx[BLOCKS];  /* type-map block k lives at memory block bidx[k] */
	MPI_Datatype type;
};

static int *elem_at(const struct scattered *s, int i)
{
	int per = s->n / BLOCKS, q = i / s->n, j = i % s->n, k = j / per;

	return s->mem + (size_t)q * s->region_len + (size_t)s->bidx[k] * (per + 3) + j % per;
}

static void scattered_make(struct scattered *s, int n, int regions, unsigned seed)
{
	int per = n / BLOCKS, k;
	MPI_Aint disp[BLOCKS], lb, extent;
	int lens[BLOCKS];
	MPI_Datatype types[BLOCKS], whole;

	s->n = n;
	s->region_len = (size_t)BLOCKS * (per + 3);
	s->len = s->region_len * (size_t)regions;
	s->mem = malloc(s->len * sizeof(int));
	for (size_t i = 0; i < s->len; i++)
		s->mem[i] = FILL;
	for (k = 0; k < BLOCKS; k++)
		s->bidx[k] = k;
	for (k = BLOCKS - 1; k > 0; k--) { /* Sattolo's shuffle: no block stays in place */
		int j = (int)(seed % (unsigned)k);
		int t = s->bidx[k];

		seed = seed * 1103515245u + 12345u;
		s->bidx[k] = s->bidx[j];
		s->bidx[j] = t;
	}
	for (k = 0; k < BLOCKS; k++) {
		MPI_Get_address(elem_at(s, k * per), &disp[k]);
		lens[k] = per;
		types[k] = MPI_INT;
	}
	MPI_Type_create_struct(BLOCKS, lens, disp, types, &whole);
	MPI_Type_get_extent(whole, &lb, &extent);
	MPI_Type_create_resized(whole, lb, (MPI_Aint)(s->region_len * sizeof(int)), &s->type);
	MPI_Type_free(&whole);
	MPI_Type_commit(&s->type);
}

static void scattered_free(struct scattered *s)
{
	MPI_Type_free(&s->type);
	free(s->mem);
}

/* @got at element @at (-1: not an element) must be @want. */
static void check(const char *what, int at, int got, int want)
{
	if (got != want && g_errors++ < 400)
		fprintf(stderr, "bottom rank %d: %s: element %d is %d, expected %d\n", g_rank, what, at,
			got, want);
}

/* One rank's side of a call: its buffer of @n ints (contiguous, or scattered behind
 * MPI_BOTTOM), what to pass for it, and element access in type-map order. */
struct side {
	int bottom;
	int regions;
	struct scattered s;
	int *plain;
};

/* @regions blocks of @n ints (one per rank for the gathering and scattering sides) */
static void side_make(struct side *d, int bottom, int n, int regions, unsigned seed)
{
	d->bottom = bottom;
	d->regions = regions;
	if (bottom) {
		scattered_make(&d->s, n, regions, seed);
	} else {
		d->plain = malloc((size_t)n * regions * sizeof(int));
		for (int i = 0; i < n * regions; i++)
			d->plain[i] = FILL;
	}
}

static int *side_at(struct side *d, int i)
{
	return d->bottom ? elem_at(&d->s, i) : &d->plain[i];
}

static void *side_buf(struct side *d)
{
	return d->bottom ? MPI_BOTTOM : d->plain;
}

/* The count of one block (a region) of @n ints. */
static int side_count(const struct side *d, int n)
{
	return d->bottom ? 1 : n;
}

static MPI_Datatype side_type(const struct side *d)
{
	return d->bottom ? d->s.type : MPI_INT;
}

/* The holes of a scattered side kept their fill. */
static void side_holes(struct side *d, const char *what)
{
	if (!d->bottom)
		return;
	int per = d->s.n / BLOCKS;

	for (int q = 0; q < d->regions; q++)
		for (int b = 0; b < BLOCKS; b++)
			for (int h = 0; h < 3; h++) {
				int v = d->s.mem[(size_t)q * d->s.region_len + (size_t)b * (per + 3) +
						 per + h];

				check(what, -1, v, FILL);
			}
}

static void side_free(struct side *d)
{
	if (d->bottom)
		scattered_free(&d->s);
	else
		free(d->plain);
}

/* The data-moving collectives: a reduction takes one datatype for both buffers of a rank, so
 * MPI_BOTTOM with absolute addresses leaves it only MPI_IN_PLACE, on a derived type, which not
 * every MPI reduces (type_fuzz reduces predefined types). */
enum coll { BCAST, GATHER, SCATTER, ALLGATHER, ALLTOALL, NCOLL };
static const char *const names[NCOLL] = { "Bcast", "Gather", "Scatter", "Allgather", "Alltoall" };

/* Every collective with @blk ints per rank (per block for the gathering ones); the ranks for
 * which (rank + round) is odd use MPI_BOTTOM, the others a contiguous buffer. */
static void one_round(int blk, int round)
{
	const int root = round % g_size;
	const int me_bottom = (g_rank + round) % 2;
	const int p = g_size;
	char what[128];

	for (int c = 0; c < NCOLL; c++) {
		/* Blocks of blk ints on each side: one, or one per rank. */
		int sreg = c == SCATTER || c == ALLTOALL ? p : 1;
		int rreg = c == GATHER || c == ALLGATHER || c == ALLTOALL ? p : 1;
		struct side s, r;
		unsigned seed = (unsigned)(round * 7919 + c * 31 + g_rank * 17 + 1);

		side_make(&s, me_bottom, blk, sreg, seed);
		side_make(&r, !me_bottom, blk, rreg, seed ^ 0x5bd1e995u);
		for (int i = 0; i < blk * sreg; i++)
			*side_at(&s, i) = value(g_rank, i, round);
		snprintf(what, sizeof(what), "%s of %d ints, root %d, %s send, %s receive", names[c],
			 blk, root, s.bottom ? "MPI_BOTTOM" : "plain",
			 r.bottom ? "MPI_BOTTOM" : "plain");
		const int sc = side_count(&s, blk), rcnt = side_count(&r, blk);
		const MPI_Datatype st = side_type(&s), rt = side_type(&r);
		int rc = MPI_SUCCESS;

		switch (c) {
		case BCAST: /* one buffer: the root's send side is its receive side */
			rc = MPI_Bcast(side_buf(&s), sc, st, root, MPI_COMM_WORLD);
			break;
		case GATHER:
			rc = MPI_Gather(side_buf(&s), sc, st, side_buf(&r), rcnt, rt, root,
					MPI_COMM_WORLD);
			break;
		case ALLGATHER:
			rc = MPI_Allgather(side_buf(&s), sc, st, side_buf(&r), rcnt, rt,
					   MPI_COMM_WORLD);
			break;
		case SCATTER:
			rc = MPI_Scatter(side_buf(&s), sc, st, side_buf(&r), rcnt, rt, root,
					 MPI_COMM_WORLD);
			break;
		case ALLTOALL:
			rc = MPI_Alltoall(side_buf(&s), sc, st, side_buf(&r), rcnt, rt, MPI_COMM_WORLD);
			break;
		}
		check(what, -1, rc, MPI_SUCCESS);
		/* Block q of what this rank received: from the root (Bcast, Scatter) or rank q,
		 * the sender's elements from this rank's block on (Scatter, Alltoall) or from 0. */
		struct side *in = c == BCAST ? &s : &r;
		const int receives = c != GATHER || g_rank == root;
		for (int q = 0; receives && q < rreg; q++)
			for (int i = 0; i < blk; i++) {
				const int from = c == BCAST || c == SCATTER ? root : q;
				const int first = c == SCATTER || c == ALLTOALL ? g_rank * blk : 0;

				check(what, q * blk + i, *side_at(in, q * blk + i),
				      value(from, first + i, round));
			}
		side_holes(&s, what);
		side_holes(&r, what);
		side_free(&s);
		side_free(&r);
	}
}

int main(int argc, char **argv)
{
	int rounds = 4, all = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[++i]);
	for (int round = 0; round < rounds; round++) {
		one_round(16, round);
		one_round(256 * 1024, round);
	}
	MPI_Allreduce(&g_errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("bottom: %d ranks, %d rounds, every collective short and long: %s (%d wrong)\n",
		       g_size, rounds, all ? "FAILED" : "ok", all);
	MPI_Finalize();
	return all ? 1 : 0;
}
