// SPDX-License-Identifier: MIT
// Reduction kernels: MPI's op/type table, results against a naive scalar reference for every
// supported pair (both ISAs, unaligned buffers, every aliasing the API allows), wrap-around,
// MINLOC/MAXLOC ties, operand order, and the C API's error reporting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <iterator>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "reduce_ops.h"
#include "shaddr/coll.h"

namespace {

using shaddr::reduce_apply;
using shaddr::reduce_apply3;
using shaddr::ReduceIsa;

// The C layouts MPI defines, written out again here (not taken from the library).
template <class T>
struct Cx {
  T re, im;
};
template <class V, class I = int>
struct Loc {
  V value;
  I index;
};

// ---- MPI's table, written out -----------------------------------------------------------

// Columns: SUM PROD MIN MAX LAND LOR LXOR BAND BOR BXOR MINLOC MAXLOC ('x' = MPI defines it).
struct TypeRow {
  shaddr_dtype type;
  const char *name;
  int size;  // x86-64
  const char *ops;
};
constexpr TypeRow kTypes[] = {
    //                                                      SPmM&|^abxLG
    {SHADDR_BYTE, "BYTE", 1, /*                          */ ".......xxx.."},
    {SHADDR_INT8, "INT8", 1, /*                          */ "xxxxxxxxxx.."},
    {SHADDR_UINT8, "UINT8", 1, /*                        */ "xxxxxxxxxx.."},
    {SHADDR_INT16, "INT16", 2, /*                        */ "xxxxxxxxxx.."},
    {SHADDR_UINT16, "UINT16", 2, /*                      */ "xxxxxxxxxx.."},
    {SHADDR_INT32, "INT32", 4, /*                        */ "xxxxxxxxxx.."},
    {SHADDR_UINT32, "UINT32", 4, /*                      */ "xxxxxxxxxx.."},
    {SHADDR_INT64, "INT64", 8, /*                        */ "xxxxxxxxxx.."},
    {SHADDR_UINT64, "UINT64", 8, /*                      */ "xxxxxxxxxx.."},
    {SHADDR_FLOAT, "FLOAT", 4, /*                        */ "xxxx........"},
    {SHADDR_DOUBLE, "DOUBLE", 8, /*                      */ "xxxx........"},
    {SHADDR_LONG_DOUBLE, "LONG_DOUBLE", 16, /*           */ "xxxx........"},
    {SHADDR_C_FLOAT_COMPLEX, "C_FLOAT_COMPLEX", 8, /*    */ "xx.........."},
    {SHADDR_C_DOUBLE_COMPLEX, "C_DOUBLE_COMPLEX", 16, /* */ "xx.........."},
    {SHADDR_C_LONG_DOUBLE_COMPLEX, "C_LONG_DOUBLE_COMPLEX", 32, "xx.........."},
    {SHADDR_C_BOOL, "C_BOOL", 1, /*                      */ "....xxx....."},
    {SHADDR_FLOAT_INT, "FLOAT_INT", 8, /*                */ "..........xx"},
    {SHADDR_DOUBLE_INT, "DOUBLE_INT", 16, /*             */ "..........xx"},
    {SHADDR_LONG_INT, "LONG_INT", 16, /*                 */ "..........xx"},
    {SHADDR_2INT, "2INT", 8, /*                          */ "..........xx"},
    {SHADDR_SHORT_INT, "SHORT_INT", 8, /*                */ "..........xx"},
    {SHADDR_LONG_DOUBLE_INT, "LONG_DOUBLE_INT", 32, /*   */ "..........xx"},
    {SHADDR_2FLOAT, "2FLOAT", 8, /*                      */ "..........xx"},
    {SHADDR_2DOUBLE, "2DOUBLE", 16, /*                   */ "..........xx"},
};
static_assert(std::size(kTypes) == SHADDR_DTYPE_COUNT);

constexpr const char *kOpNames[] = {"SUM",  "PROD", "MIN", "MAX",  "LAND",   "LOR",
                                    "LXOR", "BAND", "BOR", "BXOR", "MINLOC", "MAXLOC"};
static_assert(std::size(kOpNames) == SHADDR_OP_COUNT);

bool mpi_defines(shaddr_op op, shaddr_dtype type) { return kTypes[type].ops[op] == 'x'; }

// ---- Element types and the naive reference ---------------------------------------------------

template <class T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with the C type of @t (BYTE and C_BOOL as bytes: a C bool is a byte).
template <class F>
void visit(shaddr_dtype t, F &&f) {
  switch (t) {
    case SHADDR_BYTE:
    case SHADDR_UINT8:
    case SHADDR_C_BOOL: return f(Tag<uint8_t>{});
    case SHADDR_INT8: return f(Tag<int8_t>{});
    case SHADDR_INT16: return f(Tag<int16_t>{});
    case SHADDR_UINT16: return f(Tag<uint16_t>{});
    case SHADDR_INT32: return f(Tag<int32_t>{});
    case SHADDR_UINT32: return f(Tag<uint32_t>{});
    case SHADDR_INT64: return f(Tag<int64_t>{});
    case SHADDR_UINT64: return f(Tag<uint64_t>{});
    case SHADDR_FLOAT: return f(Tag<float>{});
    case SHADDR_DOUBLE: return f(Tag<double>{});
    case SHADDR_LONG_DOUBLE: return f(Tag<long double>{});
    case SHADDR_C_FLOAT_COMPLEX: return f(Tag<Cx<float>>{});
    case SHADDR_C_DOUBLE_COMPLEX: return f(Tag<Cx<double>>{});
    case SHADDR_C_LONG_DOUBLE_COMPLEX: return f(Tag<Cx<long double>>{});
    case SHADDR_FLOAT_INT: return f(Tag<Loc<float>>{});
    case SHADDR_DOUBLE_INT: return f(Tag<Loc<double>>{});
    case SHADDR_LONG_INT: return f(Tag<Loc<long>>{});
    case SHADDR_2INT: return f(Tag<Loc<int>>{});
    case SHADDR_SHORT_INT: return f(Tag<Loc<short>>{});
    case SHADDR_LONG_DOUBLE_INT: return f(Tag<Loc<long double>>{});
    case SHADDR_2FLOAT: return f(Tag<Loc<float, float>>{});
    case SHADDR_2DOUBLE: return f(Tag<Loc<double, double>>{});
    default: FAIL() << "no such type " << t;
  }
}

// a op b, one element, the obvious way.
template <class T>
T ref(shaddr_op op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Modular arithmetic in 64 bits, then truncated: what wrapping means.
    const uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
    switch (op) {
      case SHADDR_OP_SUM: return static_cast<T>(x + y);
      case SHADDR_OP_PROD: return static_cast<T>(x * y);
      case SHADDR_OP_MIN: return a <= b ? a : b;
      case SHADDR_OP_MAX: return a >= b ? a : b;
      case SHADDR_OP_LAND: return (a && b) ? 1 : 0;
      case SHADDR_OP_LOR: return (a || b) ? 1 : 0;
      case SHADDR_OP_LXOR: return (!a != !b) ? 1 : 0;
      case SHADDR_OP_BAND: return static_cast<T>(x & y);
      case SHADDR_OP_BOR: return static_cast<T>(x | y);
      case SHADDR_OP_BXOR: return static_cast<T>(x ^ y);
      default: ADD_FAILURE() << "no reference for op " << op; return T{};
    }
  } else {
    switch (op) {
      case SHADDR_OP_SUM: return a + b;
      case SHADDR_OP_PROD: return a * b;
      // Documented: on unordered operands (NaN) and on equal ones (+0, -0), the left one.
      case SHADDR_OP_MIN: return std::isless(b, a) ? b : a;
      case SHADDR_OP_MAX: return std::isgreater(b, a) ? b : a;
      default: ADD_FAILURE() << "no reference for op " << op; return T{};
    }
  }
}

