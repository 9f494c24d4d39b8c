// SPDX-License-Identifier: MIT
// MPI datatypes and ops as libshaddr sees them: byte ranges (packing what is not contiguous)
// and enum shaddr_dtype / enum shaddr_op for the predefined ones. The byte views made from a
// call's buffers are in views.h.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shaddr/coll.h"

namespace shaddr::interpose {

// The layout of one datatype.
struct TypeInfo {
  MPI_Count size = 0;       // bytes of data per element
  MPI_Count extent = 0;     // stride between elements
  MPI_Count true_lb = 0;    // offset of the first data byte
  MPI_Count true_extent = 0;
  bool in_order = false;    // one element's type map is one gapless run in increasing order
  bool ok = false;          // the queries succeeded
  bool named = false;       // a predefined type (its handle is never freed)
  // (buf, count) is one contiguous run of count * size bytes at buf + true_lb, in type-map
  // order (what MPI_Pack would make of it). Else the rank packs its own side.
  bool contiguous(MPI_Count count) const {
    return size == 0 || (in_order && size == true_extent && (count <= 1 || extent == size));
  }
};
// Any datatype MPI accepts (negative or zero extents, resized, holes, type maps in any order):
// ok is false only when MPI cannot describe it, or it is a derived type not committed (the
// call goes to the MPI, which reports it). Asked by MPI (types.cc).
TypeInfo query_type_info(MPI_Datatype t);

// The communicator query_type_info() asks "committed?" on: made after MPI_Init, freed before
// MPI_Finalize. Without it, derived types are taken as committed.
void start_type_checks();
void stop_type_checks();

// A predefined type (MPI_COMBINER_NAMED).
inline bool named_type(MPI_Datatype t) {
  int ni = 0, na = 0, nd = 0, combiner = 0;
  return PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) == MPI_SUCCESS &&
         combiner == MPI_COMBINER_NAMED;
}

// The last predefined type asked about and MPI's answers for it: most calls name one, the
// forwarded ones too. A predefined handle is never freed, so it cannot come back naming another
// type; a derived type's can, and is asked every time.
namespace detail {
struct LastNamedType {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  TypeInfo ti;
};
inline LastNamedType g_last_named;
}  // namespace detail

// query_type_info(), remembered for the last predefined type.
inline TypeInfo type_info(MPI_Datatype t) {
  detail::LastNamedType &last = detail::g_last_named;
  if (t != MPI_DATATYPE_NULL && t == last.t) return last.ti;
  const TypeInfo ti = query_type_info(t);
  if (ti.ok && ti.named) last = {t, ti};
  return ti;
}

// MPI's size of @t (bytes of data per element); false if MPI cannot say (then forwarded). A
// derived type costs one query, not type_info()'s look at its layout.
inline bool type_size(MPI_Datatype t, MPI_Count *size) {
  if (t == MPI_DATATYPE_NULL) return false;
  if (t == detail::g_last_named.t) {
    *size = detail::g_last_named.ti.size;
    return true;
  }
  if (PMPI_Type_size_x(t, size) != MPI_SUCCESS || *size < 0) return false;
  if (named_type(t)) type_info(t);  // remembered for the next call
  return true;
}

// Maps a predefined MPI type / op; false when libshaddr cannot reduce it (then forwarded).
// The types: C's (shaddr/mpi_glue.h) and Fortran's (fortran_types.h) but LOGICAL.
bool map_dtype(MPI_Datatype t, shaddr_dtype *out);
bool map_op(MPI_Op op, shaddr_op *out);
// True, with libshaddr's type and op, when libshaddr reduces @t with @op exactly as the MPI
// does: map_dtype() and map_op(), Fortran's LOGICAL with its logical ops, and an op MPI
// defines on the type.
bool map_reduction(MPI_Datatype t, MPI_Op op, shaddr_dtype *dt, shaddr_op *sop);

// buf + offset bytes, also for MPI_BOTTOM (a null buf) with absolute displacements: the data is
// at the offset itself.
inline char *at(const void *buf, MPI_Count offset) {
  return reinterpret_cast<char *>(reinterpret_cast<uintptr_t>(buf) +
                                  static_cast<uintptr_t>(offset));
}

// Pack/unpack count elements of t at user into/from dst (native representation, which is the
// concatenation of the type map's bytes on these MPIs); chunked to respect int limits.
int pack(const char *user, MPI_Count count, MPI_Datatype t, MPI_Count extent, MPI_Count tsize,
         char *dst);
int unpack(const char *src, MPI_Count count, MPI_Datatype t, MPI_Count extent, MPI_Count tsize,
           char *user);

}  // namespace shaddr::interpose
