// Small kernels that exercise one feature of impls/cuda/cpu each (tests/test_cuda_cpu.py).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
using namespace nvcuda;

// Block sums: dynamic shared memory, a barrier, a warp reduction with shuffles, static shared memory.
template <typename T>
__global__ void block_sums(const T* in, float* out, int n) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* tile = reinterpret_cast<float*>(smem);
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? float(in[i]) : 0.f;
    __syncthreads();
    float v = tile[blockDim.x - 1 - threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int w = 0; w < (int)blockDim.x / 32; ++w) s += partial[w];
        out[blockIdx.x] = s;
    }
}
template __global__ void block_sums<float>(const float*, float*, int);
template __global__ void block_sums<__half>(const __half*, float*, int);
template __global__ void block_sums<__nv_bfloat16>(const __nv_bfloat16*, float*, int);

// Lane queries: ballot of odd lanes, shuffle down, shuffle up, broadcast of lane 3 in sub-warps of 8.
__global__ void lanes(int* out) {
    int lane = threadIdx.x % 32;
    out[4 * threadIdx.x + 0] = (int)__ballot_sync(0xffffffffu, lane % 2 == 1);
    out[4 * threadIdx.x + 1] = __shfl_down_sync(0xffffffffu, lane, 5);
    out[4 * threadIdx.x + 2] = __shfl_up_sync(0xffffffffu, lane, 2);
    out[4 * threadIdx.x + 3] = __shfl_sync(0xffffffffu, lane, 3, 8);
}

// Threads past n return before the barrier the others wait at.
__global__ void early_return(float* out, int n) {
    __shared__ float t[64];
    if ((int)threadIdx.x >= n) return;
    t[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = t[(threadIdx.x + 1) % n];
}

// Two halves of the block wait at different __syncthreads() calls.
__global__ void split_barriers(float* out) {
    if (threadIdx.x < 32) {
        out[threadIdx.x] = 1.f;
        __syncthreads();
    } else {
        out[threadIdx.x] = 2.f;
        __syncthreads();
    }
}

// Lanes 0-15 wait at a shuffle that lanes 16-31 never reach: they wait at __syncthreads().
__global__ void deadlock(float* out) {
    float v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_sync(0xffffffffu, v, 0);
    else __syncthreads();
    out[threadIdx.x] = v;
}

// Writes a neighbour's shared slot is read without a barrier.
__global__ void missing_barrier(float* out) {
    __shared__ float t[64];
    t[threadIdx.x] = threadIdx.x;
    out[threadIdx.x] = t[(threadIdx.x + 1) % 64];
}

// Reads half of a shared array no thread wrote.
__global__ void read_unwritten(float* out) {
    __shared__ float t[64];
    if (threadIdx.x < 32) t[threadIdx.x] = 1.f;
    __syncthreads();
    out[threadIdx.x] = t[threadIdx.x];
}

// Reads one element past the input.
__global__ void read_past_end(const float* in, float* out) {
    out[threadIdx.x] = in[threadIdx.x + 1];
}

// One 16x16x16 tensor-core product, scaled element-wise and stored: C = 2 A B^T.
template <typename T>
__global__ void wmma_product(const T* a, const T* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    for (int i = 0; i < fc.num_elements; ++i) fc.x[i] *= 2.0f;
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
template __global__ void wmma_product<__half>(const __half*, const __half*, float*);
template __global__ void wmma_product<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, float*);

// Rounds each float to half and to bfloat16 and back.
__global__ void round_trip(const float* in, float* as_half, float* as_bf16, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        as_half[i] = __half2float(__float2half(in[i]));
        as_bf16[i] = __bfloat162float(__float2bfloat16(in[i]));
    }
}
