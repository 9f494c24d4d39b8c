// SPDX-License-Identifier: MIT
// Element-wise reduction kernels: MPI's predefined operations on the types of enum shaddr_dtype.
//
// Buffers need no alignment. Results are deterministic: the same operands give bitwise the same
// values whatever the ISA the kernels were dispatched to (no FMA contraction, no reassociation:
// element i depends on element i of each operand only). Ops follow MPI:
//   SUM, PROD            integers (wrapping), floating, complex (plain formula, no C99 Annex G)
//   MIN, MAX             integers, floating; on unordered floats the left operand wins
//   LAND, LOR, LXOR      integers, C_BOOL (any non-zero byte is true); results are 0 or 1
//   BAND, BOR, BXOR      integers, BYTE
//   MINLOC, MAXLOC       the {value; index} pair types (index: int, or the value's type for
//                        2FLOAT/2DOUBLE); ties take the smaller index
// Only the value bytes of an element are written (not the padding of long double or of the pair
// types), so an element's padding keeps what the output buffer held.
#pragma once

#include <cstddef>

#include "shaddr/coll.h"

namespace shaddr {

// acc[i] = acc[i] op in[i] for i < count: @acc is the left operand, so folding rank r's input
// into an accumulator that holds ranks 0..r-1 combines in rank order. @in may equal @acc; it
// must not overlap it otherwise. Return: 0, -EINVAL (op or type out of range), -ENOTSUP (MPI
// does not define @op on @type).
int reduce_apply(shaddr_op op, shaddr_dtype type, void *acc, const void *in, size_t count);

// out[i] = a[i] op b[i]. @out may be @a or @b (or both); it must not overlap them partially.
// Same return values as reduce_apply().
int reduce_apply3(shaddr_op op, shaddr_dtype type, void *out, const void *a, const void *b,
                  size_t count);

// Which instruction set the kernels use: AVX2 when the CPU has it, else the x86-64 baseline.
// reduce_set_isa() is for tests (so that both sets of kernels run); it is not thread-safe with
// respect to the results of calls in flight. Return: 0, or -ENOTSUP if the CPU lacks the ISA.
enum class ReduceIsa { kBaseline, kAvx2 };
ReduceIsa reduce_isa();
int reduce_set_isa(ReduceIsa isa);

}  // namespace shaddr
