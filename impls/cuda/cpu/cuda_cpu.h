// CUDA's execution model on the CPU, for running this project's .cu files unchanged with g++ (C++20).
//
// The build (impls/cuda/runtime/cpu_build.py) force-includes this header before the kernel source. What it maps:
// - Blocks run one after another. The threads of a block run as fibers on one OS thread, in turn between
//   barriers (a barrier costs a context switch, not an OS wake-up); under ThreadSanitizer each fiber is a
//   thread of its own, ordered only by the barriers (impls/cuda/cpu/runtime.cpp), so a race between them shows.
// - `__shared__` arrays become statics: one copy, which the threads of the running block share. The dynamic
//   `extern __shared__ T name[];` is the one construct a macro cannot express; the build rewrites that line
//   (and only it) to a pointer to the launch's dynamic shared buffer. Before each block the plain build fills
//   all shared memory with 0xFF bytes (a NaN in float, half and bfloat16), so a read before any write shows; a
//   read past the dynamic buffer reads zeros there, the same in every run (the memcheck build reports it).
// - __syncthreads() and __syncwarp() are barriers that count the threads still running: a thread that
//   returned while others wait, or threads waiting at different __syncthreads() calls, is recorded as a
//   barrier-divergence diagnostic (with file:line) and the barrier releases, as current GPUs do; threads
//   that can never meet (a warp waiting at a shuffle while the rest waits at __syncthreads) are a deadlock:
//   the launch aborts with a diagnostic instead of hanging.
// - Warp shuffles and votes exchange values between the 32 lanes of a warp through a per-warp slot array
//   between two warp barriers.
// - WMMA fragments hold the whole tile in every lane; load and mma run in each lane, store runs in the
//   warp's first lane between warp barriers (so lanes do not write the same addresses concurrently).
// - __half and __nv_bfloat16 are 16-bit storage types converted with round-to-nearest-even.
// Only the subset this project's kernels use is provided; anything else fails to compile, loudly.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuda_cpu {

struct uint3 { unsigned x = 0, y = 0, z = 0; };
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct Site { const char* file; int line; };

// The state one launch exposes to the code of its threads.
struct LaunchState {
    dim3 grid, block;
    uint3 block_idx;
    unsigned char* dynamic_shared = nullptr;
};
extern LaunchState launch_state;

struct ThreadState { uint3 idx; unsigned linear = 0; };
extern ThreadState* current_thread;  // one OS thread runs a launch (as launch_state: one launch at a time)

void sync_block(Site site);
void sync_warp(unsigned mask, Site site);
// Lane `lane` publishes `value` to its warp, waits for the lanes of `mask`, reads what `source` published.
std::uint64_t exchange(unsigned mask, std::uint64_t value, unsigned source, Site site);
unsigned ballot(unsigned mask, bool predicate, Site site);
bool first_live_lane_of_warp();

inline unsigned char* dynamic_shared() { return launch_state.dynamic_shared; }
inline unsigned lane() { return current_thread->linear % 32; }

template <typename T>
T shuffle(unsigned mask, T value, unsigned source, Site site) {
    static_assert(sizeof(T) <= 8, "warp shuffles of types wider than 8 bytes are not emulated");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    bits = exchange(mask, bits, source, site);
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}

template <typename... A>
std::tuple<A...> arguments_of(void (*)(A...));

template <typename To, typename From>
__attribute__((always_inline)) inline To bit_cast(From from) {
    static_assert(sizeof(To) == sizeof(From));
    To to;
    std::memcpy(&to, &from, sizeof(To));
    return to;
}

using Invoke = void (*)(void**);

// A kernel called with its parameters as cuLaunchKernel passes them: params[i] points at argument i.
template <typename... A, std::size_t... I>
void call_kernel(void (*kernel)(A...), void** params, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(params[I])...);
}
template <auto Kernel>
void invoke(void** params) {
    call_kernel(Kernel, params, std::make_index_sequence<std::tuple_size_v<decltype(arguments_of(Kernel))>>{});
}

}  // namespace cuda_cpu

extern "C" int cuda_cpu_run(cuda_cpu::Invoke invoke, const unsigned* grid, const unsigned* block,
                            std::size_t shared_bytes, void** params, std::uint64_t first_block,
                            std::uint64_t block_count, char* diagnostics, std::size_t diagnostics_size);

// ---- qualifiers -------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ __attribute__((always_inline)) inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#ifdef CUDA_CPU_SANITIZED
#define __shared__ static
#else
#define __shared__ static __attribute__((section("cuda_cpu_shared")))
#endif

