// What CUDACPU's cuda_fp16.h and cuda_bf16.h share: a 16-bit float type stored as its bits, converted from float with
// round-to-nearest-even and computed on in float (for +, -, *, / and sqrt, float has the 2p+2 bits that make rounding
// the float result once to 16 bits the correctly rounded 16-bit result). Its constructors, conversion operators and
// operators mirror CUDA's headers, so that code nvcc accepts or rejects (an ambiguous `h * 2.0f`, say) g++ does too.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace lt {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// float -> IEEE half bits, round to nearest even; NaN stays NaN (quiet), overflow becomes inf
inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f), ax = x & 0x7fffffffu;
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  if (ax > 0x7f800000u) return sign | 0x7e00u | uint16_t((ax >> 13) & 0x3ffu);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up: halfway above 65504 and beyond round to inf
  if (ax >= 0x38800000u) {  // a normal half: rebias the exponent (127 -> 15), round away the 13 low mantissa bits
    uint32_t r = ax - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return sign | uint16_t(r >> 13);
  }
  if (ax < 0x33000000u) return sign;  // up to 2^-25 (half the smallest subnormal, a tie to even 0): zero
  uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, s = 126 - e;  // a subnormal half: m * 2^(e-150) / 2^-24
  uint32_t q = m >> s, rem = m & ((1u << s) - 1), halfway = 1u << (s - 1);
  q += (rem > halfway || (rem == halfway && (q & 1u))) ? 1u : 0u;
  return sign | uint16_t(q);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return f32_from(sign | 0x7f800000u | (m << 13));
  if (e == 0) return f32_from(sign | f32_bits(float(m) * 0x1p-24f));  // zero or subnormal: exact in float
  return f32_from(sign | ((e + 112) << 23) | (m << 13));
}

// float -> bfloat16 bits, round to nearest even; NaN stays NaN (quiet)
inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16_to_f32(uint16_t b) { return f32_from(uint32_t(b) << 16); }

// double -> float rounded to odd (of the two floats around d, the one whose last bit is 1): rounding that once more to
// 16 bits (fewer than float's 24 - 2) gives d correctly rounded, which rounding to nearest twice would not
inline float f64_to_f32_odd(double d) {
  float f = float(d);
  if (double(f) == d || !std::isfinite(f) || (f32_bits(f) & 1u)) return f;
  return std::nextafter(f, double(f) > d ? -INFINITY : INFINITY);
}

struct F16Format {
  static uint16_t from(float f) { return f32_to_f16(f); }
  static uint16_t from(double d) { return f32_to_f16(f64_to_f32_odd(d)); }
  static float to(uint16_t b) { return f16_to_f32(b); }
};
struct BF16Format {
  static uint16_t from(float f) { return f32_to_bf16(f); }
  static uint16_t from(double d) { return f32_to_bf16(f64_to_f32_odd(d)); }
  static float to(uint16_t b) { return bf16_to_f32(b); }
};

}  // namespace lt

// LT_HALF16(T, RAW, FMT): the struct T (bits __x) with CUDA's constructors, conversions and operators, and its
// raw-bits struct RAW. Integers convert through double (exact for 32-bit ones) and round once; conversions to integers
// truncate toward zero, as CUDA's operator int() does (`_rz`).
#define LT_HALF16(T, RAW, FMT) \
  struct RAW { unsigned short x; }; \
  struct __attribute__((aligned(2))) T { \
    unsigned short __x; \
    T() = default; \
    constexpr T(const RAW& r) : __x(r.x) {} \
    T(float f) : __x(FMT::from(f)) {} \
    T(double f) : __x(FMT::from(f)) {} \
    T(short v) : __x(FMT::from(double(v))) {} \
    T(unsigned short v) : __x(FMT::from(double(v))) {} \
    T(int v) : __x(FMT::from(double(v))) {} \
    T(unsigned int v) : __x(FMT::from(double(v))) {} \
    T(long v) : __x(FMT::from(double(v))) {} \
    T(unsigned long v) : __x(FMT::from(double(v))) {} \
    T(long long v) : __x(FMT::from(double(v))) {} \
    T(unsigned long long v) : __x(FMT::from(double(v))) {} \
    operator RAW() const { return RAW{__x}; } \
    operator float() const { return FMT::to(__x); } \
    operator bool() const { return (__x & 0x7fffu) != 0; } \
    operator signed char() const { return (signed char)truncf(FMT::to(__x)); } \
    operator unsigned char() const { return (unsigned char)truncf(FMT::to(__x)); } \
    operator char() const { return (char)truncf(FMT::to(__x)); } \
    operator short() const { return (short)truncf(FMT::to(__x)); } \
    operator unsigned short() const { return (unsigned short)truncf(FMT::to(__x)); } \
    operator int() const { return (int)truncf(FMT::to(__x)); } \
    operator unsigned int() const { return (unsigned int)truncf(FMT::to(__x)); } \
    operator long() const { return (long)truncf(FMT::to(__x)); } \
    operator unsigned long() const { return (unsigned long)truncf(FMT::to(__x)); } \
    operator long long() const { return (long long)truncf(FMT::to(__x)); } \
    operator unsigned long long() const { return (unsigned long long)truncf(FMT::to(__x)); } \
  }; \
  inline T operator+(const T& a, const T& b) { return T(float(a) + float(b)); } \
  inline T operator-(const T& a, const T& b) { return T(float(a) - float(b)); } \
  inline T operator*(const T& a, const T& b) { return T(float(a) * float(b)); } \
  inline T operator/(const T& a, const T& b) { return T(float(a) / float(b)); } \
  inline T& operator+=(T& a, const T& b) { return a = a + b; } \
  inline T& operator-=(T& a, const T& b) { return a = a - b; } \
  inline T& operator*=(T& a, const T& b) { return a = a * b; } \
  inline T& operator/=(T& a, const T& b) { return a = a / b; } \
  inline T operator+(const T& a) { return a; } \
  inline T operator-(const T& a) { return T(RAW{(unsigned short)(a.__x ^ 0x8000u)}); } \
  inline bool operator==(const T& a, const T& b) { return float(a) == float(b); } \
  inline bool operator!=(const T& a, const T& b) { return float(a) != float(b); } \
  inline bool operator<(const T& a, const T& b) { return float(a) < float(b); } \
  inline bool operator>(const T& a, const T& b) { return float(a) > float(b); } \
  inline bool operator<=(const T& a, const T& b) { return float(a) <= float(b); } \
  inline bool operator>=(const T& a, const T& b) { return float(a) >= float(b); }

