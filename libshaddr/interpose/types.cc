// SPDX-License-Identifier: MIT
#include "types.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fortran_types.h"
#include "shaddr/mpi_glue.h"
#include "views.h"

namespace shaddr::interpose {
namespace {

struct Layout {
  MPI_Count size = 0, extent = 0, true_lb = 0, true_extent = 0;
  bool query(MPI_Datatype t) {
    MPI_Count lb = 0;
    return PMPI_Type_size_x(t, &size) == MPI_SUCCESS &&
           PMPI_Type_get_extent_x(t, &lb, &extent) == MPI_SUCCESS &&
           PMPI_Type_get_true_extent_x(t, &true_lb, &true_extent) == MPI_SUCCESS && size >= 0;
  }
};

// Derived types nested deeper than this are packed without looking.
constexpr int kMaxDepth = 12;

bool in_order(MPI_Datatype t, int depth);

// One block of a type's definition: `count` elements of `type` from byte `disp`.
struct Block {
  MPI_Aint disp;
  MPI_Count count;
  MPI_Datatype type;
};

// The blocks, in type-map order, form one gapless run in increasing address order.
bool blocks_in_order(const std::vector<Block> &blocks, int depth) {
  bool first = true;
  MPI_Aint next = 0;
  for (const Block &b : blocks) {
    if (b.count == 0) continue;
    Layout l;
    if (!l.query(b.type)) return false;
    if (l.size == 0) continue;
    if (!in_order(b.type, depth + 1) || l.size != l.true_extent) return false;
    if (b.count > 1 && l.extent != l.size) return false;  // gaps, overlap or a reversed stride
    const MPI_Aint start = b.disp + static_cast<MPI_Aint>(l.true_lb);
    if (!first && start != next) return false;
    next = start + static_cast<MPI_Aint>(b.count * l.size);
    first = false;
  }
  return true;
}

// The datatypes MPI_Type_get_contents returns that the caller must free.
struct Contents {
  std::vector<int> ints;
  std::vector<MPI_Aint> addrs;
  std::vector<MPI_Datatype> types;
  ~Contents() {
    for (MPI_Datatype &t : types) {
      int ni, na, nd, comb;
      if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) == MPI_SUCCESS &&
          comb != MPI_COMBINER_NAMED)
        PMPI_Type_free(&t);
    }
  }
};

// Reads the definition of @t as blocks; false for a combiner not decoded here (subarray,
// darray, Fortran types): those are packed.
// The blocks name types held by @c.
bool decode(MPI_Datatype t, int comb, int ni, int na, int nd, Contents &c,
            std::vector<Block> *out) {
  c.ints.resize(ni);
  c.addrs.resize(na);
  c.types.resize(nd);
  if (PMPI_Type_get_contents(t, ni, na, nd, c.ints.data(), c.addrs.data(), c.types.data()) !=
      MPI_SUCCESS) {
    c.types.clear();  // nothing was returned to free
    return false;
  }
  MPI_Count old_extent = 0;
  if (nd >= 1) {
    Layout l;
    if (!l.query(c.types[0])) return false;
    old_extent = l.extent;
  }
  const MPI_Datatype old = nd >= 1 ? c.types[0] : MPI_DATATYPE_NULL;
  switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED:  // changes lb and extent only: one element is old's
      out->push_back({0, 1, old});
      return true;
    case MPI_COMBINER_CONTIGUOUS:
      out->push_back({0, c.ints[0], old});
      return true;
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR: {
      const MPI_Aint stride = comb == MPI_COMBINER_VECTOR
                                  ? static_cast<MPI_Aint>(c.ints[2]) * old_extent
                                  : c.addrs[0];
      for (int i = 0; i < c.ints[0]; i++) out->push_back({i * stride, c.ints[1], old});
      return true;
    }
    case MPI_COMBINER_INDEXED:
      for (int i = 0; i < c.ints[0]; i++)
        out->push_back({c.ints[1 + c.ints[0] + i] * static_cast<MPI_Aint>(old_extent),
                        c.ints[1 + i], old});
      return true;
    case MPI_COMBINER_HINDEXED:
      for (int i = 0; i < c.ints[0]; i++) out->push_back({c.addrs[i], c.ints[1 + i], old});
      return true;
    case MPI_COMBINER_INDEXED_BLOCK:
      for (int i = 0; i < c.ints[0]; i++)
        out->push_back({c.ints[2 + i] * static_cast<MPI_Aint>(old_extent), c.ints[1], old});
      return true;
    case MPI_COMBINER_HINDEXED_BLOCK:
      for (int i = 0; i < c.ints[0]; i++) out->push_back({c.addrs[i], c.ints[1], old});
      return true;
    case MPI_COMBINER_STRUCT:
      for (int i = 0; i < c.ints[0]; i++) out->push_back({c.addrs[i], c.ints[1 + i], c.types[i]});
      return true;
    default:
      return false;
  }
}

