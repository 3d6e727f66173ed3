// CUDACPU's cuda_fp16.h: CUDA's __half (IEEE binary16) for g++ on the host; see lt_half16.h.
#pragma once
#include "lt_half16.h"

LT_HALF16(__half, __half_raw, lt::F16Format)
LT_HALF16_PAIR(__half2, __half)
LT_HALF16_MATH(__half)
typedef __half half;
typedef __half2 half2;

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return float(h); }
inline __half __int2half_rn(int v) { return __half(v); }
inline __half __uint2half_rn(unsigned v) { return __half(v); }
inline __half __ll2half_rn(long long v) { return __half(v); }
inline int __half2int_rz(__half h) { return int(h); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return short(h.__x); }
inline __half __ushort_as_half(unsigned short b) { return __half(__half_raw{b}); }
inline __half __short_as_half(short b) { return __half(__half_raw{(unsigned short)b}); }
inline __half2 make_half2(__half x, __half y) { return __half2(x, y); }
inline __half2 __halves2half2(__half x, __half y) { return __half2(x, y); }
inline __half2 __floats2half2_rn(float x, float y) { return __half2(__half(x), __half(y)); }
inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
inline float2 __half22float2(__half2 v) { return float2{float(v.x), float(v.y)}; }
inline __half __low2half(__half2 v) { return v.x; }
inline __half __high2half(__half2 v) { return v.y; }
// sm_70 and later; rounded once, as a + b is (lt::atomic_update is the prelude's)
inline __half atomicAdd(__half* p, __half v) { return lt::atomic_add(p, v); }
