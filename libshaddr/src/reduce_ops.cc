// SPDX-License-Identifier: MIT
// Reduction kernels. One loop per (op, element type), instantiated from templates twice: for the
// x86-64 baseline (SSE2) and for AVX2, chosen once at run time. The library builds at -O2, where
// GCC only vectorises loops without an epilogue, so the kernels ask for -O3. Elements are read
// and written with memcpy: buffers need no alignment, and the vectoriser turns the copies into
// unaligned vector loads and stores.
#include "reduce_ops.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "error.h"

namespace shaddr {
namespace {

// ---- Element types -------------------------------------------------------------------------

template <class T>
struct Complex {
  T re, im;
};

// MPI_FLOAT_INT and friends: struct { value; int index; } with C's padding; Fortran's
// MPI_2REAL and MPI_2DOUBLE_PRECISION: the index has the value's type.
template <class V, class I = int>
struct Pair {
  V value;
  I index;
};

static_assert(sizeof(bool) == 1, "C_BOOL is handled as a byte");

template <shaddr_dtype D> struct Elem;
#define SHADDR_ELEM(d, t) \
  template <>             \
  struct Elem<d> {        \
    using type = t;       \
  }
SHADDR_ELEM(SHADDR_BYTE, uint8_t);
SHADDR_ELEM(SHADDR_INT8, int8_t);
SHADDR_ELEM(SHADDR_UINT8, uint8_t);
SHADDR_ELEM(SHADDR_INT16, int16_t);
SHADDR_ELEM(SHADDR_UINT16, uint16_t);
SHADDR_ELEM(SHADDR_INT32, int32_t);
SHADDR_ELEM(SHADDR_UINT32, uint32_t);
SHADDR_ELEM(SHADDR_INT64, int64_t);
SHADDR_ELEM(SHADDR_UINT64, uint64_t);
SHADDR_ELEM(SHADDR_FLOAT, float);
SHADDR_ELEM(SHADDR_DOUBLE, double);
SHADDR_ELEM(SHADDR_LONG_DOUBLE, long double);
SHADDR_ELEM(SHADDR_C_FLOAT_COMPLEX, Complex<float>);
SHADDR_ELEM(SHADDR_C_DOUBLE_COMPLEX, Complex<double>);
SHADDR_ELEM(SHADDR_C_LONG_DOUBLE_COMPLEX, Complex<long double>);
SHADDR_ELEM(SHADDR_C_BOOL, uint8_t);  // read as a byte: a non-zero byte is true, never UB
SHADDR_ELEM(SHADDR_FLOAT_INT, Pair<float>);
SHADDR_ELEM(SHADDR_DOUBLE_INT, Pair<double>);
SHADDR_ELEM(SHADDR_LONG_INT, Pair<long>);
SHADDR_ELEM(SHADDR_2INT, Pair<int>);
SHADDR_ELEM(SHADDR_SHORT_INT, Pair<short>);
SHADDR_ELEM(SHADDR_LONG_DOUBLE_INT, Pair<long double>);
using TwoFloat = Pair<float, float>;
using TwoDouble = Pair<double, double>;
SHADDR_ELEM(SHADDR_2FLOAT, TwoFloat);
SHADDR_ELEM(SHADDR_2DOUBLE, TwoDouble);
#undef SHADDR_ELEM

// ---- MPI's table: which op applies to which class of type --------------------------------

enum class Kind { kByte, kInteger, kFloating, kComplex, kLogical, kPair };

constexpr Kind kind_of(shaddr_dtype t) {
  switch (t) {
    case SHADDR_BYTE:
      return Kind::kByte;
    case SHADDR_FLOAT:
    case SHADDR_DOUBLE:
    case SHADDR_LONG_DOUBLE:
      return Kind::kFloating;
    case SHADDR_C_FLOAT_COMPLEX:
    case SHADDR_C_DOUBLE_COMPLEX:
    case SHADDR_C_LONG_DOUBLE_COMPLEX:
      return Kind::kComplex;
    case SHADDR_C_BOOL:
      return Kind::kLogical;
    case SHADDR_FLOAT_INT:
    case SHADDR_DOUBLE_INT:
    case SHADDR_LONG_INT:
    case SHADDR_2INT:
    case SHADDR_SHORT_INT:
    case SHADDR_LONG_DOUBLE_INT:
    case SHADDR_2FLOAT:
    case SHADDR_2DOUBLE:
      return Kind::kPair;
    default:
      return Kind::kInteger;
  }
}

constexpr bool supported(shaddr_op op, shaddr_dtype t) {
  const Kind k = kind_of(t);
  switch (op) {
    case SHADDR_OP_SUM:
    case SHADDR_OP_PROD:
      return k == Kind::kInteger || k == Kind::kFloating || k == Kind::kComplex;
    case SHADDR_OP_MIN:
    case SHADDR_OP_MAX:
      return k == Kind::kInteger || k == Kind::kFloating;
    case SHADDR_OP_LAND:
    case SHADDR_OP_LOR:
    case SHADDR_OP_LXOR:
      return k == Kind::kInteger || k == Kind::kLogical;
    case SHADDR_OP_BAND:
    case SHADDR_OP_BOR:
    case SHADDR_OP_BXOR:
      return k == Kind::kInteger || k == Kind::kByte;
    case SHADDR_OP_MINLOC:
    case SHADDR_OP_MAXLOC:
      return k == Kind::kPair;
    default:
      return false;
  }
}

constexpr const char *kOpName[] = {"SUM",  "PROD", "MIN", "MAX",  "LAND",   "LOR",
                                   "LXOR", "BAND", "BOR", "BXOR", "MINLOC", "MAXLOC"};
static_assert(std::size(kOpName) == SHADDR_OP_COUNT, "one name per shaddr_op");

constexpr const char *kTypeName[] = {
    "BYTE",  "INT8",   "UINT8",       "INT16",          "UINT16",         "INT32",
    "UINT32", "INT64", "UINT64",      "FLOAT",          "DOUBLE",         "LONG_DOUBLE",
    "C_FLOAT_COMPLEX", "C_DOUBLE_COMPLEX", "C_LONG_DOUBLE_COMPLEX", "C_BOOL", "FLOAT_INT",
    "DOUBLE_INT", "LONG_INT", "2INT", "SHORT_INT", "LONG_DOUBLE_INT", "2FLOAT", "2DOUBLE"};
static_assert(std::size(kTypeName) == SHADDR_DTYPE_COUNT, "one name per shaddr_dtype");

bool in_range(shaddr_op op, shaddr_dtype t) {
  return static_cast<unsigned>(op) < SHADDR_OP_COUNT &&
         static_cast<unsigned>(t) < SHADDR_DTYPE_COUNT;
}

// ---- Element access: memcpy, so any alignment is fine --------------------------------------

// Bytes of T that hold its value: x87's 80-bit long double leaves 6 bytes of padding, which are
// not written (they would carry whatever a register spill left there).
template <class T>
constexpr size_t value_bytes() {
  if constexpr (std::is_same_v<T, long double> && std::numeric_limits<long double>::digits == 64)
    return 10;
  else
    return sizeof(T);
}

// Structs are read field by field: the vectoriser handles scalar loads, not struct copies.
template <class T>
struct Loader {
  [[gnu::always_inline]] static T load(const char *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
};

template <class T>
struct Loader<Complex<T>> {
  [[gnu::always_inline]] static Complex<T> load(const char *p) {
    return {Loader<T>::load(p), Loader<T>::load(p + offsetof(Complex<T>, im))};
  }
};

template <class V, class I>
struct Loader<Pair<V, I>> {
  using P = Pair<V, I>;
  [[gnu::always_inline]] static P load(const char *p) {
    return {Loader<V>::load(p), Loader<I>::load(p + offsetof(P, index))};
  }
};

template <class T>
[[gnu::always_inline]] inline T load(const char *p) {
  return Loader<T>::load(p);
}

template <class T>
[[gnu::always_inline]] inline void store(char *p, const T &v) {
  std::memcpy(p, &v, value_bytes<T>());
}

template <class T>
[[gnu::always_inline]] inline void store(char *p, const Complex<T> &v) {
  store(p, v.re);
  store(p + offsetof(Complex<T>, im), v.im);
}

template <class V, class I>
[[gnu::always_inline]] inline void store(char *p, const Pair<V, I> &v) {
  using P = Pair<V, I>;
  store(p, v.value);
  store(p + offsetof(P, index), v.index);
}

// ---- The operations: apply(a, b) = a op b -------------------------------------------------

// Integer SUM/PROD wrap: computed in an unsigned type at least as wide as unsigned int (so that
// uint16_t * uint16_t does not promote to a signed int and overflow).
template <class T>
using Wrap = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <shaddr_op O> struct Op;

template <>
struct Op<SHADDR_OP_SUM> {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Wrap<T>>(a) + static_cast<Wrap<T>>(b));
    else
      return a + b;
  }
  template <class T>
  static Complex<T> apply(Complex<T> a, Complex<T> b) {
    return {a.re + b.re, a.im + b.im};
  }
};

template <>
struct Op<SHADDR_OP_PROD> {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Wrap<T>>(a) * static_cast<Wrap<T>>(b));
    else
      return a * b;
  }
  // The plain formula, as MPI implementations compute it; not C99 Annex G (__mulsc3).
  template <class T>
  static Complex<T> apply(Complex<T> a, Complex<T> b) {
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
  }
};

