// SPDX-License-Identifier: MIT
#include "types.h"

#include <climits>
#include <cstring>

#include "shaddr/mpi_glue.h"

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

bool map_dtype(MPI_Datatype t, shaddr_dtype *out) {
  if (t == MPI_DATATYPE_NULL) return false;
  const TypeInfo ti = type_info(t);
  return ti.ok && shaddr_mpi_dtype(t, ti.extent, ti.true_lb, shaddr_dtype_size, out);
}

bool map_op(MPI_Op op, shaddr_op *out) { return shaddr_mpi_op(op, out); }

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
