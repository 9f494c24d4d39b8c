// SPDX-License-Identifier: MIT
// Packing: the contiguous byte ranges libshaddr moves, made from an MPI call's buffers on this
// rank alone (the user's memory where its type is one run in type-map order, else a packed
// copy), and the saved input a failed attempt restores before the MPI redoes the call.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "types.h"

namespace shaddr::interpose {

// A contiguous byte view of (buf, count, type) on this rank: the user's memory when the type is
// contiguous, else a packed copy (in() packs, out() unpacks after the collective).
class View {
 public:
  View() = default;
  // @buf may be nullptr (MPI_BOTTOM) but not MPI_IN_PLACE (the caller handles that); @count
  // elements. MPI_ERR_BUFFER for data at address 0 (a null buffer whose type does not move the
  // data away from it): erroneous, and libshaddr would refuse it on this rank alone.
  int init(const void *buf, MPI_Count count, MPI_Datatype t, const TypeInfo &ti) {
    user_ = static_cast<char *>(const_cast<void *>(buf));
    count_ = count;
    type_ = t;
    tsize_ = ti.size;
    extent_ = ti.extent;
    bytes_ = static_cast<size_t>(count * ti.size);
    if (bytes_ && !at(buf, ti.true_lb)) return MPI_ERR_BUFFER;
    packed_ = !ti.contiguous(count);
    if (packed_) return init_packed();
    ptr_ = at(buf, ti.true_lb);
    return MPI_SUCCESS;
  }
  char *data() { return ptr_; }
  size_t bytes() const { return bytes_; }
  // user buffer -> view (no-op when contiguous)
  int pack_in() {
    return packed_ && bytes_ ? pack(user_, count_, type_, extent_, tsize_, ptr_) : MPI_SUCCESS;
  }
  // view -> user buffer (no-op when contiguous)
  int unpack_out() {
    return packed_ && bytes_ ? unpack(ptr_, count_, type_, extent_, tsize_, user_) : MPI_SUCCESS;
  }
  // Elements [first, first + n) only: an in-place call's own block, its input.
  int pack_in(MPI_Count first, MPI_Count n) {
    if (!packed_ || !n || !tsize_) return MPI_SUCCESS;
    return pack(at(user_, first * extent_), n, type_, extent_, tsize_, ptr_ + first * tsize_);
  }
  // Every element but [first, first + n): an in-place call's own block is left as the caller
  // wrote it (were the layout to reach those bytes from another block too - erroneous, but the
  // MPI's result is the other block's - its old bytes are not written back over them).
  int unpack_out_except(MPI_Count first, MPI_Count n) {
    if (!packed_ || !bytes_) return MPI_SUCCESS;
    if (int rc = unpack(ptr_, first, type_, extent_, tsize_, user_)) return rc;
    const MPI_Count rest = first + n;
    return unpack(ptr_ + rest * tsize_, count_ - rest, type_, extent_, tsize_,
                  at(user_, rest * extent_));
  }

 private:
  int init_packed();  // the packed copy's memory (types.cc)
  char *user_ = nullptr;
  MPI_Count count_ = 0;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Count tsize_ = 0;
  MPI_Count extent_ = 0;
  char *ptr_ = nullptr;
  size_t bytes_ = 0;
  bool packed_ = false;
  std::vector<char> tmp_;
};

// A saved copy of bytes that an in-place call reads as input and a failed attempt may have
// overwritten (restored before the PMPI_* rerun).
struct Backup {
  std::vector<char> data;
  char *where = nullptr;
  void save(char *p, size_t n) {
    where = p;
    data.assign(p, p + n);
  }
  void restore() {
    if (where && !data.empty()) std::memcpy(where, data.data(), data.size());
  }
};

// A v-layout (counts[i] elements of t at displs[i] * extent) as byte counts/displacements
// into a contiguous area: the user's buffer when t is contiguous, else a packed copy.
struct VView {
  std::vector<size_t> bytes, displs;
  char *user = nullptr;
  char *base = nullptr;
  bool packed = false;
  std::vector<char> tmp;
  TypeInfo ti;
  MPI_Datatype t = MPI_DATATYPE_NULL;
  std::vector<MPI_Count> counts, udispls;

  // MPI_ERR_BUFFER for data at address 0, as View::init().
  int init(const void *buf, const int *cnt, const int *dsp, int n, MPI_Datatype type,
           const TypeInfo &info) {
    user = static_cast<char *>(const_cast<void *>(buf));
    ti = info;
    t = type;
    packed = !ti.contiguous(2);  // in type-map order: one run, consecutive elements adjacent
    for (int i = 0; i < n; i++) packed = packed || dsp[i] < 0;  // byte offsets stay unsigned
    bytes.resize(n);
    displs.resize(n);
    counts.assign(cnt, cnt + n);
    udispls.assign(dsp, dsp + n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
      bytes[i] = static_cast<size_t>(counts[i] * ti.size);
      displs[i] = packed ? total : static_cast<size_t>(udispls[i] * ti.extent);
      total += bytes[i];
    }
    if (total && !at(user, ti.true_lb)) return MPI_ERR_BUFFER;
    if (packed) {
      tmp.resize(total ? total : 1);
      base = tmp.data();
    } else {
      base = at(user, ti.true_lb);
    }
    return MPI_SUCCESS;
  }
  int pack_block(int i) {
    if (!packed || !bytes[i]) return MPI_SUCCESS;
    return pack(user + udispls[i] * ti.extent, counts[i], t, ti.extent, ti.size,
                base + displs[i]);
  }
  int unpack_block(int i) {
    if (!packed || !bytes[i]) return MPI_SUCCESS;
    return unpack(base + displs[i], counts[i], t, ti.extent, ti.size,
                  user + udispls[i] * ti.extent);
  }
  int pack_all() {
    for (size_t i = 0; i < bytes.size(); i++)
      if (int rc = pack_block(static_cast<int>(i))) return rc;
    return MPI_SUCCESS;
  }
  // Every block but @skip (-1: all): an in-place call's own block stays as the caller wrote it
  // (View::unpack_out_except).
  int unpack_all(int skip = -1) {
    for (size_t i = 0; i < bytes.size(); i++)
      if (static_cast<int>(i) != skip)
        if (int rc = unpack_block(static_cast<int>(i))) return rc;
    return MPI_SUCCESS;
  }
};

}  // namespace shaddr::interpose
