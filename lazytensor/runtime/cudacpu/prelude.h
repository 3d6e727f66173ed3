// CUDACPU prelude: what CUDA C gives a kernel, for g++ compiling the CUDA renderer's source for the host.
// Included before the source with -include; cuda_fp16.h and cuda_bf16.h next to it are found through -I.
// threadIdx and friends, __syncthreads and the warp exchange behind mma.sync live in runtime.cpp (see there).
// ops_cudacpu.py precompiles it (a .gch per machine in the cache directory): parsing <cmath> is most of a small
// kernel's compile.
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
// the source writes `__shared__ alignas(16) float t[256];`, fine for nvcc, where __shared__ is an attribute; after
// `static thread_local` C++ allows only GNU attributes. Defined after every standard header this TU includes (the
// -I headers include none that the prelude has not), as the standard asks of a macro named like a keyword.
#define alignas(n) __attribute__((aligned(n)))
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
// the sum of the products of the 4 signed bytes of a and of b, plus c (sm_61's dp4a.s32.s32)
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> 8 * i) * (int)(signed char)(b >> 8 * i);
  return c;
}
inline void __syncwarp(unsigned = 0xffffffffu) {}  // the lanes of a warp only meet in mma.sync here
inline void __threadfence_block() {}
inline void __threadfence() {}

// ---- atomics ----
// runtime.cpp runs the blocks of a launch at once on several OS threads (the threads of one block are fibers of one OS
// thread, switched only at barriers), so these are real atomic read-modify-writes (GCC's __atomic builtins, relaxed as
// CUDA's are), not plain updates. Each returns the old value, as CUDA's do. cuda_fp16.h and cuda_bf16.h add atomicAdd
// of __half and __nv_bfloat16 with lt::atomic_update.

namespace lt {
// *p = f(*p) as one atomic step: a compare-and-swap of the bytes, retried while another thread changed them between
// the read and the swap (any trivially copyable T of 1, 2, 4 or 8 bytes: floats and 16-bit float structs too)
template <class T, class F> inline T atomic_update(T* p, F f) {
  T old, want;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do want = f(old);
  while (!__atomic_compare_exchange(p, &old, &want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return old;
}
template <class T> inline T atomic_add(T* p, T v) { return atomic_update(p, [v](T x) { return T(x + v); }); }
template <class T> inline T atomic_max(T* p, T v) { return atomic_update(p, [v](T x) { return x > v ? x : v; }); }
}  // namespace lt

inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* p, float v) { return lt::atomic_add(p, v); }
inline double atomicAdd(double* p, double v) { return lt::atomic_add(p, v); }
inline int atomicMax(int* p, int v) { return lt::atomic_max(p, v); }
inline unsigned atomicMax(unsigned* p, unsigned v) { return lt::atomic_max(p, v); }
inline long long atomicMax(long long* p, long long v) { return lt::atomic_max(p, v); }
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) { return lt::atomic_max(p, v); }
// *p = (*p == compare ? v : *p), returning the old *p
template <class T> inline T lt_atomic_cas(T* p, T compare, T v) {
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // unchanged where the swap happened, else the value found
}
inline unsigned short atomicCAS(unsigned short* p, unsigned short compare, unsigned short v) {
  return lt_atomic_cas(p, compare, v);
}
inline int atomicCAS(int* p, int compare, int v) { return lt_atomic_cas(p, compare, v); }
inline unsigned atomicCAS(unsigned* p, unsigned compare, unsigned v) { return lt_atomic_cas(p, compare, v); }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long compare, unsigned long long v) {
  return lt_atomic_cas(p, compare, v);
}

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
// The CUDA source defines these wrappers with inline PTX inside #ifndef LT_CUDACPU (renderer/cuda.py); here
// each lane passes the elements of A and B it holds, all lanes' elements are exchanged, and each lane computes the
// elements of D it holds from the whole of A and B and its own C: D[row][col] = C[row][col] + sum over k of
// A[row][k] * B[k][col] in float, k in order. group = lane / 4 and quad = lane % 4, as in the PTX ISA's figures for
// mma.m16n8k*.

