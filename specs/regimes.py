"""The regimes real kernels switch code paths on, as deterministic problems.

docs/design.md § Numerical judgement: long sequences (thousands of keys), head dims
to 256, strided inputs, batch and heads > 1 together. Hypothesis draws stay
small (specs.strategies); these fixed cases sit next to them so that a path
taken only past 512 keys or at head dim 128 is exercised on every run. A regime
marked `long` (n >= 1025 or d = 256) costs seconds per implementation and runs
in its own environment for the built-ins (`tox -e long`) and by default with
`--impl`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specs.problems import Problem, build

LONG_N = 1025  # from here on a regime is `long`
LONG_D = 256


@dataclass(frozen=True)
class Regime:
    """A named problem recipe; `needs` lists the capabilities it asks of an implementation."""

    name: str
    recipe: dict = field(hash=False)
    needs: tuple[str, ...] = ()

    @property
    def long(self) -> bool:
        r = self.recipe
        return max(r.get("n_q", 1), r.get("n_k", 1)) >= LONG_N or max(r.get("d", 1), r.get("d_v", 1)) >= LONG_D

    def problem(self, **changes) -> Problem:
        return build(**{**self.recipe, **changes})

    def __str__(self) -> str:
        return self.name


def _needs(recipe: dict) -> tuple[str, ...]:
    needs = []
    if recipe.get("n_q", 1) != recipe.get("n_k", 1):
        needs.append("cross")
    if recipe.get("d_v", 1) != recipe.get("d", 1):
        needs.append("value_dim")
    if recipe.get("heads_kv", 1) != recipe.get("heads", 1):
        needs.append("gqa")
    if recipe.get("scale") is not None:
        needs.append("scale")
    if recipe.get("causal"):
        needs.append("causal")
    needs += [keyword for field_name, keyword in _MOD_FIELDS.items() if recipe.get(field_name)]
    return tuple(needs)


# specs.problems.Recipe's field of each score modification -> the keyword an implementation must take for it
_MOD_FIELDS = {"window": "window_size", "softcap": "softcap", "alibi": "alibi_slopes", "bias": "bias",
               "sinks": "sinks"}


def regime(name: str, **recipe) -> Regime:
    return Regime(name, recipe, _needs(recipe))


# Sequence lengths one past a power of two: the last tile of every power-of-two block size holds one row.
SEQUENCE_LENGTHS = tuple(regime(f"n={n}", n_q=n, n_k=n, d=64, d_v=64, seed=n) for n in (257, 513, 1025, 2049))
# one query (decoding, where kernels take their own path); the short one runs in every main job, not only with long
DECODE = (
    regime("decode 1x257", n_q=1, n_k=257, d=64, d_v=64, seed=257),
    regime("decode 1x4097", n_q=1, n_k=4097, d=128, d_v=128, seed=4097),
    regime("prefill 300x1100", n_q=300, n_k=1100, d=64, d_v=64, seed=1100),
)
HEAD_DIMS = tuple(regime(f"d={d}", n_q=77, n_k=129, d=d, d_v=d, seed=d) for d in (96, 128, 192, 256)) + (
    regime("d=96 d_v=128", n_q=65, n_k=65, d=96, d_v=128, seed=1),
    regime("d=192 d_v=64", n_q=65, n_k=65, d=192, d_v=64, seed=2),
    regime("d=256 d_v=96", n_q=65, n_k=65, d=256, d_v=96, seed=3),
)
HEAD_LAYOUTS = (
    regime("batch=3 heads=4", batch=3, heads=4, heads_kv=4, n_q=65, n_k=65, d=32, d_v=32, seed=7),
    regime("GQA 16/2 (group 8)", batch=2, heads=16, heads_kv=2, n_q=33, n_k=97, d=64, d_v=64, seed=8),
    regime("MQA 8/1", batch=2, heads=8, heads_kv=1, n_q=40, n_k=40, d=64, d_v=64, seed=9),
    # 16 kv heads of 257 x 64: offsets past 2^15 elements, where a narrow index type wraps
    regime("batch=2 heads=8 n=257", batch=2, heads=8, heads_kv=8, n_q=257, n_k=257, d=64, d_v=64, seed=10),
)
# Every regime above, with score styles that stress the softmax at length.
SIZES = SEQUENCE_LENGTHS + DECODE + HEAD_DIMS + HEAD_LAYOUTS
LARGE_SCORES_AT_LENGTH = tuple(regime(f"n={n} large scores", n_q=n, n_k=n, d=32, d_v=32, seed=n,
                                      score_style="large", value_style="offset") for n in (513, 2049))
CAUSAL = tuple(regime(f"causal n={n}", n_q=n, n_k=n, d=64, d_v=64, seed=n, causal=True) for n in (257, 1025)) + (
    regime("causal 200x1100", n_q=200, n_k=1100, d=64, d_v=64, seed=5, causal=True),
    regime("causal 1100x200", n_q=1100, n_k=200, d=64, d_v=64, seed=6, causal=True),
)
MASKED = tuple(regime(f"{layout} mask n={n}", n_q=n, n_k=n, d=64, d_v=64, seed=n, mask_layout=layout,
                      mask_density=0.3) for layout in ("full", "key_padding") for n in (513, 1025))

# Gradients (properties/test_gradients.py), where backward kernels switch paths: dK and dV accumulated over a
# second key block (513 = 512 + 1 = 2 x 256 + 1 = 8 x 64 + 1), dK and dV summed over GQA groups of 4 and 8,
# head dims 64 and 128, an explicit scale, a causal cut inside a key block with n_q != n_k, so that the two
# alignments differ (top-left hides the keys past n_q from every row; bottom-right leaves the first n_q - n_k
# rows with no key), and dropout (the test adds it where the implementation takes dropout_seed).
GRADIENTS = (
    regime("grad n=513", n_q=513, n_k=513, d=64, d_v=64, seed=513),
    regime("grad GQA 4/1 (group 4) d=128", batch=2, heads=4, heads_kv=1, n_q=40, n_k=97, d=128, d_v=128, seed=41),
    regime("grad GQA 8/1 (group 8) scale=0.3", heads=8, heads_kv=1, n_q=33, n_k=65, d=64, d_v=64, seed=81,
           scale=0.3),
    regime("grad n=1025 d=128", n_q=1025, n_k=1025, d=128, d_v=128, seed=1025),
    regime("grad GQA 8/1 (group 8) n=1025", heads=8, heads_kv=1, n_q=1025, n_k=1025, d=64, d_v=64, seed=1026),
)
GRADIENT_CAUSAL = (
    regime("grad causal 129x513", n_q=129, n_k=513, d=64, d_v=64, seed=129, causal=True),
    regime("grad causal 513x129 scale=2", n_q=513, n_k=129, d=64, d_v=64, seed=130, causal=True, scale=2.0),
    regime("grad causal n=1025 GQA 4/1", heads=4, heads_kv=1, n_q=1025, n_k=1025, d=64, d_v=64, seed=1027,
           causal=True),
)
# rows the test hides from every key (fully-masked-rows-zero-gradients) on top of a mask, in a second row block
GRADIENT_MASKED = (
    regime("grad key padding 257x513", batch=2, n_q=257, n_k=513, d=64, d_v=64, seed=257,
           mask_layout="key_padding", mask_density=0.3),
    regime("grad mask n=1025 GQA 4/2", heads=4, heads_kv=2, n_q=1025, n_k=1025, d=64, d_v=64, seed=1028,
           mask_layout="full", mask_density=0.3),
)
GRADIENT_DROPOUT = (
    regime("grad dropout 257x513 GQA 4/1", heads=4, heads_kv=1, n_q=257, n_k=513, d=64, d_v=64, seed=258),
    regime("grad dropout n=1025", n_q=1025, n_k=1025, d=128, d_v=128, seed=1029),
)

# Beyond the seeds (properties/test_score_mods.py): each score modification at length, where a tiled kernel cuts
# its window, cap, slopes and bias across many tiles, and with n_q != n_k both ways, where the alignment offset
# moves the band and ALiBi's diagonal (in the record's own alignment); one window reaches past n_k with n_q > n_k
# (flash-attention #895). A cap of 2 bends the normal style's scaled scores (largest about 4.5 at d = 64).
SCORE_MODS_AT_LENGTH = (
    regime("window 128/16 n=257", n_q=257, n_k=257, d=64, d_v=64, seed=2571, window=(128, 16)),
    regime("window 100/-1 causal n=513", n_q=513, n_k=513, d=64, d_v=64, seed=5131, window=(100, -1),
           causal=True),
    regime("softcap 2 n=513", n_q=513, n_k=513, d=64, d_v=64, seed=5132, softcap=2.0),
    regime("alibi n=257", n_q=257, n_k=257, d=64, d_v=64, seed=2572, alibi="batch_heads", batch=2),
    regime("bias n=513", n_q=513, n_k=513, d=64, d_v=64, seed=5133, bias="full", bias_hidden=0.3),
    regime("sinks n=257", n_q=257, n_k=257, d=64, d_v=64, seed=2573, sinks=True),
    regime("dominant sinks n=1025", n_q=1025, n_k=1025, d=64, d_v=64, seed=10253, sinks="dominant"),
    regime("window 64/16 300x700", n_q=300, n_k=700, d=64, d_v=64, seed=3001, window=(64, 16)),
    regime("window 64/0 causal 700x300", n_q=700, n_k=300, d=64, d_v=64, seed=3002, window=(64, 0), causal=True),
    regime("window 8/400 700x300", n_q=700, n_k=300, d=64, d_v=64, seed=3003, window=(8, 400)),
    regime("alibi 300x700", n_q=300, n_k=700, d=64, d_v=64, seed=3004, alibi="heads"),
    regime("window 512/64 n=2049", n_q=2049, n_k=2049, d=64, d_v=64, seed=20491, window=(512, 64)),
    regime("softcap 2 + bias + sinks n=2049", n_q=2049, n_k=2049, d=64, d_v=64, seed=20492, softcap=2.0,
           bias="keys", sinks=True),
)