template <class T>
Cx<T> ref(shaddr_op op, Cx<T> a, Cx<T> b) {
  if (op == SHADDR_OP_SUM) return {a.re + b.re, a.im + b.im};
  Cx<T> r;
  r.re = a.re * b.re;
  r.re -= a.im * b.im;
  r.im = a.re * b.im;
  r.im += a.im * b.re;
  return r;
}

template <class V, class I>
Loc<V, I> ref(shaddr_op op, Loc<V, I> a, Loc<V, I> b) {
  Loc<V, I> r = a;
  const bool b_better = op == SHADDR_OP_MINLOC ? b.value < a.value : b.value > a.value;
  const bool a_better = op == SHADDR_OP_MINLOC ? a.value < b.value : a.value > b.value;
  if (b_better) {
    r = b;
  } else if (!a_better) {  // equal: the smaller index
    r.index = std::min(a.index, b.index);
  }
  return r;
}

template <class T>
struct IsCx : std::false_type {};
template <class T>
struct IsCx<Cx<T>> : std::true_type {
  using part = T;
};

// ---- Bitwise comparison of the value bytes -------------------------------------------------

template <class T>
constexpr size_t value_bytes() {
  return std::is_same_v<T, long double> ? 10 : sizeof(T);  // x87 extended precision
}

