// SPDX-License-Identifier: MIT
// SHADDR_VERIFY=1 (verify.h): each intercepted collective is checked against the MPI library's
// own PMPI_* on copies of its buffers, and the ranks' call sequences against each other.
#include "verify.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "calls.h"
#include "hash.h"
#include "state.h"
#include "types.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose::verify {
namespace {

const char *const kCallName[SHADDR_IP_COUNT] = {
    "MPI_Barrier",   "MPI_Bcast",    "MPI_Reduce",     "MPI_Allreduce",
    "MPI_Gather",    "MPI_Gatherv",  "MPI_Scatter",    "MPI_Scatterv",
    "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv",
};
const char *const kOpName[SHADDR_OP_COUNT] = {"MPI_SUM",  "MPI_PROD", "MPI_MIN",    "MPI_MAX",
                                              "MPI_LAND", "MPI_LOR",  "MPI_LXOR",   "MPI_BAND",
                                              "MPI_BOR",  "MPI_BXOR", "MPI_MINLOC", "MPI_MAXLOC"};
constexpr int64_t kOpOther = 99;  // a user-defined op, MPI_REPLACE, MPI_NO_OP

[[noreturn]] void abort_job() {
  std::fprintf(stderr, "shaddr-verify: aborting the job (MPI_Abort(MPI_COMM_WORLD, %d))\n",
               kAbortCode);
  std::fflush(stderr);
  // The launcher forwards a rank's output through its proxy and stops forwarding when the
  // abort kills the job: give the report a moment to get out (MPICH's hydra lost it under load).
  usleep(300000);
  PMPI_Abort(MPI_COMM_WORLD, kAbortCode);
  std::_Exit(kAbortCode);  // MPI_Abort does not return; in case it does
}

// ---- Type signatures ------------------------------------------------------------------------
// The sequence of basic types that (count, datatype) stands for, as a polynomial hash
// h = sum t_i * B^(n-1-i) (mod 2^64) of the basic types' ids t_i, and its length n. Grouping does
// not change it (contiguous(2, MPI_INT) has the signature of two MPI_INT) and displacements do
// not enter, as in MPI's type matching rule. A basic type's id is a hash of its MPI name (the
// handles themselves differ between processes in Open MPI).
struct Sig {
  uint64_t h = 0;
  uint64_t n = 0;
  bool ok = true;
};
constexpr uint64_t kBase = shaddr::hash_mix(shaddr::kHashSeed, 1) | 1;  // any odd number

uint64_t pow_base(uint64_t e) {
  uint64_t r = 1, b = kBase;
  for (; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return r;
}
Sig concat(const Sig &a, const Sig &b) { return {a.h * pow_base(b.n) + b.h, a.n + b.n, a.ok && b.ok}; }
Sig repeat(Sig a, uint64_t k) {
  Sig r;
  for (; k; k >>= 1) {
    if (k & 1) r = concat(r, a);
    if (k > 1) a = concat(a, a);
  }
  r.ok = r.ok && a.ok;
  return r;
}

std::string type_name(MPI_Datatype t) {
  char name[MPI_MAX_OBJECT_NAME] = "";
  int len = 0;
  if (t == MPI_DATATYPE_NULL) return "MPI_DATATYPE_NULL";
  if (PMPI_Type_get_name(t, name, &len) != MPI_SUCCESS || !name[0]) {
    MPI_Count size = 0;
    PMPI_Type_size_x(t, &size);
    return "derived type of " + std::to_string(size) + " bytes";
  }
  return name;
}

std::map<MPI_Datatype, Sig> g_named;  // predefined handles do not change within a process
int g_type_kv = MPI_KEYVAL_INVALID;   // derived types: the signature cached as an attribute

int sig_delete(MPI_Datatype, int, void *attr, void *) {
  delete static_cast<Sig *>(attr);
  return MPI_SUCCESS;
}

Sig sig_of(MPI_Datatype t, int depth = 0) {
  Sig bad;
  bad.ok = false;
  int ni = 0, na = 0, nd = 0, comb = 0;
  if (t == MPI_DATATYPE_NULL || depth > 32 ||
      PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS)
    return bad;
  if (comb == MPI_COMBINER_NAMED) {
    auto it = g_named.find(t);
    if (it != g_named.end()) return it->second;
    const std::string n = type_name(t);
    const Sig s{shaddr::hash_bytes(n.data(), n.size()) | 1, 1, true};
    g_named[t] = s;
    return s;
  }
  if (g_type_kv == MPI_KEYVAL_INVALID)
    PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, sig_delete, &g_type_kv, nullptr);
  if (g_type_kv != MPI_KEYVAL_INVALID) {
    void *v = nullptr;
    int flag = 0;
    if (PMPI_Type_get_attr(t, g_type_kv, &v, &flag) == MPI_SUCCESS && flag)
      return *static_cast<Sig *>(v);
  }
  std::vector<int> ints(static_cast<size_t>(std::max(ni, 1)));
  std::vector<MPI_Aint> addrs(static_cast<size_t>(std::max(na, 1)));
  std::vector<MPI_Datatype> types(static_cast<size_t>(std::max(nd, 1)), MPI_DATATYPE_NULL);
  if (PMPI_Type_get_contents(t, ni, na, nd, ints.data(), addrs.data(), types.data()) !=
      MPI_SUCCESS)
    return bad;
  auto n_of = [](int x) { return static_cast<uint64_t>(std::max(x, 0)); };
  Sig s = bad;
  switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED:
      s = sig_of(types[0], depth + 1);
      break;
    case MPI_COMBINER_CONTIGUOUS:
      s = repeat(sig_of(types[0], depth + 1), n_of(ints[0]));
      break;
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR:
    case MPI_COMBINER_INDEXED_BLOCK:
    case MPI_COMBINER_HINDEXED_BLOCK:
      s = repeat(sig_of(types[0], depth + 1), n_of(ints[0]) * n_of(ints[1]));
      break;
    case MPI_COMBINER_INDEXED:
    case MPI_COMBINER_HINDEXED: {
      uint64_t k = 0;
      for (int i = 0; i < ints[0]; i++) k += n_of(ints[1 + i]);
      s = repeat(sig_of(types[0], depth + 1), k);
      break;
    }
    case MPI_COMBINER_STRUCT: {
      Sig acc;
      for (int i = 0; i < ints[0]; i++) acc = concat(acc, repeat(sig_of(types[i], depth + 1), n_of(ints[1 + i])));
      s = acc;
      break;
    }
    case MPI_COMBINER_SUBARRAY: {
      uint64_t k = 1;
      for (int i = 0; i < ints[0]; i++) k *= n_of(ints[1 + ints[0] + i]);
      s = repeat(sig_of(types[0], depth + 1), k);
      break;
    }
    default: {
      // DARRAY, the Fortran combiners and anything newer: as many elements of the old type as
      // fit its size, or (no old type) the combiner and the size stand for the type.
      MPI_Count size = 0, old = 0;
      PMPI_Type_size_x(t, &size);
      if (nd == 1 && PMPI_Type_size_x(types[0], &old) == MPI_SUCCESS && old > 0) {
        s = repeat(sig_of(types[0], depth + 1), static_cast<uint64_t>(size / old));
      } else {
        const uint64_t id[2] = {static_cast<uint64_t>(comb), static_cast<uint64_t>(size)};
        s = Sig{shaddr::hash_bytes(id, sizeof id) | 1, 1, true};
      }
    }
  }
  for (int i = 0; i < nd; i++) {
    int a = 0, b = 0, c = 0, cb = 0;
    if (PMPI_Type_get_envelope(types[i], &a, &b, &c, &cb) == MPI_SUCCESS &&
        cb != MPI_COMBINER_NAMED)
      PMPI_Type_free(&types[i]);
  }
  if (s.ok && g_type_kv != MPI_KEYVAL_INVALID)
    PMPI_Type_set_attr(t, g_type_kv, new Sig(s));
  return s;
}

