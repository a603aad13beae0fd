"""The seeds' worked examples as problems (their numbers are seeded: the seeds' figures hold none).

Each returns a Problem whose repro line calls the same function, so a failure
on an example is reproduced by one import.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np

from specs.positional import rotary_embedding, sinusoidal_encoding  # noqa: F401 (for problems' steps)
from specs.problems import Problem, Recipe
from specs.reference import merge_heads, split_heads

# Seed 001 § 注意力机制简介: 四不像 against 鹿, 牛, 羊, 驴, 青蛙.
SIWUXIANG_WEIGHTS = (Fraction(1, 3), Fraction(1, 6), Fraction(1, 4), Fraction(1, 4), Fraction(0))
SIWUXIANG_ANIMALS = ("deer", "cow", "sheep", "donkey", "frog")
UNDERFLOW_GAP = 1000.0  # e^-1000 is 0 in float64, float32 and float16
# "和羊、驴的相似度均为1/4": one or more animals (joined by 、) and the similarity they share.
_SIMILARITY = re.compile(r"和(?P<animals>[^和，、的]+(?:、[^和，、的]+)*)的相似度均?为(?P<weight>\d+(?:/\d+)?)")

# Seed 000 § 具体过程: 5 tokens of 6 features; W_Q, W_K, W_V of 6 x 4.
WORKED_000_SIZES = (5, 6, 4)  # tokens, features per token, columns of W_Q, W_K, W_V


def _problem(q: np.ndarray, k: np.ndarray, v: np.ndarray, origin: str) -> Problem:
    recipe = Recipe(batch=q.shape[0], heads=q.shape[1], heads_kv=k.shape[1], n_q=q.shape[2],
                    n_k=k.shape[2], d=q.shape[3], d_v=v.shape[3])
    return Problem(recipe, q, k, v, origin=f"examples.{origin}")


def similarities(sentence: str) -> dict[str, Fraction]:
    """The animal -> similarity pairs the 四不像 sentence states, in its order ("羊、驴...均为1/4" gives both 1/4)."""
    found: dict[str, Fraction] = {}
    for match in _SIMILARITY.finditer(sentence):
        for animal in match["animals"].split("、"):
            found[animal] = Fraction(match["weight"])
    return found


def _projected_tokens(seed: int, tokens: int, features: int, width: int) -> tuple[np.ndarray, ...]:
    """q, k, v (1, 1, tokens, width): X (tokens x features) times three seeded W (features x width)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, features))
    return tuple((x @ rng.standard_normal((features, width)))[None, None] for _ in range(3))


def worked_example_000(seed: int) -> Problem:
    """Seed 000 § 具体过程: X is 5x6 (5 tokens of 6 dims), W_Q, W_K, W_V are 6x4, Q, K, V are 5x4."""
    return _problem(*_projected_tokens(seed, *WORKED_000_SIZES), f"worked_example_000({seed})")


def worked_example_001(seed: int) -> Problem:
    """Seed 001 § 1.1: Q of length 3 against K, V of length 4, every element a length-2 row."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 1, n, 2)) for n in (3, 4, 4))
    return _problem(q, k, v, f"worked_example_001({seed})")


def woaini(seed: int) -> Problem:
    """Seed 003 § 第一个概念 自注意力: "我爱你", three characters of 3 features each; the original vectors are
    both q and k (自己和自己算), and V is another matrix made from the sentence (X W_V, W_V seeded)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 1, 3, 3))
    return _problem(x, x, x @ rng.standard_normal((3, 3)), f"woaini({seed})")


def four_tokens(seed: int) -> Problem:
    """Seed 003 § 1- 生成qkv向量: tokens x1..x4 (6 features) through three linear layers W_q, W_k, W_v (6 x 4)."""
    return _problem(*_projected_tokens(seed, 4, 6, 4), f"four_tokens({seed})")