template <class T>
bool same(const T &x, const T &y) {
  return std::memcmp(&x, &y, value_bytes<T>()) == 0;
}
template <class T>
bool same(const Cx<T> &x, const Cx<T> &y) {
  return same(x.re, y.re) && same(x.im, y.im);
}
template <class V, class I>
bool same(const Loc<V, I> &x, const Loc<V, I> &y) {
  return same(x.value, y.value) && same(x.index, y.index);
}

template <class T>
std::string show(const T &x) {
  if constexpr (std::is_integral_v<T>)
    return std::to_string(static_cast<long long>(x)) + " (0x" +
           std::to_string(static_cast<unsigned long long>(x)) + ")";
  else
    return std::to_string(static_cast<double>(x));
}
template <class T>
std::string show(const Cx<T> &x) {
  return "(" + show(x.re) + ", " + show(x.im) + ")";
}
template <class V, class I>
std::string show(const Loc<V, I> &x) {
  return "{" + show(x.value) + ", " + show(x.index) + "}";
}

// ---- Random operands ----------------------------------------------------------------------

struct Gen {
  std::mt19937_64 rng;
  shaddr_dtype type;
  shaddr_op op;

  bool one_in(int n) { return rng() % n == 0; }

  template <class T>
  T scalar() {
    if constexpr (std::is_integral_v<T>) {
      if (type == SHADDR_C_BOOL) return static_cast<T>(rng() & 1);
      if (one_in(4)) return 0;                       // logical ops need falses
      if (one_in(8)) return std::numeric_limits<T>::max();
      if (one_in(8)) return std::numeric_limits<T>::min();
      return static_cast<T>(rng());                  // full range: SUM/PROD wrap
    } else {
      if (op == SHADDR_OP_MIN || op == SHADDR_OP_MAX) {
        // Operand order shows only where MIN/MAX pick the left one: NaNs and signed zeros.
        if (one_in(8)) return std::numeric_limits<T>::quiet_NaN();
        if (one_in(8)) return one_in(2) ? T(0) : -T(0);
      }
      return static_cast<T>(static_cast<int64_t>(rng() % 200001) - 100000) / T(64);
    }
  }

  template <class T>
  void fill(T *x) {
    *x = scalar<T>();
  }
  template <class T>
  void fill(Cx<T> *x) {
    x->re = scalar<T>();
    x->im = scalar<T>();
  }
  template <class V, class I>
  void fill(Loc<V, I> *x) {
    x->value = static_cast<V>(rng() % 4);  // few values: many ties
    x->index = static_cast<I>(rng() % 16);
  }

  // n random elements as bytes, padding (long double, pairs) random too.
  template <class T>
  std::vector<T> elements(size_t n) {
    std::vector<T> v(n);
    for (T &x : v) {
      std::memset(&x, static_cast<int>(rng() & 0xff), sizeof x);
      fill(&x);
    }
    return v;
  }
};

// ---- A buffer at a chosen misalignment, with guard bytes on both sides -------------------

constexpr unsigned char kGuard = 0x5a;
constexpr size_t kGuardBytes = 32;

class Buf {
 public:
  Buf(size_t bytes, size_t skew) : skew_(skew), bytes_(bytes), mem_(2 * kGuardBytes + skew + bytes, kGuard) {}
  char *data() { return mem_.data() + kGuardBytes + skew_; }
  template <class T>
  void put(const std::vector<T> &v) {
    if (!v.empty()) std::memcpy(data(), v.data(), v.size() * sizeof(T));
  }
  template <class T>
  T get(size_t i) {
    T x;
    std::memcpy(&x, data() + i * sizeof(T), sizeof x);
    return x;
  }
  bool guards_intact() const {
    for (size_t i = 0; i < mem_.size(); i++)
      if ((i < kGuardBytes + skew_ || i >= kGuardBytes + skew_ + bytes_) &&
          static_cast<unsigned char>(mem_[i]) != kGuard)
        return false;
    return true;
  }

 private:
  size_t skew_, bytes_;
  std::vector<char> mem_;
};

