// FlashAttention-2 style forward pass on tensor cores through WMMA (16x16x16, fp16 or bf16 in, fp32 accumulate).
//
// Layout: one block of 4 warps per (query-row tile, kv head, batch); grid (ceil(group * n_q / 64), heads_kv,
// batch). The 64 rows of a tile are (query head, query position) pairs of the `group` query heads that share
// kv head blockIdx.y, packed head-major, so a decode step of GQA/MQA reads each K/V tile once for the whole
// group. Warp w owns rows 16w..16w+15: it computes their scores S = Q K^T (WMMA, Q and the K tile from
// shared), runs the online softmax on them in fp32 (SIMT, two lanes per row, on S stored to shared), writes
// the weights P rounded to T over the upper half of its S rows and accumulates O += P V (WMMA, O in
// accumulator fragments). After its
// first tile a row's running maximum is only raised when a score exceeds it by more than 2^8 (FA4's lazy
// rescaling), so O is rescaled (through shared: fragment layouts are opaque) rarely, and a warp-uniform vote
// skips it when no row of the warp needs it. Causal blocks stop at their last visible key tile and run
// longest-first; within a tile a warp multiplies only the blocks of 16 keys that exist and that some row of
// it may see (key tails, causal diagonals, warps without rows cost nothing on the tensor cores).
//
// Template: T in {__half, __nv_bfloat16}; D_MAX in {64, 128, 256} bounds d and d_v (multiples of 16, the
// launcher's rule) and sets the key tile: 64 keys up to D_MAX 128, 32 at 256. Dynamic shared memory, from
// the runtime d and d_v (rows padded by 8 halves / 4 floats against bank conflicts, regions 128-aligned):
//   Q [64][d+8] T | K [BC][d+8] T | V [BC][d_v+8] T | S [64][BC+4] f32 (P overwrites the upper half of each
//   row) | alpha, then 1/l [64] f32 | flags [4] int: 44 KB at d = d_v = 64, 68 KB at 128, 75 KB at 256 (the
//   launcher computes the same sum); with the registers of __launch_bounds__, an H100 SM holds 4, 3, 2 blocks.
//
// Semantics: scores scale * q.k in fp32 (exp2 with scale * log2 e folded in); causal: key j visible to query i
// when j <= i + causal_offset (0: top-left); mask: uint8 (non-zero = visible) read as
// mask[b*msb + h*msh + i*msi + j*msj] (stride 0 broadcasts); lse natural log, -inf for a row with no visible
// key (its output is 0). Keys past n_k and queries past n_q are zero in shared and hidden. A hidden weight is
// stored as -0: when a V tile holds a non-finite value the warp replaces the tensor-core product by a SIMT
// one that skips -0 weights, so NaN/Inf in a value no row may see never reaches it (0 * NaN = NaN otherwise).
//
// What limits its speed (H100/H200): the CUDA subset it keeps to (it also runs on the CPU emulator) has no
// cp.async/TMA, no wgmma and no inline mma.sync: K/V tiles are loaded synchronously (registers -> shared,
// two barriers a tile, latency hidden only by the 2-3 other resident blocks), WMMA is m16n16k16 mma.sync
// rather than Hopper's warpgroup MMA (FlashAttention-3 is ~1.5-2x faster there), and S and P round-trip
// through shared memory where FlashAttention-2 keeps them in registers. A tile has 64 query rows: a decode
// step with group * n_q < 64 leaves rows idle.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>

using namespace nvcuda;

