// SPDX-License-Identifier: MIT
// SHADDR_VERIFY=1 (verify.h): user buffers copied before a call, results compared with the MPI
// library's own (PMPI_*) byte for byte or within a reduction's rounding.
#include "verify_check.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "state.h"
#include "verify.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose::verify {

// ---- Buffers -------------------------------------------------------------------------------------

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


bool Copy::save(const void *buf, Span s) {
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

namespace {

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

}  // namespace

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

namespace {

uint64_t g_inject_seen = 0;  // SHADDR_VERIFY_INJECT bookkeeping

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

}  // namespace

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

}  // namespace shaddr::interpose::verify
