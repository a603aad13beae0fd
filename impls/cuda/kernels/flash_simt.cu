// FlashAttention-2 style forward pass on CUDA cores (SIMT, no tensor cores).
//
// Layout: q (batch, heads, n_q, d), k (batch, heads_kv, n_k, d), v (batch, heads_kv, n_k, d_v), out like q
// with d_v, lse (batch, heads, n_q) float32; all contiguous. Query head h reads kv head h / (heads / heads_kv).
//
// Work division: one block of warps = blockDim.x / 32 warps (1 to MAX_WARPS; the launcher gives a short query
// fewer) per (query tile of block_rows = warps * ROWS_PER_WARP rows, head, batch) = (blockIdx.x, blockIdx.y,
// blockIdx.z). Each warp owns ROWS_PER_WARP query rows. The block walks the keys in tiles of BLOCK_COLS = 32,
// staged in shared memory as float (K padded to d + 1 columns, so lane j reading key j's column c is free of
// bank conflicts). For S = Q K^T lane j computes the score of key j for each of the warp's rows (the q rows
// are broadcast reads from shared); the row's max and sum are warp shuffles; for P V lane j owns output
// columns j, j + 32, ... (up to 256), the weights read from shared memory (a static [MAX_WARPS *
// ROWS_PER_WARP][BLOCK_COLS] array, each warp its own rows, ordered by __syncwarp). Online softmax per row
// (running max m, running sum l, accumulator rescaled by exp(m_old - m_new)), all arithmetic in float32
// whatever the storage type. Beyond the seeds: softcap > 0 caps the scaled score as softcap * tanh(s / softcap),
// and a window (window_left, window_right; -1 unbounded) shows query i the keys i + offset - left .. i + offset
// + right, causal being the window's right bound 0 (the launcher folds it in). A hidden key (outside the window,
// mask, past n_k) has its score replaced by -inf and
// its value never multiplied (a per-row ballot of visible keys), so NaN or Inf held by hidden keys never
// reaches an output; NaN a row does see does. Key tiles outside the window of every row of the block are
// skipped: the block reads keys from its first row's left bound to its last row's right bound only. A row with
// no visible key writes 0 and lse -inf.
//
// Dynamic shared memory: 4 * (block_rows * d + BLOCK_COLS * (d + 1) + BLOCK_COLS * d_v) bytes
// (82,048 bytes at d = d_v = 256 with 4 warps), plus 2 KB static. __launch_bounds__(128, 2): two blocks per SM fit the
// shared memory at d = 256 on sm_80, and ptxas then keeps the accumulators in registers without spilling.
#include <cuda_fp16.h>

constexpr int MAX_WARPS = 4;
constexpr int ROWS_PER_WARP = 4;
constexpr int BLOCK_COLS = 32;
constexpr int MAX_DIM = 256;
constexpr int COL_CHUNKS = MAX_DIM / 32;
constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, offset));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(FULL_MASK, x, offset);
    return x;
}