namespace flash_wmma_detail {

constexpr int WARPS = 4;
constexpr int THREADS = WARPS * 32;
constexpr int BR = WARPS * 16;     // query rows per block
constexpr int PAD_T = 8;           // T elements of padding per shared row (Q, K, V, P)
constexpr int PAD_F = 4;           // floats of padding per row of S
constexpr float LAZY_LOG2 = 8.0f;  // keep a row's maximum until a score exceeds it by 2^8
constexpr float LN2 = 0.693147180559945309f;
constexpr unsigned FULL = 0xffffffffu;

template <int D_MAX>
struct Tile {
    static_assert(D_MAX == 64 || D_MAX == 128 || D_MAX == 256, "D_MAX is 64, 128 or 256");
    static constexpr int BC = D_MAX <= 128 ? 64 : 32;  // keys per tile
    static constexpr int MIN_BLOCKS = D_MAX == 64 ? 4 : D_MAX == 128 ? 3 : 2;  // per SM: registers <= 128, 168, 255
};

template <typename T>
struct Elem;
template <>
struct Elem<__half> {
    static constexpr unsigned EXPONENT = 0x7c00u;
    static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_float(float x) { return __float2half(x); }
};
template <>
struct Elem<__nv_bfloat16> {
    static constexpr unsigned EXPONENT = 0x7f80u;
    static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
};

// Eight 16-bit elements: one 16-byte global load or shared store.
struct __align__(16) Chunk {
    unsigned w[4];
};

__device__ __forceinline__ bool non_finite(const Chunk& c, unsigned exponent) {
    bool found = false;
    for (int i = 0; i < 4; ++i) {
        found = found || (c.w[i] & exponent) == exponent || ((c.w[i] >> 16) & exponent) == exponent;
    }
    return found;
}

__device__ __forceinline__ int round_up(int bytes) { return (bytes + 127) & ~127; }

// Rows [0, rows) of a K or V tile of `cols` columns from `src` (rows of `cols` elements); rows from
// `rows_valid` on are zero. Each thread loads all its chunks before storing any. True if this thread met a
// non-finite element.
template <typename T, int ROWS, int D_MAX>
__device__ __forceinline__ bool load_tile(T* dst, int dst_stride, const T* __restrict__ src, int cols,
                                          int rows_valid) {
    constexpr int MAX_CHUNKS = ROWS * D_MAX / 8 / THREADS;
    const int per_row = cols / 8;
    const int total = ROWS * per_row;
    Chunk held[MAX_CHUNKS];
    bool bad = false;
#pragma unroll
    for (int n = 0; n < MAX_CHUNKS; ++n) {
        const int idx = threadIdx.x + n * THREADS;
        const int r = idx / per_row;
        const int c = (idx - r * per_row) * 8;
        held[n] = Chunk{{0u, 0u, 0u, 0u}};
        if (idx < total && r < rows_valid) {
            held[n] = *reinterpret_cast<const Chunk*>(src + static_cast<long long>(r) * cols + c);
            bad = bad || non_finite(held[n], Elem<T>::EXPONENT);
        }
    }
#pragma unroll
    for (int n = 0; n < MAX_CHUNKS; ++n) {
        const int idx = threadIdx.x + n * THREADS;
        const int r = idx / per_row;
        const int c = (idx - r * per_row) * 8;
        if (idx < total) *reinterpret_cast<Chunk*>(dst + r * dst_stride + c) = held[n];
    }
    return bad;
}

}  // namespace flash_wmma_detail