bool in_order(MPI_Datatype t, int depth) {
  int ni, na, nd, comb;
  if (depth > kMaxDepth || PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS)
    return false;
  if (comb == MPI_COMBINER_NAMED) return true;  // a holes check is the caller's (size, extent)
  Contents c;
  std::vector<Block> blocks;
  return decode(t, comb, ni, na, nd, c, &blocks) && blocks_in_order(blocks, depth);
}

// What is known of a derived type once it is committed, cached on it (an attribute goes away
// with the type, so a handle that comes back for another type is never answered from the old
// one's cache).
int derived_keyval() {
  static int kv = [] {
    int k = MPI_KEYVAL_INVALID;
    if (PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &k, nullptr) !=
        MPI_SUCCESS)
      k = MPI_KEYVAL_INVALID;
    return k;
  }();
  return kv;
}

// A communicator of this rank alone that returns errors: MPI_Pack on it asks the MPI whether a
// type is committed, which MPI has no query for (MPICH and Open MPI both check it there;
// Open MPI 4.1.4's MPI_Pack_size crashes on an uncommitted type instead).
MPI_Comm g_check_comm = MPI_COMM_NULL;

// Committed, as far as the MPI checks it (without a check communicator: assumed).
bool committed(MPI_Datatype t) {
  if (g_check_comm == MPI_COMM_NULL) return true;
  char in = 0, out = 0;
  int pos = 0;
  return PMPI_Pack(&in, 0, t, &out, 0, &pos, g_check_comm) == MPI_SUCCESS;
}

enum DerivedFacts : intptr_t { kUncommitted = 0, kCommitted = 1, kCommittedInOrder = 2 };

// A committed type's facts are cached; an uncommitted one is asked again (it may be committed
// before its next use). A type whose size is not its true extent has holes: never in order,
// without looking at its type map.
DerivedFacts derived_facts(MPI_Datatype t, const Layout &l) {
  const int kv = derived_keyval();
  if (kv != MPI_KEYVAL_INVALID) {
    void *v = nullptr;
    int found = 0;
    if (PMPI_Type_get_attr(t, kv, &v, &found) == MPI_SUCCESS && found)
      return static_cast<DerivedFacts>(reinterpret_cast<intptr_t>(v));
  }
  if (!committed(t)) return kUncommitted;
  const DerivedFacts f = l.size == l.true_extent && in_order(t, 0) ? kCommittedInOrder
                                                                   : kCommitted;
  if (kv != MPI_KEYVAL_INVALID)
    PMPI_Type_set_attr(t, kv, reinterpret_cast<void *>(static_cast<intptr_t>(f)));
  return f;
}

}  // namespace

TypeInfo query_type_info(MPI_Datatype t) {
  TypeInfo ti;
  if (t == MPI_DATATYPE_NULL) return ti;
  Layout l;
  ti.ok = l.query(t);
  if (!ti.ok) return ti;
  ti.size = l.size;
  ti.extent = l.extent;
  ti.true_lb = l.true_lb;
  ti.true_extent = l.true_extent;
  ti.named = named_type(t);
  if (ti.named) {
    ti.in_order = l.size == l.true_extent;
    return ti;
  }
  // An uncommitted type goes to the MPI, which reports MPI_ERR_TYPE as it does stock.
  const DerivedFacts f = derived_facts(t, l);
  ti.ok = f != kUncommitted;
  ti.in_order = f == kCommittedInOrder;
  return ti;
}