// On unordered operands (a NaN) the left one wins; both compile to minps/maxps.
template <>
struct Op<SHADDR_OP_MIN> {
  template <class T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};

template <>
struct Op<SHADDR_OP_MAX> {
  template <class T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};

// Logical ops: & and ^ on bools rather than && (no branches in the loop).
template <>
struct Op<SHADDR_OP_LAND> {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>((a != 0) & (b != 0));
  }
};

template <>
struct Op<SHADDR_OP_LOR> {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>((a != 0) | (b != 0));
  }
};

template <>
struct Op<SHADDR_OP_LXOR> {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>((a != 0) ^ (b != 0));
  }
};

template <>
struct Op<SHADDR_OP_BAND> {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};

template <>
struct Op<SHADDR_OP_BOR> {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};

template <>
struct Op<SHADDR_OP_BXOR> {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

// MINLOC/MAXLOC: the smaller (larger) value wins; on equal (or unordered) values, the left value
// with the smaller of the two indices.
// Written without branches, so that the loops if-convert and vectorise.
template <class V, class I>
Pair<V, I> pick(Pair<V, I> a, Pair<V, I> b, bool a_wins, bool b_wins) {
  const I tie = b.index < a.index ? b.index : a.index;
  return {b_wins ? b.value : a.value, b_wins ? b.index : (a_wins ? a.index : tie)};
}

template <>
struct Op<SHADDR_OP_MINLOC> {
  template <class V, class I>
  static Pair<V, I> apply(Pair<V, I> a, Pair<V, I> b) {
    return pick(a, b, a.value < b.value, b.value < a.value);
  }
};

template <>
struct Op<SHADDR_OP_MAXLOC> {
  template <class V, class I>
  static Pair<V, I> apply(Pair<V, I> a, Pair<V, I> b) {
    return pick(a, b, b.value < a.value, a.value < b.value);
  }
};

// ---- Loops ---------------------------------------------------------------------------------

// acc = acc op in (Swapped: acc = in op acc), acc and in distinct.
template <shaddr_op O, class T, bool Swapped>
[[gnu::always_inline]] inline void loop2(char *__restrict acc, const char *__restrict in,
                                         size_t n) {
  for (size_t i = 0; i < n; i++) {
    const size_t at = i * sizeof(T);
    const T x = load<T>(acc + at), y = load<T>(in + at);
    store(acc + at, Swapped ? Op<O>::apply(y, x) : Op<O>::apply(x, y));
  }
}

// out = a op b, out distinct from a and b (which are only read, so they may be the same).
template <shaddr_op O, class T>
[[gnu::always_inline]] inline void loop3(char *__restrict out, const char *__restrict a,
                                         const char *__restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const size_t at = i * sizeof(T);
    store(out + at, Op<O>::apply(load<T>(a + at), load<T>(b + at)));
  }
}

