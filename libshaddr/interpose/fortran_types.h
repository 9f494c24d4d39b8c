// SPDX-License-Identifier: MIT
// Fortran's predefined datatypes in reductions: which of them libshaddr reduces exactly as the
// MPI library does (the C types are shaddr/mpi_glue.h's table, shared with the MPICH patch).
#pragma once

#include <mpi.h>

#include "shaddr/coll.h"

namespace shaddr::interpose {

// INTEGER, REAL, DOUBLE PRECISION, COMPLEX, DOUBLE COMPLEX, the sized kinds (INTEGER1/2/4/8,
// REAL4/8, COMPLEX8/16) and MINLOC/MAXLOC's 2INTEGER, 2REAL, 2DOUBLE_PRECISION: libshaddr's
// element type when @t is one of them with the layout libshaddr assumes (@extent its element
// size, @true_lb 0, as with the C types). REAL16 (a binary128 in gfortran, not long double),
// INTEGER16, CHARACTER and LOGICAL (see fortran_logical) are not.
bool fortran_dtype(MPI_Datatype t, MPI_Count extent, MPI_Count true_lb, shaddr_dtype *out);

// LOGICAL with LAND, LOR or LXOR: libshaddr's 4-byte integer logical ops, whose results are
// 0 and 1 (a non-zero operand is true), where that is what this MPI's own op gives for LOGICAL:
// asked once, bitwise, of PMPI_Reduce_local on operands that cover true, false and true values
// other than 1. Else (another notion of true, another size) false: forwarded.
bool fortran_logical(MPI_Datatype t, shaddr_op op, shaddr_dtype *out);

}  // namespace shaddr::interpose