// Selects the kernels' ISA for one scope.
class IsaScope {
 public:
  explicit IsaScope(ReduceIsa isa) : old_(shaddr::reduce_isa()), ok_(shaddr::reduce_set_isa(isa) == 0) {}
  ~IsaScope() { shaddr::reduce_set_isa(old_); }
  bool ok() const { return ok_; }

 private:
  ReduceIsa old_;
  bool ok_;
};

constexpr size_t kCounts[] = {0, 1, 7, 31, 1000, 4097};

// Where the three buffers start relative to 16-byte alignment.
struct Skews {
  size_t a, b, out;
};
constexpr Skews kSkews[] = {{0, 0, 0}, {1, 3, 5}, {7, 2, 1}};

// How reduce_apply/reduce_apply3 are called.
enum class Call { kApply, kApplySelf, kApply3, kApply3OutA, kApply3OutB, kApply3All, kApply3SameIn };
constexpr Call kCalls[] = {Call::kApply,      Call::kApplySelf,  Call::kApply3,
                           Call::kApply3OutA, Call::kApply3OutB, Call::kApply3All,
                           Call::kApply3SameIn};
const char *name(Call c) {
  switch (c) {
    case Call::kApply: return "reduce_apply(acc=a, in=b)";
    case Call::kApplySelf: return "reduce_apply(acc=a, in=a)";
    case Call::kApply3: return "reduce_apply3(out, a, b)";
    case Call::kApply3OutA: return "reduce_apply3(out=a, a, b)";
    case Call::kApply3OutB: return "reduce_apply3(out=b, a, b)";
    case Call::kApply3All: return "reduce_apply3(out=a, a, a)";
    case Call::kApply3SameIn: return "reduce_apply3(out, a, a)";
  }
  return "?";
}

// Runs one call on copies of @va and @vb and checks every element against the reference; also
// that nothing outside the result was written (guards, the padding of @out's elements, inputs).
template <class T>
void check_call(shaddr_op op, shaddr_dtype type, Call call, const std::vector<T> &va,
                const std::vector<T> &vb, Skews sk) {
  const size_t n = va.size(), bytes = n * sizeof(T);
  Buf a(bytes, sk.a), b(bytes, sk.b), out(bytes, sk.out);
  a.put(va);
  b.put(vb);
  std::vector<T> vout(n);
  if (n) std::memset(vout.data(), 0xa5, bytes);  // out's padding must survive
  out.put(vout);

  const bool self_op = call == Call::kApplySelf || call == Call::kApply3All ||
                       call == Call::kApply3SameIn;
  Buf *result = &a;
  int rc = -1;
  switch (call) {
    case Call::kApply: rc = reduce_apply(op, type, a.data(), b.data(), n); break;
    case Call::kApplySelf: rc = reduce_apply(op, type, a.data(), a.data(), n); break;
    case Call::kApply3:
      rc = reduce_apply3(op, type, out.data(), a.data(), b.data(), n);
      result = &out;
      break;
    case Call::kApply3OutA: rc = reduce_apply3(op, type, a.data(), a.data(), b.data(), n); break;
    case Call::kApply3OutB:
      rc = reduce_apply3(op, type, b.data(), a.data(), b.data(), n);
      result = &b;
      break;
    case Call::kApply3All: rc = reduce_apply3(op, type, a.data(), a.data(), a.data(), n); break;
    case Call::kApply3SameIn:
      rc = reduce_apply3(op, type, out.data(), a.data(), a.data(), n);
      result = &out;
      break;
  }
  ASSERT_EQ(rc, 0) << name(call);
  int bad = 0;
  for (size_t i = 0; i < n && bad < 3; i++) {
    const T want = ref(op, va[i], self_op ? va[i] : vb[i]);
    const T got = result->get<T>(i);
    if (!same(got, want)) {
      bad++;
      ADD_FAILURE() << name(call) << " n=" << n << " skew=" << sk.a << "/" << sk.b << "/"
                    << sk.out << " element " << i << ": " << show(va[i]) << " op "
                    << show(self_op ? va[i] : vb[i]) << " gave " << show(got) << ", want "
                    << show(want);
    }
  }
  EXPECT_TRUE(a.guards_intact() && b.guards_intact() && out.guards_intact()) << name(call);
  // The operands that do not receive the result are not written.
  if (result != &a && n) {
    EXPECT_EQ(std::memcmp(a.data(), va.data(), bytes), 0) << name(call);
  }
  if (result != &b && n) {
    EXPECT_EQ(std::memcmp(b.data(), vb.data(), bytes), 0) << name(call);
  }
  if (result == &out && n) {
    // Bytes of out that are not value bytes keep their 0xa5.
    for (size_t i = 0; i < n; i++) {
      // Straight from the buffer: a copy into a long double would not keep its padding.
      const auto *g = reinterpret_cast<const unsigned char *>(out.data() + i * sizeof(T));
      size_t stray = 0;
      for (size_t k = 0; k < sizeof(T); k++) {
        bool value_byte = false;
        if constexpr (std::is_integral_v<T> || std::is_floating_point_v<T>) {
          value_byte = k < value_bytes<T>();
        } else if constexpr (IsCx<T>::value) {
          using P = typename IsCx<T>::part;
          value_byte = k % sizeof(P) < value_bytes<P>();
        } else {
          using V = decltype(T{}.value);
          value_byte = k < value_bytes<V>() ||
                       (k >= offsetof(T, index) && k < offsetof(T, index) + sizeof(T{}.index));
        }
        if (!value_byte && g[k] != 0xa5) stray++;
      }
      if (stray) {
        ADD_FAILURE() << name(call) << " wrote " << stray << " padding bytes of element " << i;
        break;
      }
    }
  }
}