template <shaddr_op O, class T, bool Swapped>
[[gnu::optimize("O3")]] void two_base(char *__restrict acc, const char *__restrict in, size_t n) {
  loop2<O, T, Swapped>(acc, in, n);
}

template <shaddr_op O, class T, bool Swapped>
[[gnu::optimize("O3"), gnu::target("avx2")]] void two_avx2(char *__restrict acc,
                                                             const char *__restrict in, size_t n) {
  loop2<O, T, Swapped>(acc, in, n);
}

template <shaddr_op O, class T>
[[gnu::optimize("O3")]] void three_base(char *__restrict out, const char *__restrict a,
                                        const char *__restrict b, size_t n) {
  loop3<O, T>(out, a, b, n);
}

template <shaddr_op O, class T>
[[gnu::optimize("O3"), gnu::target("avx2")]] void three_avx2(char *__restrict out,
                                                               const char *__restrict a,
                                                               const char *__restrict b,
                                                               size_t n) {
  loop3<O, T>(out, a, b, n);
}

// p = p op p: the only case where the output is also an input of a three-pointer call twice
// over. Rare (x op x), so not worth a vector loop.
template <shaddr_op O, class T>
void self(char *p, const char *, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const size_t at = i * sizeof(T);
    const T x = load<T>(p + at);
    store(p + at, Op<O>::apply(x, x));
  }
}