// One number for (count, type)'s signature; 0 when it could not be taken apart.
uint64_t digest(MPI_Count count, MPI_Datatype t) {
  const Sig s = repeat(sig_of(t), static_cast<uint64_t>(std::max<MPI_Count>(count, 0)));
  if (!s.ok) return 0;
  const uint64_t v[2] = {s.h, s.n};
  return shaddr::hash_bytes(v, sizeof v);
}

// ---- Per communicator --------------------------------------------------------------------------
struct CommInfo {
  uint64_t id = 0;     // this process's numbering, in the order of first use
  uint64_t calls = 0;  // intercepted collectives on it so far
  int rank = 0, size = 0;
  std::string name;
};
int g_comm_kv = MPI_KEYVAL_INVALID;
uint64_t g_next_id = 0;
uint64_t g_inject_seen = 0;  // SHADDR_VERIFY_INJECT bookkeeping

int comm_delete(MPI_Comm, int, void *attr, void *) {
  delete static_cast<CommInfo *>(attr);
  return MPI_SUCCESS;
}

// nullptr: no checks (intercommunicators, MPI_COMM_NULL: forwarded as they are).
CommInfo *info_of(MPI_Comm comm) {
  int inter = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
    return nullptr;
  if (g_comm_kv == MPI_KEYVAL_INVALID &&
      PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete, &g_comm_kv, nullptr) !=
          MPI_SUCCESS)
    return nullptr;
  void *v = nullptr;
  int flag = 0;
  if (PMPI_Comm_get_attr(comm, g_comm_kv, &v, &flag) != MPI_SUCCESS) return nullptr;
  if (flag) return static_cast<CommInfo *>(v);
  auto *ci = new CommInfo;
  ci->id = ++g_next_id;
  PMPI_Comm_rank(comm, &ci->rank);
  PMPI_Comm_size(comm, &ci->size);
  char name[MPI_MAX_OBJECT_NAME] = "";
  int len = 0;
  if (PMPI_Comm_get_name(comm, name, &len) == MPI_SUCCESS) ci->name = name;
  if (ci->name.empty()) ci->name = "unnamed";
  PMPI_Comm_set_attr(comm, g_comm_kv, ci);
  return ci;
}

// ---- Call sequence -----------------------------------------------------------------------------
// What every rank of the communicator must agree on for one call (-1 / 0: not common to all).
struct Desc {
  int64_t call;
  int64_t coll;
  int64_t root;
  int64_t bytes;
  uint64_t sig;
  int64_t op;
};
static_assert(sizeof(Desc) == 48, "Desc travels as bytes");

int64_t op_id(MPI_Op op) {
  shaddr_op sop;
  return map_op(op, &sop) ? static_cast<int64_t>(sop) : kOpOther;
}

std::string op_str(int64_t op) {
  if (op < 0) return "-";
  if (op < SHADDR_OP_COUNT) return kOpName[op];
  return "user-defined/other";
}

std::string desc_str(const Desc &d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "call %" PRId64 " %s, root %s, %s bytes, signature %016" PRIx64 ", op %s",
                d.call, d.coll >= 0 && d.coll < SHADDR_IP_COUNT ? kCallName[d.coll] : "?",
                d.root >= 0 ? std::to_string(d.root).c_str() : "-",
                d.bytes >= 0 ? std::to_string(d.bytes).c_str() : "-", d.sig,
                op_str(d.op).c_str());
  return buf;
}

