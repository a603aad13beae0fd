// Decode attention over a paged KV cache (seed 001 § 2.4), SIMT.
//
// Layout (impls/numpy/numpy_paged.py's): k_cache (num_pages, heads_kv, page_size, d) and v_cache (num_pages,
// heads_kv, page_size, d_v); block_table (batch, max_pages) int32, block_table[b][p] the physical page holding
// logical page p of sequence b (keys p * page_size .. p * page_size + page_size - 1); seq_lens (batch) int32.
// q (batch, heads, n_q, d), out like q with d_v, lse (batch, heads, n_q) float32. Query head h reads kv head
// h / (heads / heads_kv). Causal alignment is bottom-right, as in decoding: query i of sequence b sees keys
// j <= i + seq_lens[b] - n_q (decode: n_q = 1, the query sees the whole cache).
//
// Work division: one block of warps = blockDim.x / 32 warps (1 to MAX_WARPS; the launcher gives a short cache
// fewer) per (query i, head, batch) = (blockIdx.x, blockIdx.y, blockIdx.z). Warp w takes the chunks of 32
// logical keys w, w + warps, ...; within a chunk the warp walks the keys one by one, the lanes splitting d
// (lane c holds q columns c, c + 32, ... in registers, K reads coalesced); the partial dot products go through
// shared memory ([key][lane], padded) and lane j totals key j's. Each warp runs its own online softmax
// (running max and sum by shuffles, weights broadcast through shared memory, output columns lane, lane + 32,
// ... in registers, V reads coalesced); at the end the warps' partial results merge through shared memory,
// rescaled by exp(m_w - m). Float32 arithmetic for any storage type. A hidden key (past seq_lens[b], causal
// future, mask) has score -inf and its value is never read, so the padding slots of the last page may hold
// anything. A row with no visible key writes 0 and lse -inf.
//
// Static shared memory: 4 * MAX_WARPS * (MAX_DIM + 2 + CHUNK * (CHUNK + 1) + CHUNK) bytes (21,536); no dynamic.
#include <cuda_fp16.h>