// LT_HALF16_PAIR(T2, T): CUDA's two-element vector of T (half2, nv_bfloat162)
#define LT_HALF16_PAIR(T2, T) \
  struct __attribute__((aligned(4))) T2 { \
    T x, y; \
    T2() = default; \
    constexpr T2(const T& a, const T& b) : x(a), y(b) {} \
  }; \
  inline T2 operator+(const T2& a, const T2& b) { return T2(a.x + b.x, a.y + b.y); } \
  inline T2 operator-(const T2& a, const T2& b) { return T2(a.x - b.x, a.y - b.y); } \
  inline T2 operator*(const T2& a, const T2& b) { return T2(a.x * b.x, a.y * b.y); } \
  inline T2 operator/(const T2& a, const T2& b) { return T2(a.x / b.x, a.y / b.y); }

// LT_HALF16_MATH(T): CUDA's intrinsics on T, overloaded for half and bfloat16 as in CUDA's headers; each computes
// in float and rounds once
#define LT_HALF16_MATH(T) \
  inline T __hadd(T a, T b) { return a + b; } \
  inline T __hsub(T a, T b) { return a - b; } \
  inline T __hmul(T a, T b) { return a * b; } \
  inline T __hdiv(T a, T b) { return a / b; } \
  inline T __hneg(T a) { return -a; } \
  inline T __hfma(T a, T b, T c) { return T(fmaf(float(a), float(b), float(c))); } \
  inline T __habs(T a) { T r = a; r.__x &= 0x7fffu; return r; } \
  inline bool __heq(T a, T b) { return a == b; } \
  inline bool __hne(T a, T b) { return a != b; } \
  inline bool __hlt(T a, T b) { return a < b; } \
  inline bool __hgt(T a, T b) { return a > b; } \
  inline bool __hle(T a, T b) { return a <= b; } \
  inline bool __hge(T a, T b) { return a >= b; } \
  inline bool __hisnan(T a) { return std::isnan(float(a)); } \
  inline int __hisinf(T a) { float f = float(a); return std::isinf(f) ? (f < 0 ? -1 : 1) : 0; } \
  inline T __hmax(T a, T b) { return T(fmaxf(float(a), float(b))); } \
  inline T __hmin(T a, T b) { return T(fminf(float(a), float(b))); } \
  inline T hsqrt(T a) { return T(sqrtf(float(a))); } \
  inline T hrsqrt(T a) { return T(1.0f / sqrtf(float(a))); } \
  inline T hrcp(T a) { return T(1.0f / float(a)); } \
  inline T hexp(T a) { return T(expf(float(a))); } \
  inline T hexp2(T a) { return T(exp2f(float(a))); } \
  inline T hlog(T a) { return T(logf(float(a))); } \
  inline T hlog2(T a) { return T(log2f(float(a))); } \
  inline T hsin(T a) { return T(sinf(float(a))); } \
  inline T hcos(T a) { return T(cosf(float(a))); } \
  inline T htrunc(T a) { return T(truncf(float(a))); } \
  inline T hfloor(T a) { return T(floorf(float(a))); } \
  inline T hceil(T a) { return T(ceilf(float(a))); } \
  inline T hrint(T a) { return T(rintf(float(a))); }
