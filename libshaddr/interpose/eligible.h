// SPDX-License-Identifier: MIT
// Which intercepted calls libshaddr may take (calls.cc asks these before the route): a root
// in range, buffers the MPI accepts, a datatype and op libshaddr reduces, byte counts the
// hierarchy's PMPI_* phases carry. Each answer comes from what the call's arguments give this
// rank; a rank that answers no forwards the call, and the call ledger (agree.h) takes its
// peers along. Inline: Bcast asks bad_root() on every call.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>

#include "agree.h"
#include "shaddr/coll.h"
#include "state.h"
#include "types.h"

namespace shaddr::interpose {

inline bool bad_root(const State &s, int root) { return root < 0 || root >= s.size; }

// Buffers the MPI rejects: MPI_IN_PLACE anywhere but in @own, the buffer of this rank's own
// block (the send buffer; a Scatter root's receive buffer), or @own the same as @other (not
// MPI_IN_PLACE). libshaddr would take MPI_IN_PLACE for an address. Such a rank forwards the
// call, so the MPI decides as it does stock (most report MPI_ERR_BUFFER or MPI_ERR_ARG; MPICH
// faults on a non-root's MPI_IN_PLACE in Gather, Open MPI waits); the ledger takes its peers
// along.
inline bool bad_buffers(const void *own, const void *other) {
  return other == MPI_IN_PLACE || (own != MPI_IN_PLACE && own == other);
}

// The same for a rooted collective, where a non-root rank has one buffer that counts (@own).
inline bool bad_buffers(bool is_root, const void *own, const void *other) {
  return is_root ? bad_buffers(own, other) : own == MPI_IN_PLACE;
}

// A reduction's buffers are of predefined types: a null one holds data at address 0, which is
// erroneous (MPICH: MPI_ERR_BUFFER) and refused by libshaddr on this rank alone. @gets_result:
// the receive buffer counts here.
inline bool null_data(bool gets_result, const void *sendbuf, const void *recvbuf) {
  return !sendbuf || (gets_result && !recvbuf);
}

// Whole-buffer byte counts the PMPI_* phases of the hierarchy move in one int.
inline bool fits_int(size_t bytes) { return bytes <= static_cast<size_t>(INT_MAX); }

// One block a rank of Allgather or Alltoall sends and receives: the receive type's info, the
// send type's (none in place), and the block's bytes. False (forward) where a type cannot be
// sized or laid out, a count is negative, or the send block's bytes differ from the receive
// block's: libshaddr moves bytes, the MPI reports the mismatch.
struct EqualBlocks {
  TypeInfo rti, sti;
  bool in_place = false;
  size_t bytes = 0;
  bool init(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
            MPI_Datatype recvtype) {
    rti = type_info(recvtype);
    if (!rti.ok) return false;
    in_place = sendbuf == MPI_IN_PLACE;
    sti = in_place ? TypeInfo{} : type_info(sendtype);
    if (!in_place && (!sti.ok || sendcount < 0)) return false;
    bytes = static_cast<size_t>(recvcount * rti.size);
    return in_place || static_cast<size_t>(sendcount * sti.size) == bytes;
  }
};

// The block of a rooted call whose root holds every rank's block (Gather's receive side,
// Scatter's send side: @all) and every rank one of its own (@one; MPI_IN_PLACE at the root
// alone): the two sides' type infos and this rank's block bytes. False (forward) as for
// EqualBlocks; only the root sees both sides, so only it compares them.
struct RootedBlock {
  TypeInfo all_ti, one_ti;
  bool in_place = false;
  size_t bytes = 0;
  bool init(bool is_root, const void *one_buf, int one_count, MPI_Datatype one_type,
            int all_count, MPI_Datatype all_type) {
    in_place = is_root && one_buf == MPI_IN_PLACE;
    one_ti = in_place ? TypeInfo{} : type_info(one_type);
    all_ti = is_root ? type_info(all_type) : TypeInfo{};
    if ((!in_place && (!one_ti.ok || one_count < 0)) ||
        (is_root && (!all_ti.ok || all_count < 0)))
      return false;
    const size_t one = in_place ? 0 : static_cast<size_t>(one_count * one_ti.size);
    bytes = is_root ? static_cast<size_t>(all_count * all_ti.size) : one;
    return !is_root || in_place || one == bytes;
  }
};

// Whether libshaddr runs a call of @count elements of @type (Call::lib), from the type's size
// alone, before the costlier look at its layout: most short calls are forwarded on this. False
// also where MPI cannot size @type (forwarded).
inline bool lib_by_size(Call &c, int count, MPI_Datatype type, int root = -1) {
  MPI_Count tsize = 0;
  return count >= 0 && type_size(type, &tsize) &&
         c.lib(static_cast<size_t>(count) * static_cast<size_t>(tsize), 0, root);
}

// True, with libshaddr's element type, its size and op, when libshaddr can reduce @type with
// @op. Asked on every Reduce/Allreduce before the size decides, so the last answer is kept:
// only a predefined datatype and op map (types.h), and those handles are never freed, so they
// cannot come back naming something else (a derived type's or a user op's handle can).
inline bool reducible(MPI_Datatype type, MPI_Op op, shaddr_dtype *dt, shaddr_op *sop,
                      size_t *esize) {
  static struct {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_Op op = MPI_OP_NULL;
    shaddr_dtype dt{};
    shaddr_op sop{};
    size_t esize = 0;
  } last;
  if (type == MPI_DATATYPE_NULL || type != last.type || op != last.op) {
    if (!map_reduction(type, op, dt, sop)) return false;
    last.type = type;
    last.op = op;
    last.dt = *dt;
    last.sop = *sop;
    last.esize = static_cast<size_t>(shaddr_dtype_size(*dt));
  }
  *dt = last.dt;
  *sop = last.sop;
  *esize = last.esize;
  return true;
}

}  // namespace shaddr::interpose