constexpr int MAX_WARPS = 4;
constexpr int CHUNK = 32;
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
__global__ void __launch_bounds__(MAX_WARPS * 32)
paged_decode(const T* __restrict__ q, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
             const int* __restrict__ block_table, const int* __restrict__ seq_lens, T* __restrict__ out,
             float* __restrict__ lse, const unsigned char* __restrict__ mask, int heads, int heads_kv, int n_q,
             int d, int d_v, int page_size, int max_pages, float scale, int causal, int has_mask, int mask_sb,
             int mask_sh, int mask_sq, int mask_sk) {
    __shared__ float part_m[MAX_WARPS], part_l[MAX_WARPS];
    __shared__ float part_acc[MAX_WARPS][MAX_DIM];
    __shared__ float partials[MAX_WARPS][CHUNK * (CHUNK + 1)];  // per warp: [key][lane] partial dot products
    __shared__ float weights[MAX_WARPS][CHUNK];

    const float neg_inf = __int_as_float(0xff800000);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (heads / heads_kv);
    const long long row = ((long long)b * heads + h) * n_q + i;  // this query's row in q, out, lse
    const long long mask_row = (long long)b * mask_sb + (long long)h * mask_sh + (long long)i * mask_sq;
    const int* pages = block_table + (long long)b * max_pages;
    const int len = seq_lens[b];
    const int key_end = causal ? max(0, min(len, i + len - n_q + 1)) : len;

    float qr[COL_CHUNKS], acc[COL_CHUNKS];
#pragma unroll
    for (int c = 0; c < COL_CHUNKS; ++c) {
        const int col = c * 32 + lane;
        qr[c] = col < d ? to_float(q[row * d + col]) : 0.0f;
        acc[c] = 0.0f;
    }
    float m = neg_inf, l = 0.0f;

    float* partial = partials[warp];
    float* p_warp = weights[warp];
    for (int k0 = warp * CHUNK; k0 < key_end; k0 += warps * CHUNK) {
        // Lane c adds up q.k over columns c, c + 32, ... for each key of the chunk, then lane j totals key j.
        for (int j = 0; j < CHUNK; ++j) {
            const int key = k0 + j;
            float dot = 0.0f;
            if (key < key_end) {
                const int page = key / page_size;
                const long long slot =
                    ((long long)pages[page] * heads_kv + hk) * page_size + (key - page * page_size);
#pragma unroll
                for (int c = 0; c < COL_CHUNKS; ++c) {
                    const int col = c * 32 + lane;
                    if (col < d) dot += qr[c] * to_float(k_cache[slot * d + col]);
                }
            }
            partial[j * (CHUNK + 1) + lane] = dot;
        }
        __syncwarp();
        float score = 0.0f;
        for (int c = 0; c < 32; ++c) score += partial[lane * (CHUNK + 1) + c];

        const int key = k0 + lane;
        bool visible = key < key_end;
        if (has_mask && visible) visible = mask[mask_row + (long long)key * mask_sk] != 0;
        score = visible ? score * scale : neg_inf;
        const unsigned seen = __ballot_sync(FULL_MASK, visible);
        const float m_new = fmaxf(m, warp_max(score));
        const float shift = m_new == neg_inf ? 0.0f : m_new;
        const float alpha = expf(m - shift);
        const float p = visible ? expf(score - shift) : 0.0f;
        l = l * alpha + warp_sum(p);
        m = m_new;
#pragma unroll
        for (int c = 0; c < COL_CHUNKS; ++c) acc[c] *= alpha;

        p_warp[lane] = p;
        __syncwarp();  // also orders this chunk's reads of `partial` before the next chunk's writes
        for (int j = 0; j < CHUNK; ++j) {
            if ((seen >> j) & 1u) {
                const float pj = p_warp[j];
                const int kj = k0 + j, page = kj / page_size;
                const long long slot =
                    ((long long)pages[page] * heads_kv + hk) * page_size + (kj - page * page_size);
#pragma unroll
                for (int c = 0; c < COL_CHUNKS; ++c) {
                    const int col = c * 32 + lane;
                    if (col < d_v) acc[c] += pj * to_float(v_cache[slot * d_v + col]);
                }
            }
        }
        __syncwarp();  // the reads of p_warp before the next chunk's writes
    }

    if (lane == 0) {
        part_m[warp] = m;
        part_l[warp] = l;
    }
#pragma unroll
    for (int c = 0; c < COL_CHUNKS; ++c) {
        const int col = c * 32 + lane;
        if (col < d_v) part_acc[warp][col] = acc[c];
    }
    __syncthreads();

    float m_all = neg_inf;
#pragma unroll
    for (int w = 0; w < MAX_WARPS; ++w)
        if (w < warps) m_all = fmaxf(m_all, part_m[w]);
    const float shift = m_all == neg_inf ? 0.0f : m_all;
    float weight[MAX_WARPS], l_all = 0.0f;  // unrolled with a guard: the weights stay in registers
#pragma unroll
    for (int w = 0; w < MAX_WARPS; ++w) {
        weight[w] = w < warps ? expf(part_m[w] - shift) : 0.0f;
        if (w < warps) l_all += part_l[w] * weight[w];
    }
    const bool empty = m_all == neg_inf && !isnan(l_all);  // no visible key (NaN scores leave m at -inf)
    for (int col = tid; col < d_v; col += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < MAX_WARPS; ++w)
            if (w < warps) o += part_acc[w][col] * weight[w];
        out[row * d_v + col] = from_float<T>(empty ? 0.0f : o / l_all);
    }
    if (tid == 0) lse[row] = empty ? neg_inf : m_all + logf(l_all);
}

template __global__ void paged_decode<float>(const float*, const float*, const float*, const int*, const int*,
                                             float*, float*, const unsigned char*, int, int, int, int, int, int,
                                             int, float, int, int, int, int, int, int);
template __global__ void paged_decode<__half>(const __half*, const __half*, const __half*, const int*,
                                              const int*, __half*, float*, const unsigned char*, int, int, int,
                                              int, int, int, int, float, int, int, int, int, int, int);
