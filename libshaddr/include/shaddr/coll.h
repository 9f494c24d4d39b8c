/* SPDX-License-Identifier: MIT */
/*
 * libshaddr C API: node communicators and single-copy collectives.
 *
 * A node communicator groups the processes of one node (struct shaddr_host names them). Every
 * collective below is called by all of its ranks with matching arguments, as in MPI. Data
 * arguments are plain byte ranges: a caller with non-contiguous data packs it first or calls
 * once per contiguous piece (the interposer and the MPICH patch do this).
 *
 * Return values: 0, or a negative errno. Argument errors that every rank sees alike (a root out
 * of range, an unsupported op/type pair) are reported by every rank before any rank waits, so
 * the caller can fall back to another implementation collectively. A failure during the
 * transfer (a peer's buffer is not readable, a mapping cannot be made) makes the call return
 * the same negative errno on every rank, with the receive buffers in an unspecified state,
 * except that in-place input (SHADDR_IN_PLACE) is as it was before the call, so a caller that
 * falls back re-runs the whole collective on the original input. A NULL buffer with a non-zero size on
 * one rank only is -EFAULT on that rank; the others then wait, as they would in MPI.
 * shaddr_last_error() says why a call failed.
 */
#ifndef SHADDR_COLL_H
#define SHADDR_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "shaddr/host.h"
#include "shaddr/shaddr.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shaddr_comm shaddr_comm_t;

/*
 * Element types of reductions, by representation. The MINLOC/MAXLOC pair types have the layout
 * of the C structs MPI defines for MPI_FLOAT_INT etc. (value, then int index; padded as C pads);
 * SHADDR_2FLOAT and SHADDR_2DOUBLE are Fortran's MPI_2REAL and MPI_2DOUBLE_PRECISION, whose
 * index has the value's type.
 */
enum shaddr_dtype {
	SHADDR_BYTE,		/* bitwise ops only */
	SHADDR_INT8,
	SHADDR_UINT8,
	SHADDR_INT16,
	SHADDR_UINT16,
	SHADDR_INT32,
	SHADDR_UINT32,
	SHADDR_INT64,
	SHADDR_UINT64,
	SHADDR_FLOAT,
	SHADDR_DOUBLE,
	SHADDR_LONG_DOUBLE,
	SHADDR_C_FLOAT_COMPLEX,
	SHADDR_C_DOUBLE_COMPLEX,
	SHADDR_C_LONG_DOUBLE_COMPLEX,
	SHADDR_C_BOOL,
	SHADDR_FLOAT_INT,
	SHADDR_DOUBLE_INT,
	SHADDR_LONG_INT,
	SHADDR_2INT,
	SHADDR_SHORT_INT,
	SHADDR_LONG_DOUBLE_INT,
	SHADDR_2FLOAT,
	SHADDR_2DOUBLE,
	SHADDR_DTYPE_COUNT
};

/* Reduction operations: MPI's predefined ones, with MPI's rules on which types they accept. */
enum shaddr_op {
	SHADDR_OP_SUM,
	SHADDR_OP_PROD,
	SHADDR_OP_MIN,
	SHADDR_OP_MAX,
	SHADDR_OP_LAND,
	SHADDR_OP_LOR,
	SHADDR_OP_LXOR,
	SHADDR_OP_BAND,
	SHADDR_OP_BOR,
	SHADDR_OP_BXOR,
	SHADDR_OP_MINLOC,
	SHADDR_OP_MAXLOC,
	SHADDR_OP_COUNT
};

/* Collectives, for statistics and per-collective settings. */
enum shaddr_coll {
	SHADDR_COLL_BARRIER,
	SHADDR_COLL_BCAST,
	SHADDR_COLL_REDUCE,
	SHADDR_COLL_ALLREDUCE,
	SHADDR_COLL_GATHER,
	SHADDR_COLL_SCATTER,
	SHADDR_COLL_ALLGATHER,
	SHADDR_COLL_ALLTOALL,
	SHADDR_COLL_COUNT
};

/* Pass as a send buffer for MPI_IN_PLACE semantics (where MPI allows it). */
#define SHADDR_IN_PLACE ((const void *)-1)

