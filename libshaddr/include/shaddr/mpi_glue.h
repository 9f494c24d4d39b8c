/* SPDX-License-Identifier: MIT */
/*
 * What an MPI library's collectives need to hand a call to libshaddr: which predefined MPI
 * datatypes and ops libshaddr reduces, and what an MPI_IN_PLACE send buffer means to it. One
 * copy for both integrations -- the PMPI interposer (libshaddr/interpose) and the MPICH patch
 * (mpich_patch/, posix_coll_shaddr.c) -- so that they cannot drift apart.
 *
 * Include <mpi.h> (or MPICH's own mpiimpl.h) first. Everything here is static inline: the
 * handles are the including MPI's (Open MPI's are addresses, MPICH's integers), so the tables
 * are built where they are used, not in libshaddr.
 */
#ifndef SHADDR_MPI_GLUE_H
#define SHADDR_MPI_GLUE_H

#include "shaddr/coll.h"

/**
 * shaddr_mpi_dtype() - libshaddr's element type for a predefined MPI datatype
 * @t: the datatype
 * @extent: its extent, @true_lb its true lower bound, as the MPI library reports them
 * @dtype_size: shaddr_dtype_size, or the caller's pointer to it (the MPICH patch loads
 *              libshaddr with dlopen)
 * @out: receives the type
 *
 * Only MPI's C integer, floating, complex, logical, byte and pair types: MPI_CHAR and
 * MPI_WCHAR are characters (no arithmetic in MPI); Fortran types and derived types are left to
 * the MPI library. The element must have the C layout libshaddr assumes: an extent equal to
 * libshaddr's element size (the pair types' extent includes their padding) and no offset, which
 * also rejects a platform where, say, long is not 8 bytes.
 * Return: 1 and *@out set, or 0 (the caller uses its own algorithm).
 */
static inline int shaddr_mpi_dtype(MPI_Datatype t, long long extent, long long true_lb,
				   int (*dtype_size)(enum shaddr_dtype), enum shaddr_dtype *out)
{
	const struct {
		MPI_Datatype mpi;
		enum shaddr_dtype sh;
	} map[] = {
		{ MPI_BYTE, SHADDR_BYTE },
		{ MPI_SIGNED_CHAR, SHADDR_INT8 },
		{ MPI_UNSIGNED_CHAR, SHADDR_UINT8 },
		{ MPI_INT8_T, SHADDR_INT8 },
		{ MPI_UINT8_T, SHADDR_UINT8 },
		{ MPI_SHORT, SHADDR_INT16 },
		{ MPI_UNSIGNED_SHORT, SHADDR_UINT16 },
		{ MPI_INT16_T, SHADDR_INT16 },
		{ MPI_UINT16_T, SHADDR_UINT16 },
		{ MPI_INT, SHADDR_INT32 },
		{ MPI_UNSIGNED, SHADDR_UINT32 },
		{ MPI_INT32_T, SHADDR_INT32 },
		{ MPI_UINT32_T, SHADDR_UINT32 },
		{ MPI_LONG, SHADDR_INT64 },
		{ MPI_UNSIGNED_LONG, SHADDR_UINT64 },
		{ MPI_LONG_LONG_INT, SHADDR_INT64 },
		{ MPI_LONG_LONG, SHADDR_INT64 },
		{ MPI_UNSIGNED_LONG_LONG, SHADDR_UINT64 },
		{ MPI_INT64_T, SHADDR_INT64 },
		{ MPI_UINT64_T, SHADDR_UINT64 },
		{ MPI_AINT, SHADDR_INT64 },
		{ MPI_OFFSET, SHADDR_INT64 },
		{ MPI_COUNT, SHADDR_INT64 },
		{ MPI_FLOAT, SHADDR_FLOAT },
		{ MPI_DOUBLE, SHADDR_DOUBLE },
		{ MPI_LONG_DOUBLE, SHADDR_LONG_DOUBLE },
		{ MPI_C_FLOAT_COMPLEX, SHADDR_C_FLOAT_COMPLEX },
		{ MPI_C_COMPLEX, SHADDR_C_FLOAT_COMPLEX },
		{ MPI_C_DOUBLE_COMPLEX, SHADDR_C_DOUBLE_COMPLEX },
		{ MPI_C_LONG_DOUBLE_COMPLEX, SHADDR_C_LONG_DOUBLE_COMPLEX },
		{ MPI_C_BOOL, SHADDR_C_BOOL },
		{ MPI_FLOAT_INT, SHADDR_FLOAT_INT },
		{ MPI_DOUBLE_INT, SHADDR_DOUBLE_INT },
		{ MPI_LONG_INT, SHADDR_LONG_INT },
		{ MPI_2INT, SHADDR_2INT },
		{ MPI_SHORT_INT, SHADDR_SHORT_INT },
		{ MPI_LONG_DOUBLE_INT, SHADDR_LONG_DOUBLE_INT },
	};
	unsigned int i;

	if (t == MPI_DATATYPE_NULL)
		return 0;
	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		if (map[i].mpi != t || map[i].mpi == MPI_DATATYPE_NULL)
			continue;
		if (true_lb != 0 || extent != dtype_size(map[i].sh))
			return 0;
		*out = map[i].sh;
		return 1;
	}
	return 0;
}