void start_type_checks() {
  if (PMPI_Comm_dup(MPI_COMM_SELF, &g_check_comm) != MPI_SUCCESS) {
    g_check_comm = MPI_COMM_NULL;
  } else if (PMPI_Comm_set_errhandler(g_check_comm, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
    PMPI_Comm_free(&g_check_comm);
    g_check_comm = MPI_COMM_NULL;
  }
}

void stop_type_checks() {
  if (g_check_comm != MPI_COMM_NULL) PMPI_Comm_free(&g_check_comm);
  g_check_comm = MPI_COMM_NULL;
}

bool map_dtype(MPI_Datatype t, shaddr_dtype *out) {
  if (t == MPI_DATATYPE_NULL) return false;
  const TypeInfo ti = type_info(t);
  return ti.ok && (shaddr_mpi_dtype(t, ti.extent, ti.true_lb, shaddr_dtype_size, out) ||
                   fortran_dtype(t, ti.extent, ti.true_lb, out));
}

bool map_op(MPI_Op op, shaddr_op *out) { return shaddr_mpi_op(op, out); }

bool map_reduction(MPI_Datatype t, MPI_Op op, shaddr_dtype *dt, shaddr_op *sop) {
  if (!map_op(op, sop)) return false;
  if (!map_dtype(t, dt) && !fortran_logical(t, *sop, dt)) return false;
  return shaddr_op_supported(*sop, *dt) == 0;
}

namespace {
// Elements per PMPI_Pack call so that one call's bytes fit an int.
MPI_Count chunk_elems(MPI_Count tsize) {
  return tsize > 0 ? (INT_MAX / 2) / tsize > 0 ? (INT_MAX / 2) / tsize : 1 : INT_MAX;
}

// The user-side buffer of one PMPI_Pack/PMPI_Unpack call: @n elements of @t from @user +
// @offset. MPI_BOTTOM (a null @user, the type's displacements absolute) is legal there, but
// MPICH 4.0.2 refuses a null buffer ("Null pointer in parameter outbuf"): the same bytes are
// then one element of a struct holding the n elements at offset - true_lb, from the data's
// first byte (true_lb, an address) as the buffer.
class PackSide {
 public:
  int init(const char *user, MPI_Count offset, MPI_Count n, MPI_Datatype t) {
    count_ = static_cast<int>(n);
    type_ = t;
    buf_ = at(user, offset);
    if (user) return MPI_SUCCESS;
    MPI_Count lb, extent;
    if (int rc = PMPI_Type_get_true_extent_x(t, &lb, &extent)) return rc;
    const int len = count_;
    const MPI_Aint disp = static_cast<MPI_Aint>(offset - lb);
    if (int rc = PMPI_Type_create_struct(1, &len, &disp, &t, &rebased_)) return rc;
    if (int rc = PMPI_Type_commit(&rebased_)) return rc;
    buf_ = at(nullptr, lb);
    count_ = 1;
    type_ = rebased_;
    return MPI_SUCCESS;
  }
  ~PackSide() {
    if (rebased_ != MPI_DATATYPE_NULL) PMPI_Type_free(&rebased_);
  }
  char *buf() const { return buf_; }
  int count() const { return count_; }
  MPI_Datatype type() const { return type_; }

 private:
  char *buf_ = nullptr;
  int count_ = 0;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Datatype rebased_ = MPI_DATATYPE_NULL;
};
}  // namespace

int pack(const char *user, MPI_Count count, MPI_Datatype t, MPI_Count extent, MPI_Count tsize,
         char *dst) {
  const MPI_Count step = chunk_elems(tsize);
  for (MPI_Count i = 0; i < count; i += step) {
    const MPI_Count n = count - i < step ? count - i : step;
    PackSide side;
    if (int rc = side.init(user, i * extent, n, t)) return rc;
    int pos = 0;
    int rc = PMPI_Pack(side.buf(), side.count(), side.type(), dst + i * tsize,
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
    PackSide side;
    if (int rc = side.init(user, i * extent, n, t)) return rc;
    int pos = 0;
    int rc = PMPI_Unpack(src + i * tsize, static_cast<int>(n * tsize), &pos, side.buf(),
                         side.count(), side.type(), MPI_COMM_SELF);
    if (rc != MPI_SUCCESS || pos != n * tsize) return rc != MPI_SUCCESS ? rc : MPI_ERR_TYPE;
  }
  return MPI_SUCCESS;
}

int View::init_packed() {
  try {
    tmp_.resize(bytes_ ? bytes_ : 1);
  } catch (...) {
    return MPI_ERR_NO_MEM;
  }
  ptr_ = tmp_.data();
  return MPI_SUCCESS;
}

}  // namespace shaddr::interpose