/* What runs. */
enum shaddr_algo {
	SHADDR_ALGO_FALLBACK,		/* the caller's fallback, not libshaddr */
	SHADDR_ALGO_NONE,		/* nothing to move (one rank, zero bytes): libshaddr returns */
	SHADDR_ALGO_FIFO,		/* Bcast through the node's FIFO: two copies, no barrier */
	SHADDR_ALGO_SLOTS,		/* the control block's slots: two copies, no barrier */
	SHADDR_ALGO_DIRECT,		/* one copy out of the peers' own buffers */
	SHADDR_ALGO_STREAMS,		/* Bcast in streams relayed by non-roots */
	SHADDR_ALGO_RING,		/* Allgather ring: each rank reads its left neighbour */
	SHADDR_ALGO_PARTITIONED,	/* Reduce/Allreduce: each rank reduces one slice */
	SHADDR_ALGO_ROOT,		/* Reduce: the root reads and combines every operand */
	SHADDR_ALGO_BARRIER,		/* Barrier on the control block's counters */
	SHADDR_ALGO_COUNT
};

/**
 * struct shaddr_comm_stats - what a node communicator has done (this rank's view)
 * @calls: collectives run by libshaddr, per enum shaddr_coll
 * @bytes: payload bytes this rank moved (read or published), per enum shaddr_coll
 * @fifo_calls: of @calls, those that succeeded through the Bcast FIFO or the slots
 * @failures: of @calls, those that returned an error once the collective had started (argument
 *            errors found on entry are not counted here, nor -EXDEV: the ranks' calls differed)
 * @cache_hits: registration-cache hits over all peers
 * @cache_misses: registration-cache misses (each cost a mapping system call)
 * @cache_evictions: mappings evicted to make room
 * @cache_refusals: transfers that copied because every mapping was in use
 * @bytes_mapped: bytes of peers' memory currently mapped
 * @heap_transfers: reads and mappings of peers' memory served from their heap files (the heap
 *                  layer: a pointer into a mapping made once; no system call, no cache)
 * @heap_bytes: bytes of @heap_transfers
 * @heap_exposures: this rank's buffers exposed from its own heap (nothing pinned or staged)
 * @heap_peers: peers whose heap this rank maps (0: the heap layer is off)
 * @runs: of @calls that moved data, per collective the algorithm that ran (the plan's step,
 *        shaddr_plan; the v-variants other than Allgatherv always run "direct")
 */
struct shaddr_comm_stats {
	uint64_t calls[SHADDR_COLL_COUNT];
	uint64_t bytes[SHADDR_COLL_COUNT];
	uint64_t fifo_calls;
	uint64_t failures;
	uint64_t cache_hits;
	uint64_t cache_misses;
	uint64_t cache_evictions;
	uint64_t cache_refusals;
	uint64_t bytes_mapped;
	uint64_t heap_transfers;
	uint64_t heap_bytes;
	uint64_t heap_exposures;
	uint64_t heap_peers;
	uint64_t runs[SHADDR_COLL_COUNT][SHADDR_ALGO_COUNT];
};

/**
 * shaddr_comm_create() - make a node communicator (collective over @host)
 * @host: rank, size and the allgather/barrier callbacks; used only during this call
 * @out: receives the communicator
 *
 * Chooses a backend (SHADDR_BACKEND, default the best available) and creates the node control
 * block. Under SHADDR_VERBOSE=1, rank 0 prints the backend and why it was chosen.
 * Return: 0 on every rank, or the same negative errno on every rank: -EINVAL (NULL or
 * inconsistent arguments), -ENOENT/-EPERM/... (no backend usable), -ENOMEM.
 */
SHADDR_API int shaddr_comm_create(const struct shaddr_host *host, shaddr_comm_t **out);

/**
 * shaddr_comm_free() - free this rank's side of a node communicator
 *
 * Local: it waits for no peer, so ranks may free at different times, also inside another
 * communicator's collective. Every collective on @comm must have returned on this rank.
 * Passing NULL is a no-op. Return: 0.
 */
SHADDR_API int shaddr_comm_free(shaddr_comm_t *comm);

/* The token of a call that this rank runs in its own MPI instead (shaddr_call_agree()). */
#define SHADDR_CALL_FORWARDED ((uint64_t)0)

/**
 * shaddr_call_agree() - record one collective call and agree on it with every rank
 * @comm: the node communicator
 * @token: a digest of what MPI requires to be equal on every rank for this call (the
 *         collective, the root, the bytes of the type signature, a reduction's type and op),
 *         never 0; or SHADDR_CALL_FORWARDED for a call this rank runs elsewhere
 *
 * For a caller that may run a call either in libshaddr or in its own implementation, and takes
 * that choice from values that should be equal on every rank but, in an erroneous program, are
 * not (count mismatches). Every rank records every call, in the same order: with
 * SHADDR_CALL_FORWARDED it returns at once; otherwise it waits for every peer's record of the
 * same call. Nothing is copied and no buffer is touched.
 * Return: 0 when every rank recorded @token: the caller may run the libshaddr collective;
 * -EXDEV on every rank that asked when a token differs or a rank forwarded the call: each of
 * them runs the call in its own implementation with its own arguments, as the forwarding ranks
 * do, which then reports the mismatch as it would without libshaddr; -EOWNERDEAD (a peer
 * died), -EINVAL (NULL @comm).
 */
