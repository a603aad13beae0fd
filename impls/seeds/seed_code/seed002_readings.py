"""Seed 002 § 3.1.2 - § 3.1.5: the four interpretation functions, exactly as the seed writes them.

Only the imports are added (the seed uses `torch` and `F` without importing them).
They are checked by interpretations/test_*.py, each on the inputs its code can take.
"""

import torch
import torch.nn.functional as F


def geometric_attention_interpretation(query, key, value):
    """
    几何解释：注意力权重反映了查询向量在键向量空间中的投影
    """
    # 计算夹角余弦（相似度）
    cos_sim = torch.cosine_similarity(query.unsqueeze(1), key.unsqueeze(0), dim=-1)

    # 转换为概率分布
    attention_weights = F.softmax(cos_sim / 0.1, dim=-1)  # 0.1是温度系数

    # 加权求和
    output = torch.matmul(attention_weights, value)

    return output, attention_weights


def information_theoretic_attention(query, key, value):
    """
    信息论解释：注意力权重最大化互信息
    """
    # 计算KL散度作为信息损失
    def kl_divergence(p, q):
        return (p * (p.log() - q.log())).sum(dim=-1)

    # 基于互信息计算注意力权重
    mutual_info = -kl_divergence(key.unsqueeze(1), key.unsqueeze(0))
    attention_weights = F.softmax(mutual_info, dim=-1)

    return torch.matmul(attention_weights, value)


def differential_geometric_attention(query, key, value):
    """
    微分几何解释：注意力是流形上的局部坐标变换
    """
    # 计算切空间投影
    def tangent_projection(query, key):
        return torch.matmul(query, key.transpose(-2, -1))

    # 构建局部坐标系
    local_basis = torch.linalg.svd(key, full_matrices=False)[0]
    coordinates = torch.matmul(query, local_basis.transpose(-2, -1))

    # 在局部坐标系中计算注意力
    attention_scores = torch.matmul(coordinates, coordinates.transpose(-2, -1))
    attention_weights = F.softmax(attention_scores, dim=-1)

    # 转换回全局坐标系
    output = torch.matmul(attention_weights, value)

    return output


def bayesian_attention(query, key, value):
    """
    贝叶斯解释：注意力是基于先验的贝叶斯推断
    """
    # 先验分布：键向量的相似度
    prior = torch.exp(torch.matmul(query, key.transpose(-2, -1)))

    # 似然函数：基于值的似然
    likelihood = torch.exp(-torch.sum((value.unsqueeze(1) - value.unsqueeze(0))**2, dim=-1))

    # 后验分布
    posterior = prior * likelihood
    attention_weights = F.softmax(posterior, dim=-1)

    # 后验期望
    output = torch.matmul(attention_weights, value)

    return output
