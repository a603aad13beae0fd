// Seed 002 § 3.2.4 利用共享内存和寄存器: optimized_attention_kernel, verbatim.

__global__ void optimized_attention_kernel(
    float* q, float* k, float* v, float* output,
    int batch_size, int seq_len, int d_model,
    float* shared_memory
) {
    extern __shared__ float s_mem[];
    
    int batch_idx = blockIdx.x;
    int seq_idx = blockIdx.y * blockDim.x + threadIdx.x;
    
    if (seq_idx >= seq_len) return;
    
    // 将Q和K加载到共享内存
    int shared_idx = threadIdx.x * d_model;
    for (int d = 0; d < d_model; d++) {
        s_mem[shared_idx + d] = q[batch_idx * seq_len * d_model + seq_idx * d_model + d];
        s_mem[shared_idx + d + d_model] = k[batch_idx * seq_len * d_model + seq_idx * d_model + d];
    }
    __syncthreads();
    
    // 使用共享内存计算
    float max_val = -INFINITY;
    for (int k_idx = 0; k_idx < seq_len; k_idx++) {
        float dot = 0.0f;
        for (int d = 0; d < d_model; d++) {
            dot += s_mem[shared_idx + d] * s_mem[k_idx * blockDim.x * d_model + d];
        }
        dot /= sqrt(d_model);
        max_val = fmaxf(max_val, dot);
    }
    
    // 计算softmax
    float sum_exp = 0.0f;
    for (int k_idx = 0; k_idx < seq_len; k_idx++) {
        float dot = 0.0f;
        for (int d = 0; d < d_model; d++) {
            dot += s_mem[shared_idx + d] * s_mem[k_idx * blockDim.x * d_model + d];
        }
        dot /= sqrt(d_model);
        sum_exp += expf(dot - max_val);
    }
    
    // 计算最终输出
    for (int d = 0; d < d_model; d++) {
        float output_val = 0.0f;
        for (int k_idx = 0; k_idx < seq_len; k_idx++) {
            float dot = 0.0f;
            for (int d_inner = 0; d_inner < d_model; d_inner++) {
                dot += s_mem[shared_idx + d_inner] * s_mem[k_idx * blockDim.x * d_model + d_inner];
            }
            dot /= sqrt(d_model);
            float weight = expf(dot - max_val) / sum_exp;
            output_val += weight * v[batch_idx * seq_len * d_model + k_idx * d_model + d];
        }
        output[batch_idx * seq_len * d_model + seq_idx * d_model + d] = output_val;
    }
}