// ---- One test per (op, type) ----------------------------------------------------------------

class ReduceOpsPair : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  shaddr_op op() const { return static_cast<shaddr_op>(std::get<0>(GetParam())); }
  shaddr_dtype type() const { return static_cast<shaddr_dtype>(std::get<1>(GetParam())); }
};

TEST_P(ReduceOpsPair, SupportMatchesMpi) {
  const int want = mpi_defines(op(), type()) ? 0 : -ENOTSUP;
  EXPECT_EQ(shaddr_op_supported(op(), type()), want);
  if (want)
    EXPECT_NE(std::string(shaddr_last_error()).find("does not define"), std::string::npos)
        << shaddr_last_error();
  else
    EXPECT_STREQ(shaddr_last_error(), "");
}

TEST_P(ReduceOpsPair, MatchesReference) {
  if (!mpi_defines(op(), type())) {
    char acc[64], in[64], out[64];
    std::memset(acc, 1, sizeof acc);
    std::memset(in, 2, sizeof in);
    std::memset(out, 3, sizeof out);
    EXPECT_EQ(reduce_apply(op(), type(), acc, in, 1), -ENOTSUP);
    EXPECT_EQ(reduce_apply3(op(), type(), out, acc, in, 1), -ENOTSUP);
    EXPECT_EQ(acc[0] + in[0] + out[0] + acc[63] + in[63] + out[63], 1 + 2 + 3 + 1 + 2 + 3);
    return;
  }
  int isas_run = 0;
  for (ReduceIsa isa : {ReduceIsa::kBaseline, ReduceIsa::kAvx2}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;  // the CPU lacks AVX2
    isas_run++;
    SCOPED_TRACE(isa == ReduceIsa::kAvx2 ? "AVX2 kernels" : "baseline kernels");
    visit(type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Gen g{std::mt19937_64(1000u * op() + type()), type(), op()};
      for (size_t n : kCounts) {
        const std::vector<T> va = g.elements<T>(n), vb = g.elements<T>(n);
        for (Skews sk : kSkews)
          for (Call c : kCalls) check_call(op(), type(), c, va, vb, sk);
      }
    });
  }
  EXPECT_GE(isas_run, 1);
}

TEST_P(ReduceOpsPair, ZeroCountTouchesNothing) {
  const int want = mpi_defines(op(), type()) ? 0 : -ENOTSUP;
  EXPECT_EQ(reduce_apply(op(), type(), nullptr, nullptr, 0), want);
  EXPECT_EQ(reduce_apply3(op(), type(), nullptr, nullptr, nullptr, 0), want);
}