using cuda_cpu::dim3;
using cuda_cpu::uint3;

#define threadIdx (cuda_cpu::current_thread->idx)
#define blockIdx (cuda_cpu::launch_state.block_idx)
#define blockDim (cuda_cpu::launch_state.block)
#define gridDim (cuda_cpu::launch_state.grid)
#define warpSize 32

#define CUDA_CPU_SITE (cuda_cpu::Site{__FILE__, __LINE__})
#define __syncthreads() cuda_cpu::sync_block(CUDA_CPU_SITE)
#define __syncwarp(...) cuda_cpu::sync_warp(cuda_cpu_mask_or_full(__VA_ARGS__), CUDA_CPU_SITE)
inline unsigned cuda_cpu_mask_or_full(unsigned mask = 0xffffffffu) { return mask; }

#define __shfl_sync(mask, value, source, ...) \
    cuda_cpu::shuffle((mask), (value), cuda_cpu_source_lane((source), ##__VA_ARGS__), CUDA_CPU_SITE)
#define __shfl_xor_sync(mask, value, offset, ...) \
    cuda_cpu::shuffle((mask), (value), cuda_cpu_xor_lane((offset), ##__VA_ARGS__), CUDA_CPU_SITE)
#define __shfl_down_sync(mask, value, delta, ...) \
    cuda_cpu::shuffle((mask), (value), cuda_cpu_down_lane((delta), ##__VA_ARGS__), CUDA_CPU_SITE)
#define __shfl_up_sync(mask, value, delta, ...) \
    cuda_cpu::shuffle((mask), (value), cuda_cpu_up_lane((delta), ##__VA_ARGS__), CUDA_CPU_SITE)
#define __ballot_sync(mask, predicate) cuda_cpu::ballot((mask), (predicate), CUDA_CPU_SITE)
#define __any_sync(mask, predicate) (cuda_cpu::ballot((mask), (predicate), CUDA_CPU_SITE) != 0u)
#define __all_sync(mask, predicate) \
    (cuda_cpu::ballot((mask), (predicate), CUDA_CPU_SITE) == cuda_cpu::ballot((mask), true, CUDA_CPU_SITE))

// Source lanes as CUDA defines them for a sub-warp `width` (a power of two <= 32).
inline unsigned cuda_cpu_segment(int width) { return cuda_cpu::lane() & ~static_cast<unsigned>(width - 1); }
inline unsigned cuda_cpu_source_lane(int source, int width = 32) {
    return cuda_cpu_segment(width) + (static_cast<unsigned>(source) & static_cast<unsigned>(width - 1));
}
inline unsigned cuda_cpu_xor_lane(int offset, int width = 32) {
    unsigned lane = cuda_cpu::lane() ^ static_cast<unsigned>(offset);
    return lane < cuda_cpu_segment(width) + width ? lane : cuda_cpu::lane();
}
inline unsigned cuda_cpu_down_lane(unsigned delta, int width = 32) {
    unsigned lane = cuda_cpu::lane() + delta;
    return lane < cuda_cpu_segment(width) + width ? lane : cuda_cpu::lane();
}
inline unsigned cuda_cpu_up_lane(unsigned delta, int width = 32) {
    return cuda_cpu::lane() >= cuda_cpu_segment(width) + delta ? cuda_cpu::lane() - delta : cuda_cpu::lane();
}

// ---- device math ------------------------------------------------------------------------------------------
using std::isinf;
using std::isnan;
using std::isfinite;
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __int_as_float(int x) { return cuda_cpu::bit_cast<float>(x); }
inline int __float_as_int(float x) { return cuda_cpu::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return cuda_cpu::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return cuda_cpu::bit_cast<unsigned>(x); }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float min(float a, float b) { return fminf(a, b); }
template <typename T> inline T __ldg(const T* p) { return *p; }

// ---- 16-bit floating point storage ------------------------------------------------------------------------
// The conversions are always inlined: a read of a 16-bit value in memory stays the caller's access, which the
// sanitizers watch, and a conversion inside a function they do not watch (mma_sync) costs them nothing.
#define CUDA_CPU_CONVERSION __attribute__((always_inline)) inline
#ifdef CUDA_CPU_SANITIZED
// The table of half values is the emulator's, not the kernel's memory: looked up out of the sanitizers' sight.
#define CUDA_CPU_TABLE_LOOKUP __attribute__((noinline, no_sanitize_address, no_sanitize_thread)) inline
#else
#define CUDA_CPU_TABLE_LOOKUP inline
#endif
namespace cuda_cpu {
// Every half's float value, built once: without F16C instructions g++ widens _Float16 with a library call per
// element, which made half kernels tens of times slower than bfloat16 ones.
inline const float* const half_values = [] {
    static float values[1 << 16];
    for (unsigned bits = 0; bits < (1u << 16); ++bits)
        values[bits] = static_cast<float>(bit_cast<_Float16>(static_cast<unsigned short>(bits)));
    return values;
}();
CUDA_CPU_TABLE_LOOKUP float half_value(unsigned short bits) { return half_values[bits]; }
}  // namespace cuda_cpu

struct __half {
    unsigned short bits;
    __half() = default;
    CUDA_CPU_CONVERSION __half(float f) : bits(cuda_cpu::bit_cast<unsigned short>(static_cast<_Float16>(f))) {}
    CUDA_CPU_CONVERSION operator float() const { return cuda_cpu::half_value(bits); }
};
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }

struct __nv_bfloat16 {
    unsigned short bits;
    __nv_bfloat16() = default;
    CUDA_CPU_CONVERSION __nv_bfloat16(float f) {
        unsigned u = cuda_cpu::bit_cast<unsigned>(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            bits = static_cast<unsigned short>((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
        } else {
            bits = static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // nearest, ties to even
        }
    }
    CUDA_CPU_CONVERSION operator float() const { return cuda_cpu::bit_cast<float>(static_cast<unsigned>(bits) << 16); }
};
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(h); }

// ---- WMMA -------------------------------------------------------------------------------------------------
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct tile_shape;
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

// The whole tile, row-major, in every lane.
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static constexpr int rows = tile_shape<Use, M, N, K>::rows;
    static constexpr int cols = tile_shape<Use, M, N, K>::cols;
    static constexpr int num_elements = rows * cols;
    T x[num_elements];
};

// Fragments are a thread's own registers: the sanitizers need not watch the arithmetic on them (loads and
// stores, which touch shared memory, stay watched).
#define CUDA_CPU_REGISTERS_ONLY __attribute__((no_sanitize_address, no_sanitize_thread))

template <typename Use, int M, int N, int K, typename T, typename Layout, typename V>
CUDA_CPU_REGISTERS_ONLY inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& value) {
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = T(value);
}

template <typename F, typename P>
inline void load_tile(F& f, const P* p, unsigned ldm, bool column_major) {
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c)
            f.x[r * F::cols + c] = p[column_major ? c * ldm + r : r * ldm + c];
}

template <typename Use, int M, int N, int K, typename T, typename P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major>& f, const P* p, unsigned ldm) {
    load_tile(f, p, ldm, false);
}
template <typename Use, int M, int N, int K, typename T, typename P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major>& f, const P* p, unsigned ldm) {
    load_tile(f, p, ldm, true);
}
template <int M, int N, int K, typename T, typename P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p, unsigned ldm, layout_t layout) {
    load_tile(f, p, ldm, layout == mem_col_major);
}

#define store_matrix_sync(p, f, ldm, layout) store_matrix_sync_at((p), (f), (ldm), (layout), CUDA_CPU_SITE)
template <int M, int N, int K, typename T, typename P>
inline void store_matrix_sync_at(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout,
                                 cuda_cpu::Site site) {
    using F = fragment<accumulator, M, N, K, T>;
    cuda_cpu::sync_warp(0xffffffffu, site);
    if (cuda_cpu::first_live_lane_of_warp())
        for (int r = 0; r < F::rows; ++r)
            for (int c = 0; c < F::cols; ++c)
                p[layout == mem_col_major ? c * ldm + r : r * ldm + c] = P(f.x[r * F::cols + c]);
    cuda_cpu::sync_warp(0xffffffffu, site);
}

template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC>
CUDA_CPU_REGISTERS_ONLY inline void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c) {
    float left[M * K], right[K * N], out[M * N];  // widened once, not once per product
    for (int i = 0; i < M * K; ++i) left[i] = static_cast<float>(a.x[i]);
    for (int i = 0; i < K * N; ++i) right[i] = static_cast<float>(b.x[i]);
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float sum = static_cast<float>(c.x[i * N + j]);
            for (int k = 0; k < K; ++k) sum += left[i * K + k] * right[k * N + j];
            out[i * N + j] = sum;
        }
    for (int i = 0; i < M * N; ++i) d.x[i] = TC(out[i]);
}
}  // namespace wmma
}  // namespace nvcuda