// ---- Dispatch ------------------------------------------------------------------------------

using TwoFn = void (*)(char *, const char *, size_t);
using ThreeFn = void (*)(char *, const char *, const char *, size_t);

struct Kernels {
  TwoFn two;          // acc = acc op in
  TwoFn two_swapped;  // acc = in op acc
  ThreeFn three;      // out = a op b
  TwoFn self;         // p = p op p
};

constexpr size_t kPairs = size_t{SHADDR_OP_COUNT} * SHADDR_DTYPE_COUNT;

template <bool Avx2, size_t I>
constexpr Kernels make_kernels() {
  constexpr auto op = static_cast<shaddr_op>(I / SHADDR_DTYPE_COUNT);
  constexpr auto type = static_cast<shaddr_dtype>(I % SHADDR_DTYPE_COUNT);
  if constexpr (!supported(op, type)) {
    return {};
  } else {
    using T = typename Elem<type>::type;
    if constexpr (Avx2)
      return {two_avx2<op, T, false>, two_avx2<op, T, true>, three_avx2<op, T>, self<op, T>};
    else
      return {two_base<op, T, false>, two_base<op, T, true>, three_base<op, T>, self<op, T>};
  }
}

template <bool Avx2, size_t... I>
constexpr std::array<Kernels, kPairs> make_table(std::index_sequence<I...>) {
  return {make_kernels<Avx2, I>()...};
}

constexpr auto kBaseline = make_table<false>(std::make_index_sequence<kPairs>());
constexpr auto kAvx2 = make_table<true>(std::make_index_sequence<kPairs>());

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

std::atomic<const Kernels *> &table() {
  static std::atomic<const Kernels *> t{cpu_has_avx2() ? kAvx2.data() : kBaseline.data()};
  return t;
}

const Kernels &kernels(shaddr_op op, shaddr_dtype type) {
  return table().load(std::memory_order_relaxed)[size_t{op} * SHADDR_DTYPE_COUNT + type];
}