template <typename T>
__global__ void __launch_bounds__(MAX_WARPS * 32, 2)
flash_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
              float* __restrict__ lse, const unsigned char* __restrict__ mask, int heads, int heads_kv, int n_q,
              int n_k, int d, int d_v, float scale, float softcap, int offset, int window_left, int window_right,
              int has_mask, int mask_sb,
              int mask_sh, int mask_sq, int mask_sk) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float ps[MAX_WARPS * ROWS_PER_WARP * BLOCK_COLS];  // the weights of the tile, row by row
    const int block_rows = (blockDim.x >> 5) * ROWS_PER_WARP;
    float* qs = reinterpret_cast<float*>(smem);  // [block_rows][d]
    float* ks = qs + block_rows * d;              // [BLOCK_COLS][d + 1]
    float* vs = ks + BLOCK_COLS * (d + 1);        // [BLOCK_COLS][d_v]

    const float neg_inf = __int_as_float(0xff800000);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int row0 = blockIdx.x * block_rows, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (heads / heads_kv);
    const long long q_rows = ((long long)b * heads + h) * n_q;      // first row of (b, h) in q, out, lse
    const long long kv_rows = ((long long)b * heads_kv + hk) * n_k;  // first row of (b, hk) in k, v
    const long long mask_bh = (long long)b * mask_sb + (long long)h * mask_sh;

    for (int e = tid; e < block_rows * d; e += blockDim.x) {
        const int r = e / d, c = e - r * d, i = row0 + r;
        qs[e] = i < n_q ? to_float(q[(q_rows + i) * d + c]) : 0.0f;
    }

    const int warp_row0 = row0 + warp * ROWS_PER_WARP;
    const float* q_warp = qs + warp * ROWS_PER_WARP * d;
    float* p_warp = ps + warp * ROWS_PER_WARP * BLOCK_COLS;
    float m[ROWS_PER_WARP], l[ROWS_PER_WARP], acc[ROWS_PER_WARP][COL_CHUNKS];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        m[r] = neg_inf;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < COL_CHUNKS; ++c) acc[r][c] = 0.0f;
    }

    // Keys before key_begin or at and past key_end lie outside the window of every row of this block.
    const int last_row = min(row0 + block_rows, n_q) - 1;
    const int key_begin = window_left < 0 ? 0 : min(n_k, max(0, row0 + offset - window_left));
    const int key_end = window_right < 0 ? n_k : min(n_k, max(0, last_row + offset + window_right + 1));

    for (int k0 = key_begin; k0 < key_end; k0 += BLOCK_COLS) {
        __syncthreads();  // every warp is done reading the previous tile
        for (int e = tid; e < BLOCK_COLS * d; e += blockDim.x) {
            const int j = e / d, c = e - j * d, key = k0 + j;
            ks[j * (d + 1) + c] = key < n_k ? to_float(k[(kv_rows + key) * d + c]) : 0.0f;
        }
        for (int e = tid; e < BLOCK_COLS * d_v; e += blockDim.x) {
            const int j = e / d_v, c = e - j * d_v, key = k0 + j;
            vs[e] = key < n_k ? to_float(v[(kv_rows + key) * d_v + c]) : 0.0f;
        }
        __syncthreads();  // the tile (and, on the first pass, the q tile) is in shared memory

        // S = Q K^T: lane j scores key k0 + j against each of the warp's rows.
        float p[ROWS_PER_WARP];
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) p[r] = 0.0f;
        const float* k_lane = ks + lane * (d + 1);
        for (int c = 0; c < d; ++c) {
            const float kc = k_lane[c];
#pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; ++r) p[r] += q_warp[r * d + c] * kc;
        }

        // Online softmax: p becomes exp(score - running max), hidden keys 0; rescale what came before.
        const int key = k0 + lane;
        unsigned seen[ROWS_PER_WARP];
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            const int i = warp_row0 + r;
            bool visible = key < n_k && i < n_q && (window_left < 0 || key >= i + offset - window_left) &&
                           (window_right < 0 || key <= i + offset + window_right);
            if (has_mask && visible)
                visible = mask[mask_bh + (long long)i * mask_sq + (long long)key * mask_sk] != 0;
            float score = p[r] * scale;
            if (softcap > 0.0f) score = softcap * tanhf(score / softcap);
            score = visible ? score : neg_inf;
            seen[r] = __ballot_sync(FULL_MASK, visible);
            const float m_new = fmaxf(m[r], warp_max(score));
            const float shift = m_new == neg_inf ? 0.0f : m_new;
            const float alpha = expf(m[r] - shift);
            p[r] = visible ? expf(score - shift) : 0.0f;
            l[r] = l[r] * alpha + warp_sum(p[r]);
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < COL_CHUNKS; ++c) acc[r][c] *= alpha;
        }

        // O += P V: lane j accumulates columns j, j + 32, ...; the weights go through shared memory.
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) p_warp[r * BLOCK_COLS + lane] = p[r];
        __syncwarp();
        for (int j = 0; j < BLOCK_COLS; ++j) {
            float pj[ROWS_PER_WARP];
#pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; ++r) pj[r] = p_warp[r * BLOCK_COLS + j];
#pragma unroll
            for (int c = 0; c < COL_CHUNKS; ++c) {
                const int col = c * 32 + lane;
                if (col < d_v) {
                    const float vj = vs[j * d_v + col];
#pragma unroll
                    for (int r = 0; r < ROWS_PER_WARP; ++r)
                        if ((seen[r] >> j) & 1u) acc[r][c] += pj[r] * vj;
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        const int i = warp_row0 + r;
        if (i < n_q) {
            const bool empty = m[r] == neg_inf && !isnan(l[r]);  // no visible key (NaN scores leave m at -inf)
#pragma unroll
            for (int c = 0; c < COL_CHUNKS; ++c) {
                const int col = c * 32 + lane;
                if (col < d_v) out[(q_rows + i) * d_v + col] = from_float<T>(empty ? 0.0f : acc[r][c] / l[r]);
            }
            if (lane == 0) lse[q_rows + i] = empty ? neg_inf : m[r] + logf(l[r]);
        }
    }
}

template __global__ void flash_forward<float>(const float*, const float*, const float*, float*, float*,
                                              const unsigned char*, int, int, int, int, int, int, float, float,
                                              int, int, int, int, int, int, int, int);
template __global__ void flash_forward<__half>(const __half*, const __half*, const __half*, __half*, float*,
                                               const unsigned char*, int, int, int, int, int, int, float, float,
                                               int, int, int, int, int, int, int, int);