// A check of one call: started by start(), which numbers the call and compares the ranks'
// descriptions of it (aborting on a difference).
struct Check {
  shaddr_interpose_call call = SHADDR_IP_BARRIER;
  MPI_Comm comm = MPI_COMM_NULL;
  CommInfo *ci = nullptr;
  std::string args;         // the call as printed in reports
  uint64_t forwarded0 = 0;  // forwarded_calls(call) before the call

  // Did libshaddr (node or hierarchy) do this call, rather than PMPI_* as it came? The same
  // answer on every rank: the interposer's decision to forward is taken from values MPI
  // requires to be the same everywhere.
  bool by_libshaddr() const { return forwarded_calls(call) == forwarded0; }

  std::string where() const {
    char buf[256];
    std::snprintf(buf, sizeof buf, "communicator #%" PRIu64 " \"%s\" (%d ranks), rank %d, call %" PRIu64,
                  ci->id, ci->name.c_str(), ci->size, ci->rank, ci->calls);
    return buf;
  }
};

void check_sequence(const Check &k, const Desc &d) {
  const uint64_t h = shaddr::hash_bytes(&d, sizeof d);
  uint64_t in[2] = {h, ~h}, out[2] = {0, 0};
  if (PMPI_Allreduce(in, out, 2, MPI_UINT64_T, MPI_MAX, k.comm) != MPI_SUCCESS) return;
  if (out[0] == ~out[1]) return;  // max(h) == min(h): every rank described the same call
  std::vector<Desc> all(static_cast<size_t>(k.ci->size));
  PMPI_Allgather(&d, sizeof d, MPI_BYTE, all.data(), sizeof d, MPI_BYTE, k.comm);
  if (k.ci->rank == 0) {
    std::fprintf(stderr,
                 "shaddr-verify: CALL SEQUENCE MISMATCH on communicator #%" PRIu64
                 " \"%s\" (%d ranks) at call %" PRIu64
                 ": the ranks are not in the same collective with matching arguments:\n",
                 k.ci->id, k.ci->name.c_str(), k.ci->size, k.ci->calls);
    for (int r = 0; r < k.ci->size; r++)
      std::fprintf(stderr, "shaddr-verify:   rank %d: %s\n", r, desc_str(all[r]).c_str());
    abort_job();
  }
  PMPI_Barrier(k.comm);  // rank 0 reports and aborts the job meanwhile
  abort_job();
}

bool start(Check &k, MPI_Comm comm, shaddr_interpose_call call, int64_t root, int64_t bytes,
           uint64_t sig, int64_t op) {
  k.call = call;
  k.comm = comm;
  k.ci = info_of(comm);
  if (!k.ci) return false;
  k.ci->calls++;
  const Desc d{static_cast<int64_t>(k.ci->calls), call, root, bytes, sig, op};
  check_sequence(k, d);
  k.forwarded0 = forwarded_calls(call);
  return true;
}

// ---- Buffers -------------------------------------------------------------------------------------
// Bytes [lo, hi) relative to a buffer's address that (count, type) touches, gaps included.
struct Span {
  MPI_Aint lo = 0, hi = 0;
};

Span span_of(MPI_Count count, const TypeInfo &ti) {
  if (count <= 0 || ti.size == 0) return {};
  return {static_cast<MPI_Aint>(ti.true_lb),
          static_cast<MPI_Aint>(ti.true_lb + ti.true_extent + (count - 1) * ti.extent)};
}

Span vspan_of(const int *counts, const int *displs, int n, const TypeInfo &ti) {
  Span s;
  bool any = false;
  for (int i = 0; i < n; i++) {
    Span e = span_of(counts[i], ti);
    if (e.lo == e.hi) continue;
    e.lo += static_cast<MPI_Aint>(displs[i] * ti.extent);
    e.hi += static_cast<MPI_Aint>(displs[i] * ti.extent);
    s = any ? Span{std::min(s.lo, e.lo), std::max(s.hi, e.hi)} : e;
    any = true;
  }
  return s;
}

char *at(const void *base, MPI_Aint off) {
  return reinterpret_cast<char *>(reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(off));
}

// A copy of a user buffer's span; as_buf() is the address to hand MPI for the copy.
struct Copy {
  const void *user = nullptr;
  Span sp;
  std::vector<char> bytes;
  bool ok = false;

  bool save(const void *buf, Span s) {
    user = buf;
    sp = s;
    const size_t n = static_cast<size_t>(s.hi - s.lo);
    try {
      bytes.assign(n + 1, 0);  // + 1: never an empty vector's null data()
    } catch (...) {
      return ok = false;
    }
    if (n) std::memcpy(bytes.data(), at(buf, s.lo), n);
    return ok = true;
  }
  size_t size() const { return static_cast<size_t>(sp.hi - sp.lo); }
  void *as_buf() { return at(bytes.data(), -sp.lo); }
};

