// SPDX-License-Identifier: MIT
#include "fortran_types.h"

#include <cstdint>
#include <cstring>

#include "reduce_ops.h"

namespace shaddr::interpose {

bool fortran_dtype(MPI_Datatype t, MPI_Count extent, MPI_Count true_lb, shaddr_dtype *out) {
  const struct {
    MPI_Datatype mpi;
    shaddr_dtype sh;
  } map[] = {
      {MPI_INTEGER, SHADDR_INT32},
      {MPI_REAL, SHADDR_FLOAT},
      {MPI_DOUBLE_PRECISION, SHADDR_DOUBLE},
      {MPI_COMPLEX, SHADDR_C_FLOAT_COMPLEX},
      {MPI_DOUBLE_COMPLEX, SHADDR_C_DOUBLE_COMPLEX},
      {MPI_INTEGER1, SHADDR_INT8},
      {MPI_INTEGER2, SHADDR_INT16},
      {MPI_INTEGER4, SHADDR_INT32},
      {MPI_INTEGER8, SHADDR_INT64},
      {MPI_REAL4, SHADDR_FLOAT},
      {MPI_REAL8, SHADDR_DOUBLE},
      {MPI_COMPLEX8, SHADDR_C_FLOAT_COMPLEX},
      {MPI_COMPLEX16, SHADDR_C_DOUBLE_COMPLEX},
      {MPI_2INTEGER, SHADDR_2INT},
      {MPI_2REAL, SHADDR_2FLOAT},
      {MPI_2DOUBLE_PRECISION, SHADDR_2DOUBLE},
  };
  if (t == MPI_DATATYPE_NULL) return false;
  for (const auto &m : map) {
    if (m.mpi != t) continue;
    // The size check also rejects a kind the Fortran compiler did not have (MPI gives it
    // another size, or none) and INTEGER or REAL promoted to 8 bytes by compiler flags.
    if (true_lb != 0 || extent != shaddr_dtype_size(m.sh)) return false;
    *out = m.sh;
    return true;
  }
  return false;
}

namespace {

// Whether this MPI's LOGICAL LAND/LOR/LXOR give, bitwise, what libshaddr's INT32 logical ops
// give (indexed by op - SHADDR_OP_LAND).
struct LogicalAnswers {
  bool same[3] = {};
};

LogicalAnswers ask_logical() {
  LogicalAnswers a;
  const int32_t x[] = {0, 0, 1, 1, 0, 2, -1, 5, 7};
  const int32_t y[] = {0, 1, 0, 1, 3, 0, -1, 7, 0};
  constexpr int n = sizeof(x) / sizeof(x[0]);
  const MPI_Op ops[] = {MPI_LAND, MPI_LOR, MPI_LXOR};
  for (int i = 0; i < 3; i++) {
    int32_t theirs[n], ours[n];
    std::memcpy(theirs, y, sizeof y);  // Reduce_local: inout = in op inout = x op y
    std::memcpy(ours, x, sizeof x);
    if (PMPI_Reduce_local(x, theirs, n, MPI_LOGICAL, ops[i]) != MPI_SUCCESS) continue;
    if (reduce_apply(static_cast<shaddr_op>(SHADDR_OP_LAND + i), SHADDR_INT32, ours, y, n) != 0)
      continue;
    a.same[i] = std::memcmp(theirs, ours, sizeof ours) == 0;
  }
  return a;
}

}  // namespace

bool fortran_logical(MPI_Datatype t, shaddr_op op, shaddr_dtype *out) {
  if (t == MPI_DATATYPE_NULL || t != MPI_LOGICAL) return false;
  if (op != SHADDR_OP_LAND && op != SHADDR_OP_LOR && op != SHADDR_OP_LXOR) return false;
  MPI_Count lb = 0, extent = 0, size = 0;
  if (PMPI_Type_size_x(t, &size) != MPI_SUCCESS || size != 4 ||
      PMPI_Type_get_extent_x(t, &lb, &extent) != MPI_SUCCESS || extent != 4)
    return false;
  static const LogicalAnswers answers = ask_logical();  // asked after MPI_Init: a reduction
  if (!answers.same[op - SHADDR_OP_LAND]) return false;
  *out = SHADDR_INT32;
  return true;
}

}  // namespace shaddr::interpose
