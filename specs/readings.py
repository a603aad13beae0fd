"""The readings of attention the seeds offer, and which claims check each one (the report's sections).

Seed 001 § 1.3 reads attention as an expectation; seed 002 § 3.1 gives geometric, information-theoretic,
differential-geometric and Bayesian readings; seeds 000 and 003 explain the sqrt(d_k) scale and positions.
Each reading's claims are in specs/claims.toml; here they are grouped so the report can show, per reading,
its verdicts on every implementation, its evidence and its pictures.
"""

from __future__ import annotations

from dataclasses import dataclass

SEED_TITLES = {
    "000_7a81042443dec018.txt": "Seed 000: 注意力机制简述 (attention in brief)",
    "001_16e7e18349ffb2ee.txt": "Seed 001: SelfAttention在Ascend上的实现 (self-attention on Ascend)",
    "002_5750249af0d98bb4.txt": "Seed 002: 第三章 注意力机制进阶原理 (advanced principles)",
    "003_fea9ff623fe5f642.txt": "Seed 003: Attention is all you need (3)",
    "convention": "The protocol's own rules (docs/design.md)",
    "beyond the seeds": "Beyond the seeds: the score modifications kernels ship (FlashAttention, SDPA, FlexAttention, "
                        "gpt-oss)",
}


@dataclass(frozen=True)
class Reading:
    key: str  # the report's anchor
    title: str
    summary: str  # one paragraph: what the reading says, in its correct form
    claims: tuple[str, ...]


READINGS = (
    Reading("probabilistic", "Probabilistic: attention as an expectation",
            "Each weight row is a probability distribution over the keys and the output is the expected value "
            "under it; temperature moves it from the mean of the values (scale -> 0) to the argmax (scale -> "
            "infinity).",
            ("attention-is-expectation", "attention-optimal-linear-approximation", "complete-graph-positive-weights",
             "weights-in-unit-interval", "rows-sum-to-one", "softmax-temperature", "scale-to-infinity-is-argmax",
             "scale-to-zero-is-mean", "entropy-falls-with-scale", "siwuxiang-zero-needs-mask-or-underflow")),
    Reading("geometric", "Geometric: similarity, distance and the convex hull",
            "The dot product is a similarity (a cosine on unit vectors); the output lies in the convex hull of "
            "the visible values, and the weights are unchanged by whatever leaves every q.k_j - q.k_l unchanged.",
            ("unit-dot-product-is-cosine", "self-attention-scores-symmetric", "dot-product-as-distance",
             "dot-product-as-distance-literal", "output-in-convex-hull", "geometric-cosine-temperature",
             "geometric-projection-literal", "geometric-cosine-every-implementation", "key-translation-invariance",
             "value-affine-equivariance")),
    Reading("information", "Information-theoretic",
            "A softmax row is the distribution that maximises expected score plus entropy; the seed's KL code "
            "and its mutual-information sentence are checked as written.",
            ("information-code-finite", "information-weights-from-query", "negative-kl-is-mutual-information",
             "softmax-maximises-entropy-regularised-score", "weights-maximise-mutual-information",
             "information-output-has-key-rows")),
    Reading("differential", "Differential-geometric",
            "What survives of 'local coordinate systems' is invariance under one orthogonal change of basis "
            "applied to q and k; the seed's SVD code cancels its key.",
            ("differential-uses-key", "differential-tangent-projection", "differential-code-shapes",
             "orthogonal-basis-change-invariance", "dual-basis-change-invariance")),
    Reading("bayesian", "Bayesian: a posterior over key positions",
            "With a uniform prior over positions and likelihood exp(scale q.k_j), the posterior mean of the "
            "values is the output; a prior pi is an additive log(pi) bias.",
            ("bayesian-posterior", "bayesian-code-finite", "bayesian-code-cross-attention",
             "bayesian-uniform-prior-posterior-mean", "bayesian-prior-as-log-bias")),
    Reading("scaling", "Scaling: why divide by sqrt(d_k)",
            "Unscaled scores grow like sqrt(d_k), softmax saturates, its Jacobian vanishes; the scale keeps the "
            "entropy and the gradient of the weights roughly constant in d_k.",
            ("sqrt-dk-variance", "scale-keeps-softmax-flat", "unscaled-softmax-saturates", "explicit-softmax-scale")),
    Reading("position", "Position: what breaks permutation symmetry",
            "Without positions attention is permutation-equivariant; RoPE applied to q and k after the "
            "projections makes scores depend only on m - n, while sinusoidal encodings and causal masks break "
            "the symmetry.",
            ("permutation-equivariance", "permutation-invariance-literal", "positional-encoding-breaks-symmetry",
             "rope-relative-positions", "rope-relative-in-attention", "rope-before-projections",
             "causal-mask-breaks-equivariance")),
)