// ---- Comparison ---------------------------------------------------------------------------------
// The bytes of a reduction's element that carry its value (long double's padding, pair types'
// padding do not: implementations leave different things there).
struct Field {
  size_t off, len;
  char fp;  // 'f' float, 'd' double, 'l' long double, 0: compared as bytes
};
template <typename V>
struct PairOf {
  V v;
  int i;
};
std::vector<Field> fields_of(shaddr_dtype dt) {
  switch (dt) {
    case SHADDR_FLOAT: return {{0, 4, 'f'}};
    case SHADDR_DOUBLE: return {{0, 8, 'd'}};
    case SHADDR_LONG_DOUBLE: return {{0, 10, 'l'}};
    case SHADDR_C_FLOAT_COMPLEX: return {{0, 4, 'f'}, {4, 4, 'f'}};
    case SHADDR_C_DOUBLE_COMPLEX: return {{0, 8, 'd'}, {8, 8, 'd'}};
    case SHADDR_C_LONG_DOUBLE_COMPLEX: return {{0, 10, 'l'}, {sizeof(long double), 10, 'l'}};
    case SHADDR_FLOAT_INT: return {{0, 4, 0}, {offsetof(PairOf<float>, i), 4, 0}};
    case SHADDR_DOUBLE_INT: return {{0, 8, 0}, {offsetof(PairOf<double>, i), 4, 0}};
    case SHADDR_LONG_INT: return {{0, 8, 0}, {offsetof(PairOf<long>, i), 4, 0}};
    case SHADDR_SHORT_INT: return {{0, 2, 0}, {offsetof(PairOf<short>, i), 4, 0}};
    case SHADDR_2INT:
    case SHADDR_2FLOAT:  // MINLOC/MAXLOC pick operands: exact in any order
      return {{0, 8, 0}};
    case SHADDR_2DOUBLE: return {{0, 16, 0}};
    case SHADDR_LONG_DOUBLE_INT: return {{0, 10, 0}, {offsetof(PairOf<long double>, i), 4, 0}};
    default: return {{0, static_cast<size_t>(shaddr_dtype_size(dt)), 0}};
  }
}

// Two results of a sum or product of p operands in different orders: each step rounds by at
// most eps relative, so sums differ by at most 2 p eps times the operands' absolute sum, products
// by 2 p eps relative.
template <typename T>
bool close(T a, T b, T abs_sum, int p, bool prod) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (a == b) return true;
  if (std::isinf(a) || std::isinf(b)) return !prod && std::isinf(abs_sum);
  const T eps = std::numeric_limits<T>::epsilon();
  const T tiny = std::numeric_limits<T>::denorm_min() * static_cast<T>(p);
  const T scale = prod ? std::max(std::fabs(a), std::fabs(b)) : abs_sum;
  return std::fabs(a - b) <= T(2) * static_cast<T>(p) * eps * scale + tiny;
}
template <typename T>
T load(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof v < 16 ? sizeof v : 16);
  return v;
}

struct Diff {
  bool any = false;
  size_t first = 0;  // byte offset within the compared span
  size_t count = 0;  // differing bytes (or values)
};

Diff diff_bytes(const char *a, const char *b, size_t n) {
  Diff d;
  if (!n || std::memcmp(a, b, n) == 0) return d;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) {
      if (!d.any) d.first = i;
      d.any = true;
      d.count++;
    }
  return d;
}

// A reduction's count elements of dt at got and want; abs_sum: the operands' absolute sums
// (floating-point MPI_SUM only), p ranks.
Diff diff_reduction(const char *got, const char *want, const char *abs_sum, int count,
                    shaddr_dtype dt, shaddr_op op, int p) {
  Diff d;
  const size_t esize = static_cast<size_t>(shaddr_dtype_size(dt));
  const bool tol = op == SHADDR_OP_SUM || op == SHADDR_OP_PROD;
  const bool prod = op == SHADDR_OP_PROD;
  const std::vector<Field> fields = fields_of(dt);
  for (size_t e = 0; e < static_cast<size_t>(count); e++) {
    for (const Field &f : fields) {
      const size_t o = e * esize + f.off;
      bool same = std::memcmp(got + o, want + o, f.len) == 0;
      if (!same && tol && f.fp) {
        switch (f.fp) {
          case 'f':
            same = close(load<float>(got + o), load<float>(want + o),
                         abs_sum ? load<float>(abs_sum + o) : 0.0f, p, prod);
            break;
          case 'd':
            same = close(load<double>(got + o), load<double>(want + o),
                         abs_sum ? load<double>(abs_sum + o) : 0.0, p, prod);
            break;
          default:
            same = close(load<long double>(got + o), load<long double>(want + o),
                         abs_sum ? load<long double>(abs_sum + o) : 0.0L, p, prod);
        }
      }
      if (!same) {
        if (!d.any) d.first = o;
        d.any = true;
        d.count++;
      }
    }
  }
  return d;
}

std::string hex(const char *p, size_t n) {
  std::string s;
  char b[4];
  for (size_t i = 0; i < n; i++) {
    std::snprintf(b, sizeof b, "%s%02x", i ? " " : "", static_cast<unsigned char>(p[i]));
    s += b;
  }
  return s;
}

// The element of predefined type t that holds byte off of a buffer, printed as a value.
std::string value_at(const char *buf, size_t off, MPI_Datatype t) {
  shaddr_dtype dt;
  if (t == MPI_DATATYPE_NULL || !map_dtype(t, &dt)) return "";
  const size_t es = static_cast<size_t>(shaddr_dtype_size(dt));
  const char *e = buf + off / es * es;
  char s[96] = "";
  switch (dt) {
    case SHADDR_INT8: std::snprintf(s, sizeof s, "%d", load<int8_t>(e)); break;
    case SHADDR_UINT8: std::snprintf(s, sizeof s, "%u", load<uint8_t>(e)); break;
    case SHADDR_INT16: std::snprintf(s, sizeof s, "%d", load<int16_t>(e)); break;
    case SHADDR_UINT16: std::snprintf(s, sizeof s, "%u", load<uint16_t>(e)); break;
    case SHADDR_INT32: std::snprintf(s, sizeof s, "%d", load<int32_t>(e)); break;
    case SHADDR_UINT32: std::snprintf(s, sizeof s, "%u", load<uint32_t>(e)); break;
    case SHADDR_INT64: std::snprintf(s, sizeof s, "%" PRId64, load<int64_t>(e)); break;
    case SHADDR_UINT64: std::snprintf(s, sizeof s, "%" PRIu64, load<uint64_t>(e)); break;
    case SHADDR_FLOAT: std::snprintf(s, sizeof s, "%.9g", load<float>(e)); break;
    case SHADDR_DOUBLE: std::snprintf(s, sizeof s, "%.17g", load<double>(e)); break;
    case SHADDR_LONG_DOUBLE: std::snprintf(s, sizeof s, "%.21Lg", load<long double>(e)); break;
    default: return "";
  }
  return std::string(" (element ") + std::to_string(off / es) + " as " + type_name(t) + ": " + s + ")";
}