template <typename T, int D_MAX = 256>
__global__ void __launch_bounds__(flash_wmma_detail::THREADS, flash_wmma_detail::Tile<D_MAX>::MIN_BLOCKS)
flash_wmma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
           const unsigned char* __restrict__ mask, T* __restrict__ out, float* __restrict__ lse,
           int heads, int heads_kv, int n_q, int n_k, int d, int d_v, float scale_log2, int causal,
           int causal_offset, int has_mask, int msb, int msh, int msi, int msj) {
    using namespace flash_wmma_detail;
    using E = Elem<T>;
    constexpr int BC = Tile<D_MAX>::BC;
    constexpr int O_TILES = D_MAX / 16;
    const float NEG_INF = -__int_as_float(0x7f800000);

    extern __shared__ __align__(128) unsigned char smem[];  // regions 128-aligned from here (WMMA needs 32)
    const int qs = d + PAD_T, ks = d + PAD_T, vs = d_v + PAD_T, ss = BC + PAD_F, ps = 2 * ss;
    int offset = 0;
    T* sQ = reinterpret_cast<T*>(smem);
    offset += round_up(BR * qs * static_cast<int>(sizeof(T)));
    T* sK = reinterpret_cast<T*>(smem + offset);
    offset += round_up(BC * ks * static_cast<int>(sizeof(T)));
    T* sV = reinterpret_cast<T*>(smem + offset);
    offset += round_up(BC * vs * static_cast<int>(sizeof(T)));
    float* sS = reinterpret_cast<float*>(smem + offset);
    offset += round_up(BR * ss * static_cast<int>(sizeof(float)));
    float* sRow = reinterpret_cast<float*>(smem + offset);  // alpha per row, then 1/l
    offset += round_up(BR * static_cast<int>(sizeof(float)));
    int* sFlag = reinterpret_cast<int*>(smem + offset);  // per warp: its part of the V tile is non-finite

    const int group = heads / heads_kv;
    const int rows_total = group * n_q;
    const int tile = causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    const int r0 = tile * BR;
    const int g = blockIdx.y;
    const int b = blockIdx.z;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;

    // Q tile: row R of the block is query position (r0 + R) % n_q of head g * group + (r0 + R) / n_q.
    {
        const int per_row = d / 8;
        for (int idx = threadIdx.x; idx < BR * per_row; idx += THREADS) {
            const int r = idx / per_row;
            const int c = (idx - r * per_row) * 8;
            const int row = r0 + r;
            Chunk x = Chunk{{0u, 0u, 0u, 0u}};
            if (row < rows_total) {
                const long long h = static_cast<long long>(g) * group + row / n_q;
                x = *reinterpret_cast<const Chunk*>(q + ((b * static_cast<long long>(heads) + h) * n_q + row % n_q) * d + c);
            }
            *reinterpret_cast<Chunk*>(sQ + r * qs + c) = x;
        }
    }

    // This lane's softmax row (two lanes a row) and where its mask row starts.
    const int my_row = warp * 16 + lane / 2;
    const int half = lane % 2;
    const int row_global = r0 + my_row;
    const bool row_ok = row_global < rows_total;
    const int qi = row_ok ? row_global % n_q : 0;
    const int qh = row_ok ? g * group + row_global / n_q : 0;
    const unsigned char* mask_row =
        (has_mask && row_ok)
            ? mask + static_cast<long long>(b) * msb + static_cast<long long>(qh) * msh + static_cast<long long>(qi) * msi
            : nullptr;

    int key_end = n_k;
    if (causal) {
        const int last = min(r0 + BR, rows_total) - 1;
        const int max_i = (r0 / n_q != last / n_q) ? n_q - 1 : last % n_q;
        key_end = min(n_k, max_i + causal_offset + 1);
    }

    // The last query position among this warp's rows (-1: it has none), which bounds the key blocks it sees.
    int warp_last = row_ok ? qi : -1;
    for (int step = 16; step > 0; step /= 2) warp_last = max(warp_last, __shfl_xor_sync(FULL, warp_last, step));

    float m_run = NEG_INF;  // this row's running maximum of scale * log2(e) * score
    float l_run = 0.0f;     // sum of exp2(x - m_run) over the keys so far
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[O_TILES];
#pragma unroll
    for (int n = 0; n < O_TILES; ++n) wmma::fill_fragment(o[n], 0.0f);
    const int o_tiles = d_v / 16;
    // This warp's 16 rows of S, each 4 BC + 16 bytes: the scores; then P (T) in bytes [2 BC, 4 BC) of the row
    // and, in bytes [0, 64), scratch for an O fragment (rescaling, the SIMT product, the output).
    float* sW = sS + warp * 16 * ss;
    T* pW = reinterpret_cast<T*>(sW) + BC;
    const long long kv_base = (static_cast<long long>(b) * heads_kv + g) * n_k;

    for (int kb = 0; kb < key_end; kb += BC) {
        __syncthreads();  // every warp is done with the previous K/V tile (and on the first pass Q is in)
        const int rows_valid = min(BC, n_k - kb);
        load_tile<T, BC, D_MAX>(sK, ks, k + (kv_base + kb) * d, d, rows_valid);
        const bool bad = load_tile<T, BC, D_MAX>(sV, vs, v + (kv_base + kb) * d_v, d_v, rows_valid);
        const bool warp_bad = __any_sync(FULL, bad);
        if (lane == 0) sFlag[warp] = warp_bad ? 1 : 0;
        __syncthreads();
        const bool v_non_finite = (sFlag[0] | sFlag[1] | sFlag[2] | sFlag[3]) != 0;

        // Blocks of 16 keys this warp multiplies: none past n_k or wholly in the causal future of its rows (a
        // hidden score is never read; its weight is -0), so tails, causal diagonals and idle warps cost less.
        int warp_keys = warp_last < 0 ? 0 : rows_valid;
        if (causal) warp_keys = min(warp_keys, warp_last + causal_offset + 1 - kb);
        const int blocks = max(0, (warp_keys + 15) / 16);

        // S = Q K^T for this warp's 16 rows.
        if (blocks > 0) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> s[BC / 16];
#pragma unroll
            for (int j = 0; j < BC / 16; ++j) wmma::fill_fragment(s[j], 0.0f);
            for (int kk = 0; kk < d; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa;
                wmma::load_matrix_sync(qa, sQ + warp * 16 * qs + kk, qs);
#pragma unroll
                for (int j = 0; j < BC / 16; ++j) {
                    if (j < blocks) {
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kt;
                        wmma::load_matrix_sync(kt, sK + j * 16 * ks + kk, ks);
                        wmma::mma_sync(s[j], qa, kt, s[j]);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < BC / 16; ++j) {
                if (j < blocks) wmma::store_matrix_sync(sW + j * 16, s[j], ss, wmma::mem_row_major);
            }
        }
        __syncwarp();

        // Online softmax: lanes 2r and 2r+1 share row r, taking alternate columns.
        float x[BC / 2];
        float tile_max = NEG_INF;
        const float* s_row = sW + (lane / 2) * ss;
#pragma unroll
        for (int t = 0; t < BC / 2; ++t) {
            const int c = 2 * t + half;
            const int j = kb + c;
            bool visible = row_ok && j < n_k && (!causal || j <= qi + causal_offset);
            if (visible && mask_row) visible = mask_row[static_cast<long long>(j) * msj] != 0;
            x[t] = visible ? s_row[c] * scale_log2 : NEG_INF;
            tile_max = fmaxf(tile_max, x[t]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL, tile_max, 1));
        __syncwarp();  // both lanes of a row have read its scores: P may overwrite their upper half
        const float m_new = tile_max > m_run + LAZY_LOG2 ? tile_max : m_run;
        const float alpha = m_new == m_run ? 1.0f : exp2f(m_run - m_new);
        const bool must_rescale = m_new != m_run && m_run != NEG_INF;  // O is 0 (or NaN) until a finite max
        m_run = m_new;
        const float base = m_run == NEG_INF ? 0.0f : m_run;
        float sum = 0.0f;
        T* p_row = pW + (lane / 2) * ps;
#pragma unroll
        for (int t = 0; t < BC / 2; ++t) {
            const float p = exp2f(x[t] - base);
            sum += p;
            p_row[2 * t + half] = E::from_float(x[t] == NEG_INF ? -0.0f : p);  // -0: hidden
        }
        sum += __shfl_xor_sync(FULL, sum, 1);
        l_run = l_run * alpha + sum;
        if (half == 0) sRow[my_row] = alpha;
        const bool rescale = __any_sync(FULL, must_rescale);
        __syncwarp();

        // O *= alpha per row, through this warp's S rows (the scores are consumed).
        if (rescale) {
#pragma unroll
            for (int n = 0; n < O_TILES; ++n) {
                if (n < o_tiles) {
                    wmma::store_matrix_sync(sW, o[n], ss, wmma::mem_row_major);
                    __syncwarp();
                    for (int e = lane; e < 256; e += 32) sW[(e / 16) * ss + e % 16] *= sRow[warp * 16 + e / 16];
                    __syncwarp();
                    wmma::load_matrix_sync(o[n], sW, ss, wmma::mem_row_major);
                    __syncwarp();
                }
            }
        }

        if (!v_non_finite) {  // O += P V on tensor cores
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa[BC / 16];
#pragma unroll
            for (int c = 0; c < BC / 16; ++c) {
                if (c < blocks) wmma::load_matrix_sync(pa[c], pW + c * 16, ps);
            }
#pragma unroll
            for (int n = 0; n < O_TILES; ++n) {
                if (n < o_tiles) {
#pragma unroll
                    for (int c = 0; c < BC / 16; ++c) {
                        if (c < blocks) {
                            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
                            wmma::load_matrix_sync(vb, sV + c * 16 * vs + n * 16, vs);
                            wmma::mma_sync(o[n], pa[c], vb, o[n]);
                        }
                    }
                }
            }
        } else {  // a non-finite value in the tile: SIMT product that skips hidden (-0) weights
#pragma unroll
            for (int n = 0; n < O_TILES; ++n) {
                if (n < o_tiles) {
                    wmma::store_matrix_sync(sW, o[n], ss, wmma::mem_row_major);
                    __syncwarp();
                    for (int e = lane; e < 256; e += 32) {
                        const T* p = pW + (e / 16) * ps;
                        const T* vc = sV + n * 16 + e % 16;
                        float acc = sW[(e / 16) * ss + e % 16];
                        for (int c = 0; c < BC; ++c) {
                            const float w = E::to_float(p[c]);
                            if (__float_as_int(w) >= 0) acc += w * E::to_float(vc[c * vs]);
                        }
                        sW[(e / 16) * ss + e % 16] = acc;
                    }
                    __syncwarp();
                    wmma::load_matrix_sync(o[n], sW, ss, wmma::mem_row_major);
                    __syncwarp();
                }
            }
        }
    }

    // out = O / l (0 where no key is visible), lse = ln 2 * (m + log2 l) (-inf there).
    __syncwarp();
    if (half == 0) {
        sRow[my_row] = l_run == 0.0f ? 0.0f : 1.0f / l_run;
        if (row_ok) {
            lse[(static_cast<long long>(b) * heads + qh) * n_q + qi] =
                l_run == 0.0f ? NEG_INF : (m_run + log2f(l_run)) * LN2;
        }
    }
    __syncwarp();
#pragma unroll
    for (int n = 0; n < O_TILES; ++n) {
        if (n < o_tiles) {
            wmma::store_matrix_sync(sW, o[n], ss, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const int row = r0 + warp * 16 + e / 16;
                if (row < rows_total) {
                    const long long h = static_cast<long long>(g) * group + row / n_q;
                    out[((b * static_cast<long long>(heads) + h) * n_q + row % n_q) * d_v + n * 16 + e % 16] =
                        E::from_float(sW[(e / 16) * ss + e % 16] * sRow[warp * 16 + e / 16]);
                }
            }
            __syncwarp();
        }
    }
}