SHADDR_API int shaddr_call_agree(shaddr_comm_t *comm, uint64_t token);

/**
 * shaddr_call_announce() - shaddr_call_agree() whose wait the next collective does
 * @comm: the node communicator
 * @token: as for shaddr_call_agree(), never SHADDR_CALL_FORWARDED
 *
 * Records the call and returns at once. The collective this rank calls next on @comm settles
 * the agreement before it reads a peer's data or writes its output; a short one (the slots)
 * after publishing this rank's own part, so that its wait for the peers' records overlaps with
 * theirs for its data and a call costs one exchange instead of two. When the ranks' records
 * differ that collective returns -EXDEV on every rank that announced, with its buffers as
 * they were, and each runs the call in its own implementation as with shaddr_call_agree().
 * A caller that does not call a collective next (it changed its mind) records its next call
 * with shaddr_call_agree() or shaddr_call_announce(), which settle this one first.
 * Return: 0, -EINVAL (NULL @comm, or @token SHADDR_CALL_FORWARDED).
 */
SHADDR_API int shaddr_call_announce(shaddr_comm_t *comm, uint64_t token);

/** shaddr_comm_rank(), shaddr_comm_size() - -EINVAL for NULL. */
SHADDR_API int shaddr_comm_rank(const shaddr_comm_t *comm);
SHADDR_API int shaddr_comm_size(const shaddr_comm_t *comm);

/**
 * shaddr_comm_backend() - "window", "segment", "cma" or "shm", prefixed with "heap+" where the
 * heap layer serves peers' heap buffers over it; "" for NULL.
 */
SHADDR_API const char *shaddr_comm_backend(const shaddr_comm_t *comm);

/** shaddr_comm_stats() - copy the statistics. 0 or -EINVAL. */
SHADDR_API int shaddr_comm_get_stats(const shaddr_comm_t *comm, struct shaddr_comm_stats *st);

/** shaddr_dtype_size() - bytes per element of @type, or -EINVAL. */
SHADDR_API int shaddr_dtype_size(enum shaddr_dtype type);

/**
 * shaddr_op_supported() - can libshaddr reduce @type with @op?
 * Return: 0; -ENOTSUP when MPI does not define @op on @type; -EINVAL for values out of range.
 */
SHADDR_API int shaddr_op_supported(enum shaddr_op op, enum shaddr_dtype type);

/*
 * Selection: whether a collective should run in libshaddr or in the caller's own
 * implementation (the fallback), and which of libshaddr's algorithms would run, with the
 * model's times: the question the plan answers for every size at once (the plan below), asked
 * for one call, to explain it (shaddr-tune). Callers decide their calls by the plan, through
 * shaddr_call_route().
 */

/* The implementation a caller runs when it does not call libshaddr, whose measured cost the
 * answer weighs against libshaddr's. */
enum shaddr_fallback {
	SHADDR_FALLBACK_NONE,		/* none: answer only which algorithm libshaddr runs */
	SHADDR_FALLBACK_MPICH,		/* MPICH's own collectives through PMPI (interposer) */
	SHADDR_FALLBACK_OPENMPI,	/* Open MPI's own collectives through PMPI (interposer) */
	SHADDR_FALLBACK_MPICH_POSIX,	/* MPICH ch4 posix release_gather (the MPICH patch) */
	SHADDR_FALLBACK_COUNT
};


/**
 * struct shaddr_select_query - one collective call, as every rank of the node sees it
 * @coll: the collective
 * @bytes: Bcast, Reduce, Allreduce: the message; Gather, Scatter, Allgather, Alltoall: one
 *         rank's block. MPI makes it equal on every rank.
 * @reducible: Reduce/Allreduce: 1 when libshaddr can reduce the datatype with the op
 *             (shaddr_op_supported() == 0); 0 makes the answer the fallback
 * @in_place: Allreduce, Allgather, Alltoall: MPI_IN_PLACE (MPI makes it all or none; an
 *            in-place partitioned Allreduce keeps a copy of its input, which the model counts)
 * @fallback: what the caller runs otherwise
 *
 * Only what is equal on every rank enters the answer, so that every rank decides alike without
 * talking: not contiguity (a rank packs its own non-contiguous data before calling), not
 * Reduce's in-place (the root's alone).
 */