def siwuxiang(seed: int, d_v: int) -> Problem:
    """One query whose scores against the five animals are log(1/3), log(1/6), log(1/4), log(1/4)
    and a frog score UNDERFLOW_GAP below the rest (weight 0 cannot come from a finite softmax score
    any other way). d = 2 and the default scale 1/sqrt(2): key j = (sqrt(2) * score_j, 0)."""
    scores = [math.log(w) if w else math.log(0.25) - UNDERFLOW_GAP for w in map(float, SIWUXIANG_WEIGHTS)]
    q = np.array([[[[1.0, 0.0]]]])
    k = np.array([[[[math.sqrt(2.0) * score, 0.0] for score in scores]]])
    v = np.random.default_rng(seed).standard_normal((1, 1, len(scores), d_v))
    return _problem(q, k, v, f"siwuxiang({seed}, {d_v})")


def siwuxiang_expected(values: np.ndarray) -> np.ndarray:
    """The seed's answer 1/3 deer + 1/6 cow + 1/4 sheep + 1/4 donkey + 0 frog, in float64."""
    weights = np.array([float(w) for w in SIWUXIANG_WEIGHTS])
    return weights @ values[0, 0]


def gaussian_queries(samples: int, n_k: int, d: int, seed: int) -> Problem:
    """`samples` independent batch entries of Gaussian q (n_k rows, so n_q = n_k) and Gaussian k.

    Statistical properties use query row 0 of each entry: rows of one entry
    share keys, entries do not, so the samples are independent.
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((samples, 1, n_k, d))
    k = rng.standard_normal((samples, 1, n_k, d))
    v = np.zeros((samples, 1, n_k, 1))
    return _problem(q, k, v, f"gaussian_queries({samples}, {n_k}, {d}, {seed})")


def projection_weights(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """W_Q, W_K, W_V, W_O for a problem read as multi-head attention over x_q = merge(q), x_kv = merge(k).

    Shapes: W_Q (h d, h d), W_K (h_kv d, h_kv d), W_V (h_kv d, h_kv d_v), W_O (h d_v, h d); entries
    N(0, 1/fan_in), seeded by the problem's recipe.
    """
    heads, heads_kv, d, d_v = problem.q.shape[1], problem.k.shape[1], problem.q.shape[3], problem.v.shape[3]
    rng = np.random.default_rng(problem.recipe.seed + 1)
    shapes = [(heads * d, heads * d), (heads_kv * d, heads_kv * d), (heads_kv * d, heads_kv * d_v),
              (heads * d_v, heads * d)]
    return tuple(rng.standard_normal(shape) / math.sqrt(shape[0]) for shape in shapes)


def project(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v = heads of merge(q) W_Q, merge(k) W_K, merge(k) W_V (projection_weights)."""
    w_q, w_k, w_v, _ = projection_weights(problem)
    x_q, x_kv = merge_heads(problem.q), merge_heads(problem.k)
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    return split_heads(x_q @ w_q, heads), split_heads(x_kv @ w_k, heads_kv), split_heads(x_kv @ w_v, heads_kv)


def coupled_scores(rows: int, n_k: int, d: int, seed: int, n_q: int = 1) -> Problem:
    """`rows` batch entries of one query (repeated n_q times) against n_k keys, whose scaled scores
    q.k_j / sqrt(d) are the same N(0, 1) numbers z (drawn from `seed` alone) for every d.

    q = sqrt(d) u with u uniform on the unit sphere (unit-variance coordinates, |q|^2 = d exactly) and
    k_j = z_j u + (I - u u^T) g_j with g_j ~ N(0, I_d): given u, k_j ~ N(0, I_d), independent of q. So at
    each d the pair (q, k) is the textbook model, and across d the scaled scores are common random numbers
    (seed 000 § 具体过程, seed 003 § 第一个概念: what changes with d_k is only the unscaled q.k = sqrt(d) z).
    """
    z = np.random.default_rng(seed).standard_normal((rows, 1, 1, n_k))
    rng = np.random.default_rng([seed, d])
    u = rng.standard_normal((rows, 1, 1, d))
    u /= np.linalg.norm(u, axis=-1, keepdims=True)
    g = rng.standard_normal((rows, 1, n_k, d))
    k = z.swapaxes(-1, -2) * u + g - (g @ u.swapaxes(-1, -2)) * u
    q = np.repeat(math.sqrt(d) * u, n_q, axis=2)
    v = np.zeros((rows, 1, n_k, 1))
    return _problem(q, k, v, f"coupled_scores({rows}, {n_k}, {d}, {seed}, {n_q})")