// got and want hold the span sp of a buffer (got: what the call produced, want: PMPI_*'s).
[[noreturn]] void report(const Check &k, const char *what, const Diff &d, const char *got,
                         const char *want, Span sp, MPI_Datatype t) {
  const size_t n = std::min<size_t>(8, static_cast<size_t>(sp.hi - sp.lo) - d.first);
  const size_t off = static_cast<size_t>(sp.lo) + d.first;  // from the buffer's address
  std::fprintf(stderr,
               "shaddr-verify: RESULT MISMATCH: %s: %s: %s differs from the MPI library's "
               "(PMPI_*) at byte offset %zu of [%lld, %lld): libshaddr %s%s, MPI %s%s; %zu "
               "byte(s)/value(s) differ\n",
               k.where().c_str(), k.args.c_str(), what, off, static_cast<long long>(sp.lo),
               static_cast<long long>(sp.hi), hex(got + d.first, n).c_str(),
               value_at(at(got, -sp.lo), off, t).c_str(), hex(want + d.first, n).c_str(),
               value_at(at(want, -sp.lo), off, t).c_str(), d.count);
  abort_job();
}

// SHADDR_VERIFY_INJECT=n: spoil the n-th result this process checks as the last rank of its
// communicator (a byte in the middle of the span, the top byte of its 8-byte word: a float's
// or double's sign and exponent, an integer's high byte).
void maybe_inject(const Check &k, void *user, Span sp) {
  const uint64_t n = settings().verify_inject;
  if (!n || k.ci->rank != k.ci->size - 1 || sp.hi == sp.lo || ++g_inject_seen != n) return;
  const size_t len = static_cast<size_t>(sp.hi - sp.lo);
  const size_t off = std::min(len - 1, (len / 2) / 8 * 8 + 7);
  at(user, sp.lo + static_cast<MPI_Aint>(off))[0] ^= static_cast<char>(0xff);
  std::fprintf(stderr,
               "shaddr-verify: SHADDR_VERIFY_INJECT=%" PRIu64 ": %s: spoiled byte %lld of %s's "
               "result\n",
               n, k.where().c_str(), static_cast<long long>(sp.lo + static_cast<MPI_Aint>(off)),
               kCallName[k.call]);
}

// The user's output against the reference copy, byte for byte.
void compare_out(const Check &k, const char *what, void *user, Copy &ref, MPI_Datatype t) {
  if (!ref.ok) return;
  maybe_inject(k, user, ref.sp);
  const char *got = at(user, ref.sp.lo);
  const Diff d = diff_bytes(got, ref.bytes.data(), ref.size());
  if (d.any) report(k, what, d, got, ref.bytes.data(), ref.sp, t);
}

// A send buffer must come back as it went in.
void compare_in(const Check &k, const char *what, Copy &in, MPI_Datatype t) {
  if (!in.ok) return;
  const char *now = at(in.user, in.sp.lo);
  const Diff d = diff_bytes(now, in.bytes.data(), in.size());
  if (d.any) report(k, what, d, now, in.bytes.data(), in.sp, t);
}

std::string args_str(const char *call, const std::string &rest) {
  return std::string(call) + "(" + rest + ")";
}
std::string cnt(const char *what, MPI_Count count, MPI_Datatype t) {
  return std::string(what) + " " + std::to_string(count) + " x " + type_name(t);
}
bool bad_root(const Check &k, int root) { return root < 0 || root >= k.ci->size; }

// ---- Reductions -----------------------------------------------------------------------------
// The operands' elementwise absolute values (floating-point components), for the tolerance of
// sums; empty when the reduction needs no tolerance.
std::vector<char> abs_of(const char *in, int count, shaddr_dtype dt) {
  std::vector<char> a(in, in + static_cast<size_t>(count) * static_cast<size_t>(shaddr_dtype_size(dt)));
  const size_t es = static_cast<size_t>(shaddr_dtype_size(dt));
  for (const Field &f : fields_of(dt))
    for (size_t e = 0; e < static_cast<size_t>(count); e++) {
      char *p = a.data() + e * es + f.off;
      if (f.fp == 'f') {
        float v = std::fabs(load<float>(p));
        std::memcpy(p, &v, sizeof v);
      } else if (f.fp == 'd') {
        double v = std::fabs(load<double>(p));
        std::memcpy(p, &v, sizeof v);
      } else if (f.fp == 'l') {
        long double v = std::fabs(load<long double>(p));
        std::memcpy(p, &v, 10);
      }
    }
  return a;
}

bool float_sum(shaddr_dtype dt, shaddr_op op) {
  if (op != SHADDR_OP_SUM) return false;
  for (const Field &f : fields_of(dt))
    if (f.fp) return true;
  return false;
}

