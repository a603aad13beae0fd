"""Seed 002 § 3.2.1: MemoryAwareAttention, exactly as written."""


class MemoryAwareAttention:
    def __init__(self, d_model, seq_len, device='cuda'):
        self.d_model = d_model
        self.seq_len = seq_len
        self.device = device

        # GPU内存大小分析
        self.register_size = 32 * 1024  # 32KB寄存器
        self.shared_memory_size = 48 * 1024  # 48KB共享内存
        self.global_memory_bandwidth = 900  # GB/s

    def analyze_memory_footprint(self, q, k, v):
        """分析内存占用"""
        q_size = q.numel() * 4  # 假设float32
        k_size = k.numel() * 4
        v_size = v.numel() * 4
        attention_matrix_size = q.shape[0] * q.shape[1] * k.shape[1] * 4

        total_size = q_size + k_size + v_size + attention_matrix_size

        print(f"Query内存: {q_size/1024/1024:.2f} MB")
        print(f"Key内存: {k_size/1024/1024:.2f} MB")
        print(f"Value内存: {v_size/1024/1024:.2f} MB")
        print(f"注意力矩阵: {attention_matrix_size/1024/1024:.2f} MB")
        print(f"总计内存: {total_size/1024/1024:.2f} MB")

        return total_size
