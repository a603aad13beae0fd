// Seed 002 § 3.2.2 CUDA核设计基础: attention_kernel, verbatim.

__global__ void attention_kernel(
    float* q, float* k, float* v, float* output,
    int batch_size, int seq_len, int d_model,
    float* attention_weights
) {
    int batch_idx = blockIdx.x;
    int seq_idx = blockIdx.y * blockDim.x + threadIdx.x;
    
    if (seq_idx >= seq_len) return;
    
    float sum = 0.0f;
    float max_val = -INFINITY;
    
    // 寻找最大值用于数值稳定性
    for (int k_idx = 0; k_idx < seq_len; k_idx++) {
        float dot = 0.0f;
        for (int d = 0; d < d_model; d++) {
            dot += q[batch_idx * seq_len * d_model + seq_idx * d_model + d] *
                   k[batch_idx * seq_len * d_model + k_idx * d_model + d];
        }
        dot /= sqrt(d_model);
        max_val = fmaxf(max_val, dot);
    }
    
    // 计算softmax
    float sum_exp = 0.0f;
    for (int k_idx = 0; k_idx < seq_len; k_idx++) {
        float dot = 0.0f;
        for (int d = 0; d < d_model; d++) {
            dot += q[batch_idx * seq_len * d_model + seq_idx * d_model + d] *
                   k[batch_idx * seq_len * d_model + k_idx * d_model + d];
        }
        dot /= sqrt(d_model);
        float exp_val = expf(dot - max_val);
        sum_exp += exp_val;
        attention_weights[batch_idx * seq_len * seq_len + seq_idx * seq_len + k_idx] = exp_val;
    }
    
    // 计算输出
    for (int d = 0; d < d_model; d++) {
        float output_val = 0.0f;
        for (int k_idx = 0; k_idx < seq_len; k_idx++) {
            float weight = attention_weights[batch_idx * seq_len * seq_len + seq_idx * seq_len + k_idx] / sum_exp;
            output_val += weight * v[batch_idx * seq_len * d_model + k_idx * d_model + d];
        }
        output[batch_idx * seq_len * d_model + seq_idx * d_model + d] = output_val;
    }
}