struct shaddr_select_query {
	enum shaddr_coll coll;
	size_t bytes;
	int reducible;
	int in_place;
	enum shaddr_fallback fallback;
};

/**
 * struct shaddr_selection - the answer
 * @algo: SHADDR_ALGO_FALLBACK (call the fallback), or the algorithm libshaddr will run
 * @shaddr_us: the model's time of @algo in libshaddr (also when the fallback won)
 * @fallback_us: the model's time of the fallback (0 with SHADDR_FALLBACK_NONE or no model)
 * @why: one short static sentence
 */
struct shaddr_selection {
	enum shaddr_algo algo;
	double shaddr_us;
	double fallback_us;
	const char *why;
};

/**
 * shaddr_select() - libshaddr or the fallback, and which algorithm
 * @comm: the node communicator the call would run on (its backend, node size and settings)
 * @q: the call
 * @out: the answer
 *
 * The cost model (docs/selection.md) compares libshaddr's algorithm on @comm's backend with
 * the fallback, from measured alpha-beta lines: shipped ones measured on a reference machine,
 * replaced by `model.` lines of the tuning file (shaddr-tune for libshaddr's side, make run /
 * shaddr-compare --model for the fallbacks'). The model is agreed when @comm is created, so
 * every rank gets the same answer. No system call, no allocation: cheap on every call.
 * Return: 0; -EINVAL for NULL or out-of-range arguments.
 */
SHADDR_API int shaddr_select(const shaddr_comm_t *comm, const struct shaddr_select_query *q,
			     struct shaddr_selection *out);

/** shaddr_algo_name() - "fifo", "direct", ... ("?" out of range). */
SHADDR_API const char *shaddr_algo_name(enum shaddr_algo algo);

/*
 * The plan: what runs, per collective and size, on one node communicator. Built from the cost
 * model (calibrated on this machine where a calibration exists), the collectives' own rules and
 * the user's SHADDR_MIN_<COLL> settings, all agreed when the communicator is created, so the
 * plan is identical on every rank. It is the only policy: libshaddr's collectives run the
 * algorithm it names, and a caller with a fallback (the interposer, the patched MPICH) routes
 * each call by it (shaddr_call_route() below) and runs its own collective where the step says
 * so.
 */

/* Variants of a collective's plan: flags of shaddr_plan_lookup(). */
#define SHADDR_PLAN_IN_PLACE	1u	/* Allreduce with MPI_IN_PLACE (copies its input first) */
#define SHADDR_PLAN_SEGMENTED	2u	/* shaddr_bcast_segmented() */

/* Tables of a plan: one per collective, then the variants. */
enum shaddr_plan_table_id {
	SHADDR_PLAN_ALLREDUCE_IN_PLACE = SHADDR_COLL_COUNT,
	SHADDR_PLAN_BCAST_SEGMENTED,
	SHADDR_PLAN_TABLES
};

#define SHADDR_PLAN_MAX_STEPS 32

/**
 * struct shaddr_plan_step - one size range of a collective's plan
 * @upto: the range's largest size (bytes as in shaddr_select_query); SIZE_MAX in the last step
 * @algo: the algorithm libshaddr runs at these sizes (SHADDR_ALGO_NONE: nothing to move)
 * @use_fallback: 1 where the caller's own collective runs instead: the model measured it
 *                faster, or a SHADDR_MIN_<COLL> setting sends these sizes to it
 * @shaddr_us: the model's time of @algo at @upto (0: no curve)
 * @fallback_us: the model's time of the fallback at @upto (0: no curve or no fallback)
 */
struct shaddr_plan_step {
	size_t upto;
	enum shaddr_algo algo;
	int use_fallback;
	double shaddr_us;
	double fallback_us;
};

/**
 * struct shaddr_plan_table - one collective's steps, by increasing size
 * @nsteps: steps in use (at least 1)
 * @steps: ranges [previous upto + 1, upto]; the first starts at 0
 */
struct shaddr_plan_table {
	int nsteps;
	struct shaddr_plan_step steps[SHADDR_PLAN_MAX_STEPS];
};