std::string pair_name(const ::testing::TestParamInfo<std::tuple<int, int>> &info) {
  return std::string(kOpNames[std::get<0>(info.param)]) + "_" + kTypes[std::get<1>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(AllOpsTypes, ReduceOpsPair,
                         ::testing::Combine(::testing::Range(0, int{SHADDR_OP_COUNT}),
                                            ::testing::Range(0, int{SHADDR_DTYPE_COUNT})),
                         pair_name);

// ---- Specific rules ------------------------------------------------------------------------

template <class T>
T apply1(shaddr_op op, shaddr_dtype type, T a, T b) {
  EXPECT_EQ(reduce_apply(op, type, &a, &b, 1), 0);
  return a;
}

TEST(ReduceOps, DtypeSizes) {
  for (const TypeRow &r : kTypes) {
    EXPECT_EQ(shaddr_dtype_size(r.type), r.size) << r.name;
    EXPECT_STREQ(shaddr_last_error(), "");
  }
  // The sizes are those of the C layouts.
  EXPECT_EQ(shaddr_dtype_size(SHADDR_C_BOOL), int{sizeof(bool)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_FLOAT_INT), int{sizeof(Loc<float>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_DOUBLE_INT), int{sizeof(Loc<double>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_LONG_INT), int{sizeof(Loc<long>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_2INT), int{sizeof(Loc<int>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_SHORT_INT), int{sizeof(Loc<short>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_LONG_DOUBLE_INT), int{sizeof(Loc<long double>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_2FLOAT), int{sizeof(Loc<float, float>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_2DOUBLE), int{sizeof(Loc<double, double>)});
  EXPECT_EQ(shaddr_dtype_size(SHADDR_C_LONG_DOUBLE_COMPLEX), int{sizeof(Cx<long double>)});
}

// Values past the last enumerator but inside the enums' range (C callers can pass anything).
TEST(ReduceOps, BadEnumsAreEinvalWithAMessage) {
  const auto bad_op1 = static_cast<shaddr_op>(SHADDR_OP_COUNT), bad_op2 = static_cast<shaddr_op>(15);
  const auto bad_type1 = static_cast<shaddr_dtype>(SHADDR_DTYPE_COUNT),
             bad_type2 = static_cast<shaddr_dtype>(31);
  for (shaddr_dtype t : {bad_type1, bad_type2}) {
    EXPECT_EQ(shaddr_dtype_size(t), -EINVAL);
    EXPECT_NE(std::string(shaddr_last_error()).find("out of range"), std::string::npos)
        << shaddr_last_error();
    EXPECT_EQ(shaddr_op_supported(SHADDR_OP_SUM, t), -EINVAL);
    EXPECT_NE(std::string(shaddr_last_error()).find("type"), std::string::npos);
    EXPECT_EQ(shaddr_dtype_size(SHADDR_INT32), 4);  // a good call clears the error
    EXPECT_STREQ(shaddr_last_error(), "");
  }
  for (shaddr_op o : {bad_op1, bad_op2}) {
    EXPECT_EQ(shaddr_op_supported(o, SHADDR_INT32), -EINVAL);
    EXPECT_NE(std::string(shaddr_last_error()).find("op"), std::string::npos);
    EXPECT_NE(std::string(shaddr_last_error()).find("out of range"), std::string::npos);
    EXPECT_EQ(shaddr_op_supported(SHADDR_OP_SUM, SHADDR_INT32), 0);
    EXPECT_STREQ(shaddr_last_error(), "");
  }
  int32_t acc = 1, in = 2, out = 3;
  for (shaddr_op o : {bad_op1, bad_op2}) {
    EXPECT_EQ(reduce_apply(o, SHADDR_INT32, &acc, &in, 1), -EINVAL);
    EXPECT_EQ(reduce_apply3(o, SHADDR_INT32, &out, &acc, &in, 1), -EINVAL);
  }
  for (shaddr_dtype t : {bad_type1, bad_type2}) {
    EXPECT_EQ(reduce_apply(SHADDR_OP_SUM, t, &acc, &in, 1), -EINVAL);
    EXPECT_EQ(reduce_apply3(SHADDR_OP_SUM, t, &out, &acc, &in, 1), -EINVAL);
  }
  EXPECT_EQ(acc + in + out, 6);
  // Out of range beats unsupported.
  EXPECT_EQ(shaddr_op_supported(bad_op1, SHADDR_FLOAT_INT), -EINVAL);
}

TEST(ReduceOps, IntegerSumAndProdWrap) {
  EXPECT_EQ(apply1<int8_t>(SHADDR_OP_SUM, SHADDR_INT8, 127, 1), -128);
  EXPECT_EQ(apply1<int8_t>(SHADDR_OP_PROD, SHADDR_INT8, 16, 16), 0);
  EXPECT_EQ(apply1<int8_t>(SHADDR_OP_PROD, SHADDR_INT8, -128, -1), -128);
  EXPECT_EQ(apply1<uint8_t>(SHADDR_OP_SUM, SHADDR_UINT8, 255, 2), 1);
  EXPECT_EQ(apply1<int16_t>(SHADDR_OP_SUM, SHADDR_INT16, INT16_MIN, -1), INT16_MAX);
  EXPECT_EQ(apply1<uint16_t>(SHADDR_OP_PROD, SHADDR_UINT16, 65535, 65535), 1);  // not int overflow
  EXPECT_EQ(apply1<int32_t>(SHADDR_OP_SUM, SHADDR_INT32, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(apply1<int32_t>(SHADDR_OP_PROD, SHADDR_INT32, 65536, 65536), 0);
  EXPECT_EQ(apply1<int32_t>(SHADDR_OP_PROD, SHADDR_INT32, INT32_MIN, -1), INT32_MIN);
  EXPECT_EQ(apply1<uint32_t>(SHADDR_OP_SUM, SHADDR_UINT32, UINT32_MAX, UINT32_MAX), UINT32_MAX - 1);
  EXPECT_EQ(apply1<int64_t>(SHADDR_OP_SUM, SHADDR_INT64, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(apply1<int64_t>(SHADDR_OP_PROD, SHADDR_INT64, INT64_MIN, -1), INT64_MIN);
  EXPECT_EQ(apply1<int64_t>(SHADDR_OP_PROD, SHADDR_INT64, int64_t{1} << 32, int64_t{1} << 32), 0);
  EXPECT_EQ(apply1<uint64_t>(SHADDR_OP_PROD, SHADDR_UINT64, UINT64_MAX, UINT64_MAX), 1u);
  // And in the vector loops (both ISAs), not only the scalar tail.
  for (ReduceIsa isa : {ReduceIsa::kBaseline, ReduceIsa::kAvx2}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    std::vector<int32_t> acc(64, INT32_MAX), in(64, 1);
    ASSERT_EQ(reduce_apply(SHADDR_OP_SUM, SHADDR_INT32, acc.data(), in.data(), acc.size()), 0);
    for (int32_t x : acc) EXPECT_EQ(x, INT32_MIN);
    std::vector<int16_t> p(64, -32768), q(64, -1);
    ASSERT_EQ(reduce_apply(SHADDR_OP_PROD, SHADDR_INT16, p.data(), q.data(), p.size()), 0);
    for (int16_t x : p) EXPECT_EQ(x, -32768);
  }
}

template <class V, class I = int>
void check_loc_ties() {
  SCOPED_TRACE(typeid(Loc<V, I>).name());
  for (ReduceIsa isa : {ReduceIsa::kBaseline, ReduceIsa::kAvx2}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    struct Case {
      Loc<V, I> a, b, min, max;
    };
    const Case cases[] = {
        {{3, 5}, {3, 2}, {3, 2}, {3, 2}},    // tie: smaller index, whichever side
        {{3, 2}, {3, 5}, {3, 2}, {3, 2}},
        {{3, 7}, {3, 7}, {3, 7}, {3, 7}},
        {{1, 9}, {2, 0}, {1, 9}, {2, 0}},    // the value decides, not the index
        {{2, 0}, {1, 9}, {1, 9}, {2, 0}},
        {{-4, 1}, {4, -1}, {-4, 1}, {4, -1}},
    };
    shaddr_dtype type = SHADDR_2INT;
    if (std::is_same_v<V, float>) type = SHADDR_FLOAT_INT;
    if (std::is_same_v<V, double>) type = SHADDR_DOUBLE_INT;
    if (std::is_same_v<V, long>) type = SHADDR_LONG_INT;
    if (std::is_same_v<V, short>) type = SHADDR_SHORT_INT;
    if (std::is_same_v<V, long double>) type = SHADDR_LONG_DOUBLE_INT;
    if (std::is_same_v<I, float>) type = SHADDR_2FLOAT;
    if (std::is_same_v<I, double>) type = SHADDR_2DOUBLE;
    // Each case repeated 37 times: vector loop and scalar tail.
    std::vector<Loc<V, I>> a, b;
    for (const Case &c : cases)
      for (int k = 0; k < 37; k++) a.push_back(c.a), b.push_back(c.b);
    std::vector<Loc<V, I>> mn = a, mx(a.size());
    ASSERT_EQ(reduce_apply(SHADDR_OP_MINLOC, type, mn.data(), b.data(), a.size()), 0);
    ASSERT_EQ(reduce_apply3(SHADDR_OP_MAXLOC, type, mx.data(), a.data(), b.data(), a.size()), 0);
    for (size_t i = 0; i < a.size(); i++) {
      const Case &c = cases[i / 37];
      EXPECT_TRUE(same(mn[i], c.min)) << show(c.a) << " MINLOC " << show(c.b) << " = " << show(mn[i]);
      EXPECT_TRUE(same(mx[i], c.max)) << show(c.a) << " MAXLOC " << show(c.b) << " = " << show(mx[i]);
    }
  }
}

TEST(ReduceOps, MinlocMaxlocTies) {
  check_loc_ties<float>();
  check_loc_ties<double>();
  check_loc_ties<long>();
  check_loc_ties<int>();
  check_loc_ties<short>();
  check_loc_ties<long double>();
  check_loc_ties<float, float>();  // Fortran's 2REAL, 2DOUBLE_PRECISION: the index a float
  check_loc_ties<double, double>();
}

// MIN/MAX keep the left operand when the two are unordered or equal: acc wins, so results do
// not depend on which side a compiler put an operand.
TEST(ReduceOps, MinMaxOperandOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceIsa isa : {ReduceIsa::kBaseline, ReduceIsa::kAvx2}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    std::vector<float> a(40, nan), b(40, 1.0f), out(40);
    ASSERT_EQ(reduce_apply3(SHADDR_OP_MIN, SHADDR_FLOAT, out.data(), a.data(), b.data(), 40), 0);
    for (float x : out) EXPECT_TRUE(std::isnan(x));
    ASSERT_EQ(reduce_apply3(SHADDR_OP_MAX, SHADDR_FLOAT, out.data(), b.data(), a.data(), 40), 0);
    for (float x : out) EXPECT_EQ(x, 1.0f);
    std::vector<double> pz(40, 0.0), nz(40, -0.0), r(40);
    ASSERT_EQ(reduce_apply3(SHADDR_OP_MIN, SHADDR_DOUBLE, r.data(), nz.data(), pz.data(), 40), 0);
    for (double x : r) EXPECT_TRUE(std::signbit(x));
    ASSERT_EQ(reduce_apply3(SHADDR_OP_MAX, SHADDR_DOUBLE, r.data(), pz.data(), nz.data(), 40), 0);
    for (double x : r) EXPECT_FALSE(std::signbit(x));
  }
}

TEST(ReduceOps, LogicalOpsYieldZeroOrOne) {
  const int8_t a[] = {0, 0, 5, -3}, b[] = {0, 7, 0, -128};
  const int8_t land[] = {0, 0, 0, 1}, lor[] = {0, 1, 1, 1}, lxor[] = {0, 1, 1, 0};
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(apply1(SHADDR_OP_LAND, SHADDR_INT8, a[i], b[i]), land[i]);
    EXPECT_EQ(apply1(SHADDR_OP_LOR, SHADDR_INT8, a[i], b[i]), lor[i]);
    EXPECT_EQ(apply1(SHADDR_OP_LXOR, SHADDR_INT8, a[i], b[i]), lxor[i]);
  }
  // C_BOOL: any non-zero byte counts as true.
  const uint8_t x[] = {0, 2, 255, 1}, y[] = {0, 0, 4, 1};
  const uint8_t want_lor[] = {0, 1, 1, 1};
  for (int i = 0; i < 4; i++)
    EXPECT_EQ(apply1<uint8_t>(SHADDR_OP_LOR, SHADDR_C_BOOL, x[i], y[i]), want_lor[i]);
  bool p = true, q = false;
  ASSERT_EQ(reduce_apply(SHADDR_OP_LXOR, SHADDR_C_BOOL, &p, &q, 1), 0);
  EXPECT_TRUE(p);
}

TEST(ReduceOps, ComplexProductIsThePlainFormula) {
  // (1 + 2i)(3 + 4i) = -5 + 10i. (inf + inf i)(1 + 0i) is NaN + NaN i by the formula; C99
  // Annex G (__mulsc3) would recover inf + inf i.
  const Cx<double> z = apply1<Cx<double>>(SHADDR_OP_PROD, SHADDR_C_DOUBLE_COMPLEX, {1, 2}, {3, 4});
  EXPECT_EQ(z.re, -5);
  EXPECT_EQ(z.im, 10);
  const float inf = std::numeric_limits<float>::infinity();
  const Cx<float> w =
      apply1<Cx<float>>(SHADDR_OP_PROD, SHADDR_C_FLOAT_COMPLEX, {inf, inf}, {1, 0});
  EXPECT_TRUE(std::isnan(w.re) && std::isnan(w.im));
}

}  // namespace
