"""Seed 002 § 3.2.3 (MemoryOptimizedAttention) and § 3.2.5 (HardwareAwareAttention), exactly as written.

Only the imports are added. impls/seeds/seed002_tiled.py puts both behind the implementation protocol.
"""

import math

import torch
import torch.nn.functional as F


class MemoryOptimizedAttention:
    def __init__(self, block_size=32):
        self.block_size = block_size

    def tiled_attention(self, q, k, v):
        """分块注意力计算，优化内存访问"""
        batch_size, seq_len, d_model = q.shape

        # 分块计算
        output = torch.zeros_like(q)
        attention_matrix = torch.zeros(batch_size, seq_len, seq_len)

        for i in range(0, seq_len, self.block_size):
            for j in range(0, seq_len, self.block_size):
                # 计算当前块的注意力
                q_block = q[:, i:i+self.block_size, :]
                k_block = k[:, j:j+self.block_size, :]
                v_block = v[:, j:j+self.block_size, :]

                # 矩阵乘法
                scores = torch.matmul(q_block, k_block.transpose(-2, -1)) / math.sqrt(d_model)
                attention_weights = F.softmax(scores, dim=-1)

                # 存储注意力权重和输出
                attention_matrix[:, i:i+self.block_size, j:j+self.block_size] = attention_weights
                output[:, i:i+self.block_size, :] += torch.matmul(attention_weights, v_block)

        return output, attention_matrix


class HardwareAwareAttention:
    def __init__(self, d_model, seq_len, device='cuda'):
        self.d_model = d_model
        self.seq_len = seq_len
        self.device = device

        # 根据硬件特性调整参数
        if device == 'cuda':
            self.warp_size = 32
            self.max_shared_memory = 48 * 1024  # 48KB
        else:
            self.warp_size = 1
            self.max_shared_memory = 64 * 1024  # 64KB

    def hardware_optimized_attention(self, q, k, v):
        """硬件感知的注意力实现"""
        batch_size, seq_len, d_model = q.shape

        # 计算最优块大小
        optimal_block_size = self.calculate_optimal_block_size(d_model, seq_len)

        # 分块计算
        output = torch.zeros_like(q)
        attention_matrix = torch.zeros(batch_size, seq_len, seq_len)

        for i in range(0, seq_len, optimal_block_size):
            for j in range(0, seq_len, optimal_block_size):
                # 计算当前块
                q_block = q[:, i:i+optimal_block_size, :]
                k_block = k[:, j:j+optimal_block_size, :]
                v_block = v[:, j:j+optimal_block_size, :]

                # 优化的注意力计算
                scores = self.efficient_matmul(q_block, k_block.transpose(-2, -1))
                attention_weights = F.softmax(scores / math.sqrt(d_model), dim=-1)

                # 累加结果
                output[:, i:i+optimal_block_size, :] += torch.matmul(attention_weights, v_block)
                attention_matrix[:, i:i+optimal_block_size, j:j+optimal_block_size] = attention_weights

        return output, attention_matrix

    def efficient_matmul(self, a, b):
        """优化的矩阵乘法"""
        return torch.matmul(a, b)

    def calculate_optimal_block_size(self, d_model, seq_len):
        """计算最优块大小"""
        # 简化的块大小计算
        if seq_len > 1024:
            return 64
        elif seq_len > 512:
            return 32
        else:
            return 16