// An Allreduce result must be bitwise the same on every rank (the value bytes of each element).
void check_identical(const Check &k, const char *res, int count, shaddr_dtype dt,
                     MPI_Datatype t) {
  const size_t es = static_cast<size_t>(shaddr_dtype_size(dt));
  const std::vector<Field> fields = fields_of(dt);
  uint64_t h = shaddr::kHashSeed;
  for (size_t e = 0; e < static_cast<size_t>(count); e++)
    for (const Field &f : fields) h = shaddr::hash_bytes(res + e * es + f.off, f.len, h);
  uint64_t in[2] = {h, ~h}, out[2] = {0, 0};
  if (PMPI_Allreduce(in, out, 2, MPI_UINT64_T, MPI_MAX, k.comm) != MPI_SUCCESS) return;
  if (out[0] == ~out[1]) return;
  // Differ: everyone compares with rank 0's result and says where it differs.
  std::vector<char> zero(res, res + static_cast<size_t>(count) * es);
  PMPI_Bcast(zero.data(), static_cast<int>(zero.size()), MPI_BYTE, 0, k.comm);
  const Diff d = diff_reduction(res, zero.data(), nullptr, count, dt, SHADDR_OP_MIN, 1);
  if (d.any) {
    const size_t n = std::min<size_t>(8, zero.size() - d.first);
    std::fprintf(stderr,
                 "shaddr-verify: RESULT MISMATCH: %s: %s: the result differs between ranks: "
                 "at byte offset %zu this rank has %s%s, rank 0 %s%s; %zu value(s) differ\n",
                 k.where().c_str(), k.args.c_str(), d.first, hex(res + d.first, n).c_str(),
                 value_at(res, d.first, t).c_str(), hex(zero.data() + d.first, n).c_str(),
                 value_at(zero.data(), d.first, t).c_str(), d.count);
    std::fflush(stderr);
  }
  PMPI_Barrier(k.comm);  // every rank has printed
  if (k.ci->rank == 0) abort_job();
  PMPI_Barrier(k.comm);  // rank 0 aborts the job meanwhile
  abort_job();
}

}  // namespace

int barrier(MPI_Comm comm) {
  Check k;
  k.args = "MPI_Barrier()";
  start(k, comm, SHADDR_IP_BARRIER, -1, 0, 0, -1);
  return impl::barrier(comm);
}

int bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  const TypeInfo ti = type_info(type);
  Check k;
  if (count < 0 || !ti.ok) return impl::bcast(buf, count, type, root, comm);
  if (!start(k, comm, SHADDR_IP_BCAST, root, count * ti.size, digest(count, type), -1) ||
      bad_root(k, root))
    return impl::bcast(buf, count, type, root, comm);
  k.args = args_str("MPI_Bcast", cnt("count", count, type) + ", root " + std::to_string(root));
  Copy ref;
  ref.save(buf, span_of(count, ti));
  const bool ref_ok =
      ref.ok && PMPI_Bcast(ref.as_buf(), count, type, root, comm) == MPI_SUCCESS;
  const int rc = impl::bcast(buf, count, type, root, comm);
  if (rc == MPI_SUCCESS && ref_ok && k.by_libshaddr())
    compare_out(k, k.ci->rank == root ? "the root's buffer" : "the received data", buf, ref,
                type);
  return rc;
}

// Reduce (root >= 0) and Allreduce (root < 0).
int reduction(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
              int root, MPI_Comm comm) {
  const bool all = root < 0;
  const shaddr_interpose_call call = all ? SHADDR_IP_ALLREDUCE : SHADDR_IP_REDUCE;
  auto run = [&] {
    return all ? impl::allreduce(sendbuf, recvbuf, count, type, op, comm)
               : impl::reduce(sendbuf, recvbuf, count, type, op, root, comm);
  };
  const TypeInfo ti = type_info(type);
  Check k;
  if (count < 0 || !ti.ok) return run();
  if (!start(k, comm, call, root, count * ti.size, digest(count, type), op_id(op)) ||
      (!all && bad_root(k, root)))
    return run();
  k.args = args_str(kCallName[call], cnt("count", count, type) + ", " + op_str(op_id(op)) +
                                         (all ? "" : ", root " + std::to_string(root)));
  // Only what libshaddr can reduce is compared. Anything else goes to PMPI_* as it is, and its
  // op must not run twice: a user-defined op may keep state or touch memory beyond what its
  // datatype describes (BLACS's absolute-max ops read their length from a global and process
  // that many elements, which would overrun a copy of the datatype's span).
  shaddr_dtype dt;
  shaddr_op sop;
  if (!map_reduction(type, op, &dt, &sop)) return run();
  const bool is_root = all || k.ci->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  const Span sp = span_of(count, ti);
  Copy in, ref;
  in.save(in_place ? recvbuf : sendbuf, sp);
  if (is_root) ref.save(recvbuf, sp);
  bool ref_ok = in.ok && (!is_root || ref.ok);
  if (ref_ok) {
    const void *s = in_place ? MPI_IN_PLACE : in.as_buf();
    ref_ok = (all ? PMPI_Allreduce(s, ref.as_buf(), count, type, op, comm)
                  : PMPI_Reduce(s, is_root ? ref.as_buf() : nullptr, count, type, op, root,
                                comm)) == MPI_SUCCESS;
  }
  const int rc = run();
  if (!k.by_libshaddr()) return rc;
  // Collective steps first, on every rank alike, then the local comparisons.
  std::vector<char> abs_sum;
  if (float_sum(dt, sop) && in.ok) {
    std::vector<char> a = abs_of(in.bytes.data(), count, dt);  // the span of a predefined type
                                                               // starts at its first element
    abs_sum.assign(a.size(), 0);
    const int arc = all ? PMPI_Allreduce(a.data(), abs_sum.data(), count, type, MPI_SUM, comm)
                        : PMPI_Reduce(a.data(), abs_sum.data(), count, type, MPI_SUM, root, comm);
    if (arc != MPI_SUCCESS) abs_sum.clear();
  }
  if (all) check_identical(k, static_cast<const char *>(recvbuf), count, dt, type);
  if (rc != MPI_SUCCESS || !ref_ok) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, type);
  if (!is_root) return rc;
  maybe_inject(k, recvbuf, sp);
  const char *got = static_cast<const char *>(recvbuf);
  const Diff d = diff_reduction(got, ref.bytes.data(), abs_sum.empty() ? nullptr : abs_sum.data(),
                                count, dt, sop, k.ci->size);
  if (d.any) report(k, "the result", d, got, ref.bytes.data(), sp, type);
  return rc;
}

int reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
           int root, MPI_Comm comm) {
  if (root < 0) return impl::reduce(sendbuf, recvbuf, count, type, op, root, comm);
  return reduction(sendbuf, recvbuf, count, type, op, root, comm);
}

int allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
              MPI_Comm comm) {
  return reduction(sendbuf, recvbuf, count, type, op, -1, comm);
}

int gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
           int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  auto run = [&] {
    return impl::gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = is_root ? type_info(recvtype) : TypeInfo{};
  if ((!in_place && (!sti.ok || sendcount < 0)) || (is_root && (!rti.ok || recvcount < 0)))
    return run();
  const int64_t bytes = is_root ? recvcount * rti.size : sendcount * sti.size;
  const uint64_t sig = is_root ? digest(recvcount, recvtype) : digest(sendcount, sendtype);
  start(k, comm, SHADDR_IP_GATHER, root, bytes, sig, -1);
  k.args = args_str("MPI_Gather", (in_place ? std::string("MPI_IN_PLACE")
                                            : cnt("send", sendcount, sendtype)) +
                                      (is_root ? ", " + cnt("recv", recvcount, recvtype) : "") +
                                      ", root " + std::to_string(root));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  if (is_root) ref.save(recvbuf, span_of(static_cast<MPI_Count>(recvcount) * ci->size, rti));
  bool ref_ok = (in_place || in.ok) && (!is_root || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Gather(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                         is_root ? ref.as_buf() : nullptr, recvcount, recvtype, root,
                         comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  if (is_root) compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
            MPI_Comm comm) {
  auto run = [&] {
    return impl::gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                         root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = is_root ? type_info(recvtype) : TypeInfo{};
  if ((!in_place && (!sti.ok || sendcount < 0)) || (is_root && !rti.ok)) return run();
  // Non-roots do not know the counts: only the call and root are common.
  start(k, comm, SHADDR_IP_GATHERV, root, -1, 0, -1);
  k.args = args_str("MPI_Gatherv", (in_place ? std::string("MPI_IN_PLACE")
                                             : cnt("send", sendcount, sendtype)) +
                                       ", root " + std::to_string(root));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  if (is_root) ref.save(recvbuf, vspan_of(recvcounts, displs, ci->size, rti));
  bool ref_ok = (in_place || in.ok) && (!is_root || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Gatherv(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                          is_root ? ref.as_buf() : nullptr, recvcounts, displs, recvtype, root,
                          comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  if (is_root) compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
            int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  auto run = [&] {
    return impl::scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && recvbuf == MPI_IN_PLACE;
  const TypeInfo sti = is_root ? type_info(sendtype) : TypeInfo{};
  const TypeInfo rti = in_place ? TypeInfo{} : type_info(recvtype);
  if ((is_root && (!sti.ok || sendcount < 0)) || (!in_place && (!rti.ok || recvcount < 0)))
    return run();
  const int64_t bytes = is_root ? sendcount * sti.size : recvcount * rti.size;
  const uint64_t sig = is_root ? digest(sendcount, sendtype) : digest(recvcount, recvtype);
  start(k, comm, SHADDR_IP_SCATTER, root, bytes, sig, -1);
  k.args = args_str("MPI_Scatter", (is_root ? cnt("send", sendcount, sendtype) + ", " : "") +
                                       (in_place ? std::string("MPI_IN_PLACE")
                                                 : cnt("recv", recvcount, recvtype)) +
                                       ", root " + std::to_string(root));
  Copy in, ref;
  if (is_root) in.save(sendbuf, span_of(static_cast<MPI_Count>(sendcount) * ci->size, sti));
  if (!in_place) ref.save(recvbuf, span_of(recvcount, rti));
  bool ref_ok = (!is_root || in.ok) && (in_place || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Scatter(is_root ? in.as_buf() : nullptr, sendcount, sendtype,
                          in_place ? MPI_IN_PLACE : ref.as_buf(), recvcount, recvtype, root,
                          comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (is_root) compare_in(k, "the root's send buffer", in, sendtype);
  if (!in_place) compare_out(k, "the received block", recvbuf, ref, recvtype);
  return rc;
}

int scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
             MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
             int root, MPI_Comm comm) {
  auto run = [&] {
    return impl::scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype,
                          root, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  if (!ci || root < 0 || root >= ci->size) return run();
  const bool is_root = ci->rank == root;
  const bool in_place = is_root && recvbuf == MPI_IN_PLACE;
  const TypeInfo sti = is_root ? type_info(sendtype) : TypeInfo{};
  const TypeInfo rti = in_place ? TypeInfo{} : type_info(recvtype);
  if ((is_root && !sti.ok) || (!in_place && (!rti.ok || recvcount < 0))) return run();
  start(k, comm, SHADDR_IP_SCATTERV, root, -1, 0, -1);
  k.args = args_str("MPI_Scatterv", (in_place ? std::string("MPI_IN_PLACE")
                                              : cnt("recv", recvcount, recvtype)) +
                                        ", root " + std::to_string(root));
  Copy in, ref;
  if (is_root) in.save(sendbuf, vspan_of(sendcounts, displs, ci->size, sti));
  if (!in_place) ref.save(recvbuf, span_of(recvcount, rti));
  bool ref_ok = (!is_root || in.ok) && (in_place || ref.ok);
  if (ref_ok)
    ref_ok = PMPI_Scatterv(is_root ? in.as_buf() : nullptr, sendcounts, displs, sendtype,
                           in_place ? MPI_IN_PLACE : ref.as_buf(), recvcount, recvtype, root,
                           comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (is_root) compare_in(k, "the root's send buffer", in, sendtype);
  if (!in_place) compare_out(k, "the received block", recvbuf, ref, recvtype);
  return rc;
}

int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto run = [&] {
    return impl::allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  };
  Check k;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!rti.ok || recvcount < 0 || (!in_place && (!sti.ok || sendcount < 0))) return run();
  if (!start(k, comm, SHADDR_IP_ALLGATHER, -1, recvcount * rti.size,
             digest(recvcount, recvtype), -1))
    return run();
  k.args = args_str("MPI_Allgather", (in_place ? std::string("MPI_IN_PLACE")
                                               : cnt("send", sendcount, sendtype)) +
                                         ", " + cnt("recv", recvcount, recvtype));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  ref.save(recvbuf, span_of(static_cast<MPI_Count>(recvcount) * k.ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Allgather(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                            ref.as_buf(), recvcount, recvtype, comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               const int recvcounts[], const int displs[], MPI_Datatype recvtype,
               MPI_Comm comm) {
  auto run = [&] {
    return impl::allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                            recvtype, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!ci || !rti.ok || (!in_place && (!sti.ok || sendcount < 0))) return run();
  // Every rank knows every count: they are part of the call's description.
  int64_t total = 0;
  uint64_t sig = digest(1, recvtype);
  for (int i = 0; i < ci->size; i++) {
    total += recvcounts[i] * rti.size;
    const int64_t c = recvcounts[i];
    sig = shaddr::hash_bytes(&c, sizeof c, sig);
  }
  start(k, comm, SHADDR_IP_ALLGATHERV, -1, total, sig, -1);
  k.args = args_str("MPI_Allgatherv", (in_place ? std::string("MPI_IN_PLACE")
                                                : cnt("send", sendcount, sendtype)) +
                                          ", recv " + std::to_string(total) + " bytes of " +
                                          type_name(recvtype));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(sendcount, sti));
  ref.save(recvbuf, vspan_of(recvcounts, displs, ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Allgatherv(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                             ref.as_buf(), recvcounts, displs, recvtype, comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the gathered data", recvbuf, ref, recvtype);
  return rc;
}

int alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
             int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto run = [&] {
    return impl::alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  };
  Check k;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!rti.ok || recvcount < 0 || (!in_place && (!sti.ok || sendcount < 0))) return run();
  if (!start(k, comm, SHADDR_IP_ALLTOALL, -1, recvcount * rti.size,
             digest(recvcount, recvtype), -1))
    return run();
  k.args = args_str("MPI_Alltoall", (in_place ? std::string("MPI_IN_PLACE")
                                              : cnt("send", sendcount, sendtype)) +
                                        ", " + cnt("recv", recvcount, recvtype));
  Copy in, ref;
  if (!in_place) in.save(sendbuf, span_of(static_cast<MPI_Count>(sendcount) * k.ci->size, sti));
  ref.save(recvbuf, span_of(static_cast<MPI_Count>(recvcount) * k.ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Alltoall(in_place ? MPI_IN_PLACE : in.as_buf(), sendcount, sendtype,
                           ref.as_buf(), recvcount, recvtype, comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the received data", recvbuf, ref, recvtype);
  return rc;
}

int alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
              MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[],
              MPI_Datatype recvtype, MPI_Comm comm) {
  auto run = [&] {
    return impl::alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                           rdispls, recvtype, comm);
  };
  Check k;
  CommInfo *ci = info_of(comm);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const TypeInfo sti = in_place ? TypeInfo{} : type_info(sendtype);
  const TypeInfo rti = type_info(recvtype);
  if (!ci || !rti.ok || (!in_place && !sti.ok)) return run();
  start(k, comm, SHADDR_IP_ALLTOALLV, -1, -1, 0, -1);
  k.args = "MPI_Alltoallv(" + std::string(in_place ? "MPI_IN_PLACE, " : "") + "recv type " +
           type_name(recvtype) + ")";
  Copy in, ref;
  if (!in_place) in.save(sendbuf, vspan_of(sendcounts, sdispls, ci->size, sti));
  ref.save(recvbuf, vspan_of(recvcounts, rdispls, ci->size, rti));
  bool ref_ok = (in_place || in.ok) && ref.ok;
  if (ref_ok)
    ref_ok = PMPI_Alltoallv(in_place ? MPI_IN_PLACE : in.as_buf(), sendcounts, sdispls,
                            sendtype, ref.as_buf(), recvcounts, rdispls, recvtype,
                            comm) == MPI_SUCCESS;
  const int rc = run();
  if (rc != MPI_SUCCESS || !ref_ok || !k.by_libshaddr()) return rc;
  if (!in_place) compare_in(k, "the send buffer", in, sendtype);
  compare_out(k, "the received data", recvbuf, ref, recvtype);
  return rc;
}

}  // namespace shaddr::interpose::verify
