// CUDACPU prelude: what CUDA C gives a kernel, for g++ compiling the CUDA renderer's source for the host.
// Included before the source with -include; cuda_fp16.h and cuda_bf16.h next to it are found through -I.
// threadIdx and friends, __syncthreads and the warp exchange behind mma.sync live in runtime.cpp (see there).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <math.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// one OS thread runs all threads of a block (as fibers) and one block at a time: its thread_local copy is the block's
#define __shared__ static thread_local
#define __constant__ static const

// ---- vector types and make_* (CUDA's vector_types.h alignments) ----

#define LT_VEC(T, N, A2, A4) \
  struct __align__(sizeof(T)) N##1 { T x; }; \
  struct __align__(A2) N##2 { T x, y; }; \
  struct N##3 { T x, y, z; }; \
  struct __align__(A4) N##4 { T x, y, z, w; }; \
  inline N##1 make_##N##1(T x) { return N##1{x}; } \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; } \
  inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; } \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
LT_VEC(signed char, char, 2, 4)
LT_VEC(unsigned char, uchar, 2, 4)
LT_VEC(short, short, 4, 8)
LT_VEC(unsigned short, ushort, 4, 8)
LT_VEC(int, int, 8, 16)
LT_VEC(unsigned int, uint, 8, 16)
LT_VEC(long long, longlong, 16, 16)
LT_VEC(unsigned long long, ulonglong, 16, 16)
LT_VEC(float, float, 8, 16)
LT_VEC(double, double, 16, 16)
#undef LT_VEC
struct dim3 { unsigned x, y, z; };

extern "C" {
extern __thread uint3 threadIdx, blockIdx;
extern __thread dim3 blockDim, gridDim;
void lt_syncthreads(void);
const uint32_t* lt_warp_exchange(const uint32_t* words, int n);
}
constexpr int warpSize = 32;

inline void __syncthreads() { lt_syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) {}  // the lanes of a warp only meet in mma.sync here
inline void __threadfence_block() {}
inline void __threadfence() {}

// ---- math and bit functions CUDA has and C++ lacks ----

template <class T> inline T max(T a, T b) { return a > b ? a : b; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __exp2f(float x) { return exp2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <class T> inline T __ldg(const T* p) { return *p; }

template <class To, class From> inline To lt_bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
  To out;
  std::memcpy(&out, &v, sizeof(To));
  return out;
}
inline int __float_as_int(float x) { return lt_bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return lt_bit_cast<unsigned>(x); }
inline float __int_as_float(int x) { return lt_bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return lt_bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return lt_bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return lt_bit_cast<double>(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }

// ---- tensor cores: mma.sync as an exchange between the 32 lanes of a warp, with PTX's fragment layouts ----
// Each lane passes the elements it holds (A, B, C fragments), every lane's are exchanged, and each lane computes the
// elements of D it holds from the whole A and B: D[row][col] = C[row][col] + sum over k of A[row][k] * B[k][col], in
// float, k in order. group = lane / 4 and quad = lane % 4 below, as in the PTX ISA's figures for mma.m16n8k*.

namespace lt {

template <class T> inline uint32_t pack2(T lo, T hi) {  // two 16-bit elements in one register, the low one first
  uint16_t l, h;
  std::memcpy(&l, &lo, 2);
  std::memcpy(&h, &hi, 2);
  return uint32_t(l) | (uint32_t(h) << 16);
}
template <class T> inline float elem16(const uint32_t* lane_words, int i) {  // element i (16-bit) of a lane's words
  uint16_t bits = uint16_t(lane_words[i / 2] >> (16 * (i % 2)));
  T v;
  std::memcpy(&v, &bits, 2);
  return float(v);
}
inline unsigned lane_id() { return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32; }

// m16n8k16 with 16-bit A and B (half or bfloat16), float C and D.
// A 16x16 (row): a[i] at row group + 8 * (i / 2 % 2), col quad * 2 + i % 2 + 8 * (i / 4).
// B 16x8 (col): b[i] at row quad * 2 + i % 2 + 8 * (i / 2), col group.
// C, D 16x8: c[i] at row group + 8 * (i / 2), col quad * 2 + i % 2.
template <class T> inline void mma_m16n8k16(const T a[8], const T b[4], const float c[4], float d[4]) {
  uint32_t mine[6] = {pack2(a[0], a[1]), pack2(a[2], a[3]), pack2(a[4], a[5]), pack2(a[6], a[7]), pack2(b[0], b[1]),
                      pack2(b[2], b[3])};
  const uint32_t* all = lt_warp_exchange(mine, 6);
  unsigned lane = lane_id(), group = lane / 4, quad = lane % 4;
  for (int i = 0; i < 4; i++) {
    int row = group + 8 * (i / 2), col = quad * 2 + i % 2;
    float acc = c[i];
    for (int k = 0; k < 16; k++) {
      const uint32_t* a_lane = all + 6 * ((row % 8) * 4 + (k % 8) / 2);
      const uint32_t* b_lane = all + 6 * (col * 4 + (k % 8) / 2) + 4;
      acc += elem16<T>(a_lane, k % 2 + 2 * (row / 8) + 4 * (k / 8)) * elem16<T>(b_lane, k % 2 + 2 * (k / 8));
    }
    d[i] = acc;
  }
}

// m16n8k8 with tf32 A and B (floats whose low 13 mantissa bits the tensor core ignores), float C and D.
// A 16x8 (row): a[i] at row group + 8 * (i % 2), col quad + 4 * (i / 2).
// B 8x8 (col): b[i] at row quad + 4 * i, col group.
inline float tf32(uint32_t bits) { return lt_bit_cast<float>(bits & 0xffffe000u); }
inline void mma_m16n8k8_tf32(const float a[4], const float b[2], const float c[4], float d[4]) {
  uint32_t mine[6];
  for (int i = 0; i < 4; i++) mine[i] = lt_bit_cast<uint32_t>(a[i]);
  for (int i = 0; i < 2; i++) mine[4 + i] = lt_bit_cast<uint32_t>(b[i]);
  const uint32_t* all = lt_warp_exchange(mine, 6);
  unsigned lane = lane_id(), group = lane / 4, quad = lane % 4;
  for (int i = 0; i < 4; i++) {
    int row = group + 8 * (i / 2), col = quad * 2 + i % 2;
    float acc = c[i];
    for (int k = 0; k < 8; k++) {
      uint32_t a_bits = all[6 * ((row % 8) * 4 + k % 4) + (row / 8) + 2 * (k / 4)];
      uint32_t b_bits = all[6 * (col * 4 + k % 4) + 4 + k / 4];
      acc += tf32(a_bits) * tf32(b_bits);
    }
    d[i] = acc;
  }
}

}  // namespace lt