namespace lt {

inline unsigned lane_id() { return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32; }

// The exchange of one m16n8kK mma: each lane gives its NA elements of A and NB of B (as floats: 16-bit inputs convert
// exactly, and converting them here, once each, costs less than at every use), then computes its 4 elements of D.
// a_at(row, k) and b_at(k, col) give (lane, index) of the element in PTX's layout.
template <int K, int NA, int NB, class AAt, class BAt>
inline void mma_exchange(float* d, const float* a, const float* b, const float* c, AAt a_at, BAt b_at) {
  uint32_t mine[NA + NB];
  std::memcpy(mine, a, sizeof(float) * NA);
  std::memcpy(mine + NA, b, sizeof(float) * NB);
  const float* all = reinterpret_cast<const float*>(lt_warp_exchange(mine, NA + NB));
  unsigned lane = lane_id(), group = lane / 4, quad = lane % 4;
  float out[4];
  for (unsigned i = 0; i < 4; i++) {  // C, D 16x8: c[i] at row group + 8 * (i / 2), col quad * 2 + i % 2
    unsigned row = group + 8 * (i / 2), col = quad * 2 + i % 2;
    float acc = c[i];
    for (unsigned k = 0; k < K; k++) {
      auto [la, ia] = a_at(row, k);
      auto [lb, ib] = b_at(k, col);
      acc += all[la * (NA + NB) + ia] * all[lb * (NA + NB) + NA + ib];
    }
    out[i] = acc;
  }
  for (int i = 0; i < 4; i++) d[i] = out[i];  // d may alias c
}

struct At { unsigned lane, index; };

// m16n8k16 with 16-bit A and B (half or bfloat16), float C and D.
// A 16x16 (row): a[i] at row group + 8 * (i / 2 % 2), col quad * 2 + i % 2 + 8 * (i / 4).
// B 16x8 (col): b[i] at row quad * 2 + i % 2 + 8 * (i / 2), col group.
template <class T> inline void mma_m16n8k16(float* d, const T* a, const T* b, const float* c) {
  float fa[8], fb[4];
  for (int i = 0; i < 8; i++) fa[i] = float(a[i]);
  for (int i = 0; i < 4; i++) fb[i] = float(b[i]);
  mma_exchange<16, 8, 4>(d, fa, fb, c,
    [](unsigned row, unsigned k) { return At{(row % 8) * 4 + k % 8 / 2, k % 2 + 2 * (row / 8) + 4 * (k / 8)}; },
    [](unsigned k, unsigned col) { return At{col * 4 + k % 8 / 2, k % 2 + 2 * (k / 8)}; });
}

// a float rounded to tf32 as cvt.rna.tf32.f32 does: to nearest on the low 13 mantissa bits, ties away from zero
inline uint32_t to_tf32(float f) {
  uint32_t u = lt_bit_cast<uint32_t>(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // inf and NaN as they are
  return (u + 0x1000u) & 0xffffe000u;
}

// m16n8k8 with tf32 A and B, float C and D.
// A 16x8 (row): a[i] at row group + 8 * (i % 2), col quad + 4 * (i / 2).
// B 8x8 (col): b[i] at row quad + 4 * i, col group.
inline void mma_m16n8k8_tf32(float* d, const float* a, const float* b, const float* c) {
  float fa[4], fb[2];
  for (int i = 0; i < 4; i++) fa[i] = lt_bit_cast<float>(to_tf32(a[i]));
  for (int i = 0; i < 2; i++) fb[i] = lt_bit_cast<float>(to_tf32(b[i]));
  mma_exchange<8, 4, 2>(d, fa, fb, c,
    [](unsigned row, unsigned k) { return At{(row % 8) * 4 + k % 4, row / 8 + 2 * (k / 4)}; },
    [](unsigned k, unsigned col) { return At{col * 4 + k % 4, k / 4}; });
}

// ldmatrix.sync.aligned.m8n8.x{N}[.trans].shared.b16 as an exchange: each lane gives the address of a row of 8 16-bit
// elements (lane 8i + r: row r of matrix i), and takes its two elements of each matrix i as registers 2i, 2i + 1:
// (row lane / 4, cols 2 (lane % 4) + {0, 1}), or transposed (rows 2 (lane % 4) + {0, 1}, col lane / 4).
template <int N, bool Trans> inline void ldmatrix(void* d, const void* p) {
  uint32_t mine[2];
  static_assert(sizeof(p) == sizeof(mine), "a row address is two exchanged words");
  std::memcpy(mine, &p, sizeof(p));
  const uint32_t* all = lt_warp_exchange(mine, 2);
  unsigned lane = lane_id();
  uint16_t out[2 * N];
  for (unsigned reg = 0; reg < 2 * N; reg++) {
    unsigned row = 8 * (reg / 2) + (Trans ? 2 * (lane % 4) + reg % 2 : lane / 4);
    unsigned col = Trans ? lane / 4 : 2 * (lane % 4) + reg % 2;
    const uint16_t* at;
    std::memcpy(&at, all + 2 * row, sizeof(at));
    std::memcpy(out + reg, at + col, sizeof(uint16_t));
  }
  std::memcpy(d, out, sizeof(out));
}

}  // namespace lt

// the CUDA renderer's ldmatrix wrappers (d: this lane's registers, p: its row in shared memory)
inline void lt_ldmatrix_x1(void* d, const void* p) { lt::ldmatrix<1, false>(d, p); }
inline void lt_ldmatrix_x2(void* d, const void* p) { lt::ldmatrix<2, false>(d, p); }
inline void lt_ldmatrix_x4(void* d, const void* p) { lt::ldmatrix<4, false>(d, p); }
inline void lt_ldmatrix_x1_trans(void* d, const void* p) { lt::ldmatrix<1, true>(d, p); }
inline void lt_ldmatrix_x2_trans(void* d, const void* p) { lt::ldmatrix<2, true>(d, p); }
inline void lt_ldmatrix_x4_trans(void* d, const void* p) { lt::ldmatrix<4, true>(d, p); }

// the CUDA renderer's cp.async wrappers: the copy done at once (n bytes of src, zeros after them) is one a GPU may do,
// since its data is only promised to readers after the wait and a barrier; the wait then has nothing left to wait for
inline void lt_cp_async_16(void* dst, const void* src, unsigned n) {
  unsigned char bytes[16] = {};
  std::memcpy(bytes, src, n);
  std::memcpy(dst, bytes, 16);
}
inline void lt_cp_async_wait_all() {}

// the names and signatures of the CUDA renderer's wrappers (d, a, b, c: this lane's fragments). Templates, because
// __half and __nv_bfloat16 come later, from cuda_fp16.h / cuda_bf16.h; nvcc (NVCC_CHECK) holds the source to the exact
// types.
template <class Half> inline void lt_mma_m16n8k16_f16_f32(float* d, const Half* a, const Half* b, const float* c) {
  lt::mma_m16n8k16(d, a, b, c);
}
template <class Bf16> inline void lt_mma_m16n8k16_bf16_f32(float* d, const Bf16* a, const Bf16* b, const float* c) {
  lt::mma_m16n8k16(d, a, b, c);
}
inline void lt_mma_m16n8k8_tf32_f32(float* d, const float* a, const float* b, const float* c) {
  lt::mma_m16n8k8_tf32(d, a, b, c);
}