/**
 * struct shaddr_plan_limits - the sizes the plan decided besides its tables
 * @slot_max: per-rank data up to this many bytes goes through the control block's slots
 *            (SHADDR_SLOT_MAX, else its default for the node size; at most the slots' capacity;
 *            on a heap+ backend, unless set, below the heap's 16 KiB)
 * @bcast_fifo_max: a Bcast up to this many bytes goes through the Bcast FIFO
 *                  (SHADDR_BCAST_FIFO_MAX, else the backend's: 256 KiB on cma, below the
 *                  heap's 16 KiB on heap+cma and heap+shm, 16 KiB elsewhere)
 * @hier_segment: across several nodes, the piece size of the leaders' pipelined Bcast
 *                (SHADDR_INTERPOSE_SEGMENT); 0 in a plan that weighs no fallback with a
 *                hierarchy (none, mpich-posix), whose caller has none
 * @hier_mesh_max: across several nodes, Alltoall blocks up to this many bytes go through the
 *                 leaders' 2D virtual mesh (SHADDR_INTERPOSE_MESH_MAX); 0 where @hier_segment is
 * @bcast_levels_min: a Bcast of at least this many bytes goes down the plan's topology levels
 *                    (root, one leader per domain, the domain's ranks from their leader): the
 *                    sizes of the copy path ("direct"), where the plan keeps a level and the
 *                    backend does not stage; 0: none (a flat plan).
 * @allgather_levels_min: an Allgather(v) whose largest block has at least this many bytes reads
 *                        each block across the coarsest level once per group (one rank of the
 *                        group reads it from its owner, the group's others from that rank):
 *                        the copy path's sizes ("direct", not the ring), where the plan keeps a
 *                        level, the backend does not stage and the node has at most 255 ranks;
 *                        0: none.
 * @reduce_levels_min: a Reduce of at least this many bytes a rank that takes the partitioned
 *                     path folds each slice down the rank-order chain of the coarsest level (the
 *                     runs of consecutive ranks in one domain, each starting from the previous
 *                     run's partial result), where that chain crosses between domains less than
 *                     the flat reduction's reads, the backend does not stage and the node has at
 *                     most 255 ranks; 0: none.
 * @allreduce_levels_min: the same for an Allreduce (whose result then crosses back once per
 *                        group); the model can put the two apart. Appended last.
 */
struct shaddr_plan_limits {
	size_t slot_max;
	size_t bcast_fifo_max;
	size_t hier_segment;
	size_t hier_mesh_max;
	size_t bcast_levels_min;
	size_t allgather_levels_min;
	size_t reduce_levels_min;
	size_t allreduce_levels_min;
};

/* A level of the node's topology (docs/topology.md), coarse to fine. */
enum shaddr_level {
	SHADDR_LEVEL_PACKAGE,
	SHADDR_LEVEL_NUMA,
	SHADDR_LEVEL_L3,
	SHADDR_LEVEL_L2,
	SHADDR_LEVEL_COUNT
};

/**
 * struct shaddr_plan_level - a level of the topology the plan groups the node's ranks by
 * @level: enum shaddr_level
 * @same_as: bits (1 << enum shaddr_level) of the levels that split the ranks as this one does
 *           (folded into it)
 * @groups: its number of groups of ranks (at least 2)
 *
 * Which group each rank is in is the node communicator's (equal on every rank), not the plan's:
 * a plan is shared by every communicator with its digest.
 */
struct shaddr_plan_level {
	enum shaddr_level level;
	unsigned int same_as;
	int groups;
};

/**
 * struct shaddr_plan - a node communicator's plan against one fallback
 * @fallback: the fallback it weighs (SHADDR_FALLBACK_NONE: libshaddr at every size)
 * @ranks: node size
 * @digest: hash of every step: equal plans have equal digests (callers over several nodes
 *          agree on it)
 * @calibrated: 1 when the model's curves came from a calibration of this machine
 * @tables: indexed by enum shaddr_coll, then enum shaddr_plan_table_id
 * @lib_from: indexed by enum shaddr_coll, the smallest size any of the collective's tables
 *            sends to libshaddr (SIZE_MAX: none); a smaller call goes to the caller's own
 *            collective whatever its flags, so a caller forwards it without a lookup
 *            (appended last, so that the fields before keep their places)
 * @limits: the sizes the collectives' rules turn at and the hierarchy's across nodes (appended
 *          after @lib_from, for the same reason)
 * @nlevels: the topology levels the plan groups the ranks by (0: flat), from the ranks'
 *           locations and SHADDR_TOPOLOGY (appended last)
 * @levels: coarse to fine, each nested in the one before
 *
 * Plain data: a caller may copy it and keep it after the communicator is freed.
 */