/**
 * shaddr_mpi_op() - libshaddr's operation for a predefined MPI op
 * Return: 1 and *@out set, or 0 for user-defined ops (possibly not commutative), MPI_REPLACE
 * and MPI_NO_OP. Whether libshaddr reduces the op on a given type is shaddr_op_supported().
 */
static inline int shaddr_mpi_op(MPI_Op op, enum shaddr_op *out)
{
	const struct {
		MPI_Op mpi;
		enum shaddr_op sh;
	} map[] = {
		{ MPI_SUM, SHADDR_OP_SUM },	  { MPI_PROD, SHADDR_OP_PROD },
		{ MPI_MIN, SHADDR_OP_MIN },	  { MPI_MAX, SHADDR_OP_MAX },
		{ MPI_LAND, SHADDR_OP_LAND },	  { MPI_LOR, SHADDR_OP_LOR },
		{ MPI_LXOR, SHADDR_OP_LXOR },	  { MPI_BAND, SHADDR_OP_BAND },
		{ MPI_BOR, SHADDR_OP_BOR },	  { MPI_BXOR, SHADDR_OP_BXOR },
		{ MPI_MINLOC, SHADDR_OP_MINLOC }, { MPI_MAXLOC, SHADDR_OP_MAXLOC },
	};
	unsigned int i;

	if (op == MPI_OP_NULL)
		return 0;
	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		if (map[i].mpi == op) {
			*out = map[i].sh;
			return 1;
		}
	}
	return 0;
}

/**
 * shaddr_mpi_reduce_sendbuf() - the send buffer to pass to shaddr_reduce()/shaddr_allreduce()
 * @sendbuf: the MPI call's send buffer
 * @recvbuf: its receive buffer
 * @gets_result: this rank receives the result (the root of a Reduce; every Allreduce rank)
 *
 * MPI_IN_PLACE where the result lands is SHADDR_IN_PLACE (the input is in @recvbuf, and
 * libshaddr leaves it as it was when the call fails, so the caller can fall back on it).
 * MPI_IN_PLACE on a rank that gets no result is not MPI's, but MPICH's ch4 reduce compositions
 * pass it on a node's non-root ranks with their input in @recvbuf: that buffer is then the
 * send buffer (libshaddr only reads it there).
 */
static inline const void *shaddr_mpi_reduce_sendbuf(const void *sendbuf, void *recvbuf,
						     int gets_result)
{
	if (sendbuf != MPI_IN_PLACE)
		return sendbuf;
	return gets_result ? SHADDR_IN_PLACE : recvbuf;
}

#endif /* SHADDR_MPI_GLUE_H */
