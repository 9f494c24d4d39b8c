// SPDX-License-Identifier: MIT
#include "types.h"

#include <climits>
#include <cstring>

namespace shaddr::interpose {

TypeInfo type_info(MPI_Datatype t) {
  TypeInfo ti;
  MPI_Count lb = 0;
  if (t == MPI_DATATYPE_NULL) return ti;
  ti.ok = PMPI_Type_size_x(t, &ti.size) == MPI_SUCCESS &&
          PMPI_Type_get_extent_x(t, &lb, &ti.extent) == MPI_SUCCESS &&
          PMPI_Type_get_true_extent_x(t, &ti.true_lb, &ti.true_extent) == MPI_SUCCESS &&
          ti.size >= 0 && ti.extent >= 0;
  return ti;
}

namespace {
struct DtypeMap {
  MPI_Datatype mpi;
  shaddr_dtype sh;
};
struct OpMap {
  MPI_Op mpi;
  shaddr_op sh;
};
}  // namespace

bool map_dtype(MPI_Datatype t, shaddr_dtype *out) {
  // Only MPI's C integer, floating, complex, logical, byte and pair types: MPI_CHAR and
  // MPI_WCHAR are characters (no arithmetic in MPI); Fortran types are left to PMPI_*.
  // Not static: some handles (Open MPI's) are addresses resolved at load time.
  const DtypeMap map[] = {
      {MPI_BYTE, SHADDR_BYTE},
      {MPI_SIGNED_CHAR, SHADDR_INT8},
      {MPI_UNSIGNED_CHAR, SHADDR_UINT8},
      {MPI_INT8_T, SHADDR_INT8},
      {MPI_UINT8_T, SHADDR_UINT8},
      {MPI_SHORT, SHADDR_INT16},
      {MPI_UNSIGNED_SHORT, SHADDR_UINT16},
      {MPI_INT16_T, SHADDR_INT16},
      {MPI_UINT16_T, SHADDR_UINT16},
      {MPI_INT, SHADDR_INT32},
      {MPI_UNSIGNED, SHADDR_UINT32},
      {MPI_INT32_T, SHADDR_INT32},
      {MPI_UINT32_T, SHADDR_UINT32},
      {MPI_LONG, SHADDR_INT64},
      {MPI_UNSIGNED_LONG, SHADDR_UINT64},
      {MPI_LONG_LONG_INT, SHADDR_INT64},
      {MPI_LONG_LONG, SHADDR_INT64},
      {MPI_UNSIGNED_LONG_LONG, SHADDR_UINT64},
      {MPI_INT64_T, SHADDR_INT64},
      {MPI_UINT64_T, SHADDR_UINT64},
      {MPI_AINT, SHADDR_INT64},
      {MPI_OFFSET, SHADDR_INT64},
      {MPI_COUNT, SHADDR_INT64},
      {MPI_FLOAT, SHADDR_FLOAT},
      {MPI_DOUBLE, SHADDR_DOUBLE},
      {MPI_LONG_DOUBLE, SHADDR_LONG_DOUBLE},
      {MPI_C_FLOAT_COMPLEX, SHADDR_C_FLOAT_COMPLEX},
      {MPI_C_COMPLEX, SHADDR_C_FLOAT_COMPLEX},
      {MPI_C_DOUBLE_COMPLEX, SHADDR_C_DOUBLE_COMPLEX},
      {MPI_C_LONG_DOUBLE_COMPLEX, SHADDR_C_LONG_DOUBLE_COMPLEX},
      {MPI_C_BOOL, SHADDR_C_BOOL},
      {MPI_FLOAT_INT, SHADDR_FLOAT_INT},
      {MPI_DOUBLE_INT, SHADDR_DOUBLE_INT},
      {MPI_LONG_INT, SHADDR_LONG_INT},
      {MPI_2INT, SHADDR_2INT},
      {MPI_SHORT_INT, SHADDR_SHORT_INT},
      {MPI_LONG_DOUBLE_INT, SHADDR_LONG_DOUBLE_INT},
  };
  if (t == MPI_DATATYPE_NULL) return false;
  for (const auto &m : map) {
    if (m.mpi != t || m.mpi == MPI_DATATYPE_NULL) continue;
    // The element must have the C layout libshaddr assumes: its extent (the pair types' size
    // excludes the padding, their extent includes it) and no offset.
    TypeInfo ti = type_info(t);
    if (!ti.ok || ti.true_lb != 0 || ti.extent != shaddr_dtype_size(m.sh)) return false;
    *out = m.sh;
    return true;
  }
  return false;
}

bool map_op(MPI_Op op, shaddr_op *out) {
  const OpMap map[] = {
      {MPI_SUM, SHADDR_OP_SUM},   {MPI_PROD, SHADDR_OP_PROD},     {MPI_MIN, SHADDR_OP_MIN},
      {MPI_MAX, SHADDR_OP_MAX},   {MPI_LAND, SHADDR_OP_LAND},     {MPI_LOR, SHADDR_OP_LOR},
      {MPI_LXOR, SHADDR_OP_LXOR}, {MPI_BAND, SHADDR_OP_BAND},     {MPI_BOR, SHADDR_OP_BOR},
      {MPI_BXOR, SHADDR_OP_BXOR}, {MPI_MINLOC, SHADDR_OP_MINLOC}, {MPI_MAXLOC, SHADDR_OP_MAXLOC},
  };
  if (op == MPI_OP_NULL) return false;
  for (const auto &m : map)
    if (m.mpi == op) {
      *out = m.sh;
      return true;
    }
  return false;  // user-defined ops (possibly non-commutative), MPI_REPLACE, MPI_NO_OP
}

namespace {
// Elements per PMPI_Pack call so that one call's bytes fit an int.
MPI_Count chunk_elems(MPI_Count tsize) {
  return tsize > 0 ? (INT_MAX / 2) / tsize > 0 ? (INT_MAX / 2) / tsize : 1 : INT_MAX;
}
}  // namespace

int pack(const char *user, MPI_Count count, MPI_Datatype t, MPI_Count extent, MPI_Count tsize,
         char *dst) {
  const MPI_Count step = chunk_elems(tsize);
  for (MPI_Count i = 0; i < count; i += step) {
    const MPI_Count n = count - i < step ? count - i : step;
    int pos = 0;
    int rc = PMPI_Pack(user + i * extent, static_cast<int>(n), t, dst + i * tsize,
                       static_cast<int>(n * tsize), &pos, MPI_COMM_SELF);
    if (rc != MPI_SUCCESS || pos != n * tsize) return rc != MPI_SUCCESS ? rc : MPI_ERR_TYPE;
  }
  return MPI_SUCCESS;
}

int unpack(const char *src, MPI_Count count, MPI_Datatype t, MPI_Count extent, MPI_Count tsize,
           char *user) {
  const MPI_Count step = chunk_elems(tsize);
  for (MPI_Count i = 0; i < count; i += step) {
    const MPI_Count n = count - i < step ? count - i : step;
    int pos = 0;
    int rc = PMPI_Unpack(src + i * tsize, static_cast<int>(n * tsize), &pos, user + i * extent,
                         static_cast<int>(n), t, MPI_COMM_SELF);
    if (rc != MPI_SUCCESS || pos != n * tsize) return rc != MPI_SUCCESS ? rc : MPI_ERR_TYPE;
  }
  return MPI_SUCCESS;
}

int View::init(const void *buf, MPI_Count count, MPI_Datatype t, const TypeInfo &ti) {
  user_ = static_cast<char *>(const_cast<void *>(buf));
  count_ = count;
  type_ = t;
  tsize_ = ti.size;
  extent_ = ti.extent;
  bytes_ = static_cast<size_t>(count * ti.size);
  packed_ = !ti.contiguous(count);
  if (!packed_) {
    ptr_ = user_ ? user_ + ti.true_lb : nullptr;
    return MPI_SUCCESS;
  }
  try {
    tmp_.resize(bytes_ ? bytes_ : 1);
  } catch (...) {
    return MPI_ERR_NO_MEM;
  }
  ptr_ = tmp_.data();
  return MPI_SUCCESS;
}

int View::pack_in() {
  return packed_ && bytes_ ? pack(user_, count_, type_, extent_, tsize_, ptr_) : MPI_SUCCESS;
}

int View::unpack_out() {
  return packed_ && bytes_ ? unpack(ptr_, count_, type_, extent_, tsize_, user_) : MPI_SUCCESS;
}

}  // namespace shaddr::interpose