struct shaddr_plan {
	enum shaddr_fallback fallback;
	int ranks;
	uint64_t digest;
	int calibrated;
	struct shaddr_plan_table tables[SHADDR_PLAN_TABLES];
	size_t lib_from[SHADDR_COLL_COUNT];
	struct shaddr_plan_limits limits;
	int nlevels;
	struct shaddr_plan_level levels[SHADDR_LEVEL_COUNT];
};

/**
 * shaddr_comm_plan() - @comm's plan against @fallback
 *
 * Built on the first request for each fallback (no communication: its inputs were agreed when
 * @comm was made) and kept with @comm. Return: the plan, valid until shaddr_comm_free(); NULL
 * with an out-of-range argument.
 */
SHADDR_API const struct shaddr_plan *shaddr_comm_plan(shaddr_comm_t *comm,
						      enum shaddr_fallback fallback);

/**
 * shaddr_plan_lookup() - the step of @plan for a call of @coll on @bytes
 * @flags: SHADDR_PLAN_IN_PLACE (Allreduce), SHADDR_PLAN_SEGMENTED (Bcast); others ignored
 *
 * Return: the step; NULL with an out-of-range argument.
 */
SHADDR_API const struct shaddr_plan_step *shaddr_plan_lookup(const struct shaddr_plan *plan,
							     enum shaddr_coll coll, size_t bytes,
							     unsigned int flags);

/**
 * shaddr_plan_format() - @plan as text, one line per table ("bcast: 1-4K slots, 4K-64K fifo,
 * 64K- mpi"), then one of its limits ("limits: slot_max 16K, bcast_fifo_max 16K, hier_segment
 * 256K, hier_mesh_max 64"), then one of its levels ("levels: flat", "levels: numa 2 groups;
 * bcast from 16385"), into @buf of @len bytes (NUL-terminated, truncated to fit).
 * Return: the length the whole text needs, as snprintf().
 */
SHADDR_API int shaddr_plan_format(const struct shaddr_plan *plan, char *buf, size_t len);

/**
 * shaddr_plan_intern() - a library-owned copy of @plan, shared by every plan equal to it
 *
 * For a caller that decides calls by a plan it did not get from a node communicator of its
 * own (an interposer rank alone on its node, which takes the plan of a rank with one): the
 * library keeps it, by digest, until the process exits. Return: the copy; NULL for a NULL
 * @plan, a plan with no steps (ranks 0), or no memory.
 */
SHADDR_API const struct shaddr_plan *shaddr_plan_intern(const struct shaddr_plan *plan);

/*
 * The per-call entry: what a caller with a fallback (the interposer, the patched MPICH) does on
 * every collective call it could hand to libshaddr. One place decides (a compare with the
 * plan's lib_from, then one lookup), records the call in the node's call ledger (forwarded, or
 * announced with a token the library makes from the call), and hands the chosen step to the
 * libshaddr collective the caller calls next, which runs it without looking the plan up again.
 */

/* Flags of struct shaddr_call, beside the plan's SHADDR_PLAN_IN_PLACE and SHADDR_PLAN_SEGMENTED */
#define SHADDR_CALL_V		0x100u	/* the v-variant (Gatherv, ...): its token differs from
					 * the plain call's */
#define SHADDR_CALL_UNSIZED	0x200u	/* no size is equal on every rank (Gatherv, Scatterv,
					 * Alltoallv): no lookup, libshaddr runs it */
#define SHADDR_CALL_FALLBACK	0x400u	/* the caller runs it in its own collective whatever the
					 * plan says (a setting, or arguments libshaddr cannot
					 * carry out on this rank): recorded as forwarded */
#define SHADDR_CALL_PREPARE	0x800u	/* a call for libshaddr is not recorded yet: the caller
					 * prepares its buffers, then shaddr_call_commit() */

/* What shaddr_call_route() and shaddr_call_decide() answer */
#define SHADDR_ROUTE_FALLBACK	0	/* the caller runs its own collective */
#define SHADDR_ROUTE_LIBSHADDR	1	/* the caller calls the libshaddr collective next */

/* @extra of a Reduce or Allreduce: its element type and op */
#define SHADDR_CALL_EXTRA_REDUCE(dtype, op) ((uint64_t)(dtype) << 8 | (uint64_t)(op))

