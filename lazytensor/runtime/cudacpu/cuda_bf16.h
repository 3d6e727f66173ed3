// CUDACPU's cuda_bf16.h: CUDA's __nv_bfloat16 for g++ on the host; see lt_half16.h.
#pragma once
#include "lt_half16.h"

LT_HALF16(__nv_bfloat16, __nv_bfloat16_raw, lt::BF16Format)
LT_HALF16_PAIR(__nv_bfloat162, __nv_bfloat16)
LT_HALF16_MATH(__nv_bfloat16)
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline float __bfloat162float(__nv_bfloat16 b) { return float(b); }
inline __nv_bfloat16 __int2bfloat16_rn(int v) { return __nv_bfloat16(v); }
inline __nv_bfloat16 __uint2bfloat16_rn(unsigned v) { return __nv_bfloat16(v); }
inline __nv_bfloat16 __ll2bfloat16_rn(long long v) { return __nv_bfloat16(v); }
inline int __bfloat162int_rz(__nv_bfloat16 b) { return int(b); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 b) { return short(b.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __nv_bfloat16(__nv_bfloat16_raw{x}); }
inline __nv_bfloat16 __short_as_bfloat16(short x) { return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)x}); }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) { return __nv_bfloat162(x, y); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) { return __nv_bfloat162(x, y); }
inline __nv_bfloat162 __floats2bfloat162_rn(float x, float y) {
  return __nv_bfloat162(__nv_bfloat16(x), __nv_bfloat16(y));
}
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return float2{float(v.x), float(v.y)}; }
// sm_80 and later; rounded once, as a + b is (lt::atomic_update is the prelude's)
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) { return lt::atomic_add(p, v); }