int check(shaddr_op op, shaddr_dtype type) {
  if (!in_range(op, type)) return -EINVAL;
  return supported(op, type) ? 0 : -ENOTSUP;
}

}  // namespace

int reduce_apply(shaddr_op op, shaddr_dtype type, void *acc, const void *in, size_t count) {
  if (int err = check(op, type)) return err;
  const Kernels &k = kernels(op, type);
  char *p = static_cast<char *>(acc);
  const char *q = static_cast<const char *>(in);
  if (p == q)
    k.self(p, q, count);
  else
    k.two(p, q, count);
  return 0;
}

int reduce_apply3(shaddr_op op, shaddr_dtype type, void *out, const void *a, const void *b,
                  size_t count) {
  if (int err = check(op, type)) return err;
  const Kernels &k = kernels(op, type);
  char *o = static_cast<char *>(out);
  const char *x = static_cast<const char *>(a), *y = static_cast<const char *>(b);
  if (o == x && o == y)
    k.self(o, x, count);
  else if (o == x)
    k.two(o, y, count);
  else if (o == y)
    k.two_swapped(o, x, count);
  else
    k.three(o, x, y, count);
  return 0;
}

ReduceIsa reduce_isa() {
  return table().load(std::memory_order_relaxed) == kAvx2.data() ? ReduceIsa::kAvx2
                                                                  : ReduceIsa::kBaseline;
}

int reduce_set_isa(ReduceIsa isa) {
  if (isa == ReduceIsa::kAvx2 && !cpu_has_avx2()) return -ENOTSUP;
  table().store(isa == ReduceIsa::kAvx2 ? kAvx2.data() : kBaseline.data(),
                std::memory_order_relaxed);
  return 0;
}

}  // namespace shaddr

namespace {

constexpr int kDtypeSize[] = {
    1,  // SHADDR_BYTE
    1, 1, 2, 2, 4, 4, 8, 8,
    sizeof(float), sizeof(double), sizeof(long double),
    2 * sizeof(float), 2 * sizeof(double), 2 * sizeof(long double),
    sizeof(bool),
    sizeof(shaddr::Pair<float>), sizeof(shaddr::Pair<double>), sizeof(shaddr::Pair<long>),
    sizeof(shaddr::Pair<int>), sizeof(shaddr::Pair<short>), sizeof(shaddr::Pair<long double>),
    sizeof(shaddr::Pair<float, float>), sizeof(shaddr::Pair<double, double>),
};
static_assert(std::size(kDtypeSize) == SHADDR_DTYPE_COUNT, "one size per shaddr_dtype");

}  // namespace

extern "C" int shaddr_dtype_size(enum shaddr_dtype type) {
  shaddr::clear_error();
  if (static_cast<unsigned>(type) >= SHADDR_DTYPE_COUNT)
    return shaddr::fail(-EINVAL, "shaddr_dtype_size: type " +
                                     std::to_string(static_cast<int>(type)) + " out of range");
  return kDtypeSize[type];
}

extern "C" int shaddr_op_supported(enum shaddr_op op, enum shaddr_dtype type) {
  shaddr::clear_error();
  if (static_cast<unsigned>(op) >= SHADDR_OP_COUNT)
    return shaddr::fail(-EINVAL, "shaddr_op_supported: op " +
                                     std::to_string(static_cast<int>(op)) + " out of range");
  if (static_cast<unsigned>(type) >= SHADDR_DTYPE_COUNT)
    return shaddr::fail(-EINVAL, "shaddr_op_supported: type " +
                                     std::to_string(static_cast<int>(type)) + " out of range");
  if (!shaddr::supported(op, type))
    return shaddr::fail(-ENOTSUP, std::string("shaddr_op_supported: MPI does not define ") +
                                      shaddr::kOpName[op] + " on " + shaddr::kTypeName[type]);
  return 0;
}