/**
 * struct shaddr_call - one collective call, as the plan and the call ledger see it
 * @coll: the collective (Gatherv is SHADDR_COLL_GATHER with SHADDR_CALL_V, and so on)
 * @flags: SHADDR_PLAN_* (the plan's variant) and SHADDR_CALL_*
 * @bytes: as the plan keys them (struct shaddr_select_query's @bytes; Allgatherv: the mean
 *         block, at least 1); 0 goes to the fallback
 * @root: rooted collectives: the root; else -1
 * @extra: anything else MPI requires equal on every rank: a reduction's
 *         SHADDR_CALL_EXTRA_REDUCE(); a v-call's digest of every count where every rank knows
 *         them (Allgatherv); else 0
 * @step: out: the plan's step for the call; NULL where none was looked up (a call shorter than
 *        any the plan gives libshaddr, SHADDR_CALL_UNSIZED, SHADDR_CALL_FALLBACK, no plan)
 * @lib_any: out: 1 when the plan sends some size of @coll to libshaddr; 0: every call of it
 *           goes to the fallback whatever its arguments, so a caller that agrees on calls
 *           itself (over several nodes) need not agree on this one
 *
 * @coll, @flags, @bytes, @root and @extra are the call's token (shaddr_call_token()).
 */
struct shaddr_call {
	enum shaddr_coll coll;
	unsigned int flags;
	size_t bytes;
	int root;
	uint64_t extra;
	const struct shaddr_plan_step *step;
	int lib_any;
};

/**
 * shaddr_call_route() - decide one call, record it in @comm's ledger, hand the step down
 * @comm: the node communicator
 * @fallback: the caller's own collectives (the plan against them: shaddr_comm_plan())
 * @call: the call; @step and @lib_any are set
 *
 * A call below the plan's lib_from for @coll is forwarded on that compare alone; a longer one
 * by one lookup. A forwarded call is recorded as shaddr_call_agree(SHADDR_CALL_FORWARDED)
 * does (no wait). A call for libshaddr is announced as shaddr_call_announce() does, with
 * shaddr_call_token(@call), unless @flags has SHADDR_CALL_PREPARE: then nothing is recorded
 * and the caller, once its buffers are ready, calls shaddr_call_commit(). The libshaddr
 * collective the caller then calls on @comm for this call runs @call->step's algorithm without
 * a second lookup; it settles the agreement and returns -EXDEV where the ranks' calls differ.
 * A Barrier has no arguments to differ, is decided alike on every rank and is not recorded.
 * Return: SHADDR_ROUTE_FALLBACK or SHADDR_ROUTE_LIBSHADDR; -EINVAL for NULL or out-of-range
 * arguments (nothing recorded).
 */
SHADDR_API int shaddr_call_route(shaddr_comm_t *comm, enum shaddr_fallback fallback,
				 struct shaddr_call *call);

/**
 * shaddr_call_commit() - record a call that shaddr_call_route() sent to libshaddr with
 * SHADDR_CALL_PREPARE
 * @ready: 1: this rank's buffers are ready: the call is announced with shaddr_call_token(@call)
 *         and the caller calls the libshaddr collective next; 0: this rank cannot carry it out
 *         in libshaddr (e.g. no memory for a packed copy): recorded as forwarded, and every
 *         rank ends up in its fallback
 * Return: SHADDR_ROUTE_LIBSHADDR (@ready) or SHADDR_ROUTE_FALLBACK; -EINVAL (NULL).
 */
SHADDR_API int shaddr_call_commit(shaddr_comm_t *comm, const struct shaddr_call *call, int ready);

/**
 * shaddr_call_decide() - shaddr_call_route()'s decision on @plan, recording nothing
 *
 * For a caller that agrees on its calls itself (an interposer over several nodes, with
 * shaddr_call_token()). Return: as shaddr_call_route(); SHADDR_ROUTE_FALLBACK for a NULL plan.
 */
SHADDR_API int shaddr_call_decide(const struct shaddr_plan *plan, struct shaddr_call *call);

/**
 * shaddr_call_token() - @call's ledger token: a digest of @coll, the variant flags
 * (SHADDR_PLAN_*, SHADDR_CALL_V), @bytes, @root and @extra; never SHADDR_CALL_FORWARDED.
 * Equal calls have equal tokens on every rank (and in every process of one build).
 */
SHADDR_API uint64_t shaddr_call_token(const struct shaddr_call *call);

/**
 * shaddr_calibration_path() - where this machine's calibration is read from
 * @buf: receives the path (NUL-terminated, truncated to fit)
 * @len: size of @buf
 *
 * $SHADDR_CALIBRATION when set (a file; "off" reads none), else
 * ${XDG_CACHE_HOME:-$HOME/.cache}/shaddr/calibration/<machine key>.model, the key naming the
 * CPU model, the online CPUs, the memory and the kernel release. The file holds `model.` and
 * `point.` lines as SHADDR_TUNING_FILE does (`shaddr-model calibrate` writes it); the model
 * reads it over the shipped curves and under the tuning file.
 * Return: the length the whole path needs, as snprintf(); -ENOENT when no path can be formed
 * (no $HOME); -EINVAL for a NULL @buf with a non-zero @len.
 */
SHADDR_API int shaddr_calibration_path(char *buf, size_t len);

SHADDR_API int shaddr_barrier(shaddr_comm_t *comm);

/* @bytes must be equal on every rank. */
SHADDR_API int shaddr_bcast(shaddr_comm_t *comm, void *buf, size_t bytes, int root);

/**
 * shaddr_bcast_ready_fn - root side of a segmented Bcast: return once
 * [offset, offset + bytes) of the root's buffer holds its final data (for example, once that
 * segment arrived from another node). 0, or a negative errno to abort the Bcast.
 */
typedef int (*shaddr_bcast_ready_fn)(size_t offset, size_t bytes, void *ctx);

/**
 * shaddr_bcast_segmented() - Bcast whose root data arrives piece by piece
 * @segment: piece size (> 0); the root calls @ready once per piece, in order, and the other
 *           ranks copy piece k while piece k + 1 is still arriving (the root's message counter)
 * @ready: called on the root only; may be NULL on the others
 */
SHADDR_API int shaddr_bcast_segmented(shaddr_comm_t *comm, void *buf, size_t bytes, int root,
				      size_t segment, shaddr_bcast_ready_fn ready, void *ctx);

/* @sendbuf may be SHADDR_IN_PLACE on the root (the root's input is then in @recvbuf).
 * @recvbuf is used on the root only. */
SHADDR_API int shaddr_reduce(shaddr_comm_t *comm, const void *sendbuf, void *recvbuf,
			     size_t count, enum shaddr_dtype type, enum shaddr_op op, int root);

/* Every rank gets a bitwise-identical result: operands are combined in rank order. */
SHADDR_API int shaddr_allreduce(shaddr_comm_t *comm, const void *sendbuf, void *recvbuf,
				size_t count, enum shaddr_dtype type, enum shaddr_op op);

/* Rank r's @bytes land at recvbuf + r * bytes on the root. In place: the root passes
 * SHADDR_IN_PLACE and its own block is already in @recvbuf. */
SHADDR_API int shaddr_gather(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
			     void *recvbuf, int root);
/* As gather, rank r's @sendbytes land at recvbuf + displs[r]; @recvbytes[r] must equal rank r's
 * @sendbytes. @recvbytes and @displs are read on the root only. */
SHADDR_API int shaddr_gatherv(shaddr_comm_t *comm, const void *sendbuf, size_t sendbytes,
			      void *recvbuf, const size_t *recvbytes, const size_t *displs,
			      int root);

/* Rank r receives sendbuf + r * bytes of the root. In place: the root passes SHADDR_IN_PLACE
 * as @recvbuf and keeps its block where it is. */
SHADDR_API int shaddr_scatter(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
			      void *recvbuf, int root);
SHADDR_API int shaddr_scatterv(shaddr_comm_t *comm, const void *sendbuf, const size_t *sendbytes,
			       const size_t *displs, void *recvbuf, size_t recvbytes, int root);

/* Rank r's block lands at recvbuf + r * bytes everywhere. In place: SHADDR_IN_PLACE as
 * @sendbuf, each rank's block already at its place in @recvbuf. */
SHADDR_API int shaddr_allgather(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
				void *recvbuf);
SHADDR_API int shaddr_allgatherv(shaddr_comm_t *comm, const void *sendbuf, size_t sendbytes,
				 void *recvbuf, const size_t *recvbytes, const size_t *displs);

/* Block sendbuf + p * bytes of rank r lands at recvbuf + r * bytes of rank p. In place
 * (SHADDR_IN_PLACE as @sendbuf): the blocks are taken from and replaced in @recvbuf. */
SHADDR_API int shaddr_alltoall(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
			       void *recvbuf);
/* sendbytes[p] of rank r must equal recvbytes[r] of rank p. */
SHADDR_API int shaddr_alltoallv(shaddr_comm_t *comm, const void *sendbuf, const size_t *sendbytes,
				const size_t *sdispls, void *recvbuf, const size_t *recvbytes,
				const size_t *rdispls);

#ifdef __cplusplus
}
#endif

#endif /* SHADDR_COLL_H */
