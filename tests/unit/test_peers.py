"""The peers (issue 23): records of impls/peers that a run checks only when `--backend peers` names them, that load
where their peer is not installed, whose adapters map the protocol to the peer's semantics (shown here where the
peer is installed: flex_attention comes with torch), whose findings are standalone scripts named by their rows, and
whose page is written from a run's report."""

from __future__ import annotations

import ast
import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from harness.pytest_plugin.stale_rows import record_names
from impls.records import BUILTIN_TARGETS
from protocol.expectations import load_table
from protocol.registry import DEFAULT_BACKENDS, load_impl, load_targets
from specs.deviations import Call, deviation_from_fields
from specs.reference import attention
from specs.tolerance import gradient_allowance
from specs.varlen import pack_sequences, varlen_attention
from tools import peers_page

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "docs" / "findings"
PEER_TARGETS = tuple(t for t in BUILTIN_TARGETS if t.startswith("impls.peers."))
# what a finding's script may import: the standard library, NumPy and the peers themselves
PEER_PACKAGES = {"numpy", "torch", "jax", "flax", "keras", "transformers", "flash_attn", "xformers", "liger_kernel",
                 "ring_flash_attn", "yunchang"}


def test_a_run_without_backend_leaves_the_peers_out():
    ready, missing = load_targets(BUILTIN_TARGETS)
    assert "peers" not in DEFAULT_BACKENDS and ready
    assert not [impl.name for impl in ready if impl.backend == "peers"]
    assert not [item.target for item in missing if item.target in PEER_TARGETS]


def test_backend_peers_selects_the_peers_and_says_which_are_not_installed():
    ready, missing = load_targets(BUILTIN_TARGETS, ("peers",))
    assert len(PEER_TARGETS) >= 6
    assert sorted([impl.target for impl in ready] + [item.target for item in missing]) == sorted(PEER_TARGETS)
    assert {impl.backend for impl in ready} <= {"peers"}
    assert all(re.search(r"is not installed \(tox -e (triton-|distributed-)?peers installs it\)", item.reason)
               for item in missing)


def test_every_peer_record_loads_without_its_peer_so_the_table_is_checked_everywhere():
    names = record_names(PEER_TARGETS)
    assert names is not None and len(names) == len(PEER_TARGETS)


# -- the adapters: flex_attention is torch's, so this one runs wherever torch does -----------------------------------
def _problem(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((2, 4, 5, 8)), rng.standard_normal((2, 2, 9, 8)), rng.standard_normal((2, 2, 9, 6))
    mods = dict(mask=rng.random((2, 1, 5, 9)) > 0.25, bias=rng.standard_normal((2, 4, 5, 9)), softcap=2.0,
                window_size=(3, 1), alibi_slopes=rng.random(4), scale=0.4)
    return q, k, v, mods


def _flex(q, k, v, *, every_modification: bool, **keywords):
    """The flex adapter on eager flex in float64: the compiled record's form (every modification passed, neutral
    where absent) or the eager record's (only those asked for)."""
    from torch.nn.attention.flex_attention import flex_attention

    from impls.peers.flex import flex_call

    keywords = {**dict(scale=None, causal=False, mask=None, bias=None, window_size=None, softcap=0.0,
                       alibi_slopes=None), **keywords}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # flex's advice to compile
        return flex_call(flex_attention, q, k, v, return_lse=True, every_modification=every_modification,
                         **keywords)


@pytest.mark.parametrize("every_modification", [False, True], ids=["as-asked", "every-modification"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_flex_adapter_maps_every_keyword_as_the_oracle_reads_it(causal, every_modification):
    pytest.importorskip("torch")
    q, k, v, mods = _problem()
    out, lse = _flex(q, k, v, causal=causal, every_modification=every_modification, **mods)
    expected = attention(q, k, v, causal=causal, causal_alignment="top_left", **mods)
    np.testing.assert_allclose(out, expected.out, atol=1e-12)
    np.testing.assert_allclose(lse, expected.lse, atol=1e-12)
    if causal:  # n_q != n_k: the other alignment is another answer, so the comparison above tells them apart
        other = attention(q, k, v, causal=True, causal_alignment="bottom_right", **mods)
        assert np.abs(other.out - out).max() > 1e-3


@pytest.mark.parametrize("asked", [dict(), dict(causal=True), dict(window_size=(2, -1)), dict(softcap=1.5),
                                   dict(alibi_slopes=np.array([0.5, 0.25, 0.0, 1.0]))], ids=str)
def test_the_compiled_records_neutral_modifications_change_nothing(asked):
    """The compiled record passes every modification on every call: those the call lacks are neutral, so its
    answer is the one each modification alone gives, to float64 rounding (eager flex, no compiling here)."""
    pytest.importorskip("torch")
    q, k, v, _ = _problem(seed=1)
    expected = attention(q, k, v, causal_alignment="top_left", **asked)
    for every_modification in (False, True):
        out, lse = _flex(q, k, v, every_modification=every_modification, **asked)
        np.testing.assert_allclose(out, expected.out, atol=1e-12)
        np.testing.assert_allclose(lse, expected.lse, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window_size", [(2, 1), (1, -1), (-1, 0)])
def test_the_gemma2_adapter_maps_the_window_bottom_right(window_size, causal):
    """Gemma2's window through masking_utils, aligned as its causal mask (the queries last); to 1e-6, not float64
    rounding: transformers' eager softmax runs in float32 (docs/findings/hf_eager_float32_softmax_under_float64.py).
    Every row sees a key here: a row that sees none is a finding of its own."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from impls.peers.hf_attention import gemma2_eager

    q, k, v, _ = _problem(seed=2)
    out = gemma2_eager(*(torch.from_numpy(x) for x in (q, k, v)), causal=causal, window_size=window_size,
                       softcap=3.0).numpy()
    expected = attention(q, k, v, causal=causal, causal_alignment="bottom_right", window_size=window_size,
                         softcap=3.0)
    np.testing.assert_allclose(out, expected.out, atol=1e-6)
    other = attention(q, k, v, causal=causal, causal_alignment="top_left", window_size=window_size, softcap=3.0)
    assert np.abs(other.out - out).max() > 1e-3  # the test tells the two alignments apart


HF_RECORDS = ("llama_eager", "gemma2_eager", "gpt_oss_eager", "hf_sdpa")
# (heads, heads_kv, n_q, n_k): grouped heads, a decode step (sdpa packs the groups of a single query), n_q > n_k
HF_SHAPES = ((4, 2, 5, 9), (4, 2, 1, 9), (2, 1, 7, 4))


def _hf(name: str, q, k, v, **keywords) -> np.ndarray:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from impls.peers import hf_attention

    tensors = {key: torch.from_numpy(x) if isinstance(x, np.ndarray) else x for key, x in keywords.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(hf_attention, name)(*(torch.from_numpy(x) for x in (q, k, v)), **tensors).numpy()


def _seen_problem(shape: tuple[int, int, int, int], seed: int, causal: bool):
    """q, k, v, a mask and a bias of the shape, where every row sees a key under the mask, the bias' -inf
    entries and causal (bottom-right); a row that sees none is a finding of its own."""
    heads, heads_kv, n_q, n_k = shape
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) for s in ((2, heads, n_q, 8), (2, heads_kv, n_k, 8), (2, heads_kv, n_k, 8)))
    mask = rng.random((2, 1, n_q, n_k)) > 0.3
    bias = rng.integers(-32, 33, (2, heads, n_q, n_k)) / 8.0
    bias[..., ::2, 0] = -np.inf
    rows, diagonal = _reached_rows(n_q, n_k, causal)
    mask[..., rows, diagonal] = True  # the bottom-right diagonal: within causal's reach, never the bias' -inf
    bias[..., rows, diagonal] = np.where(diagonal == 0, 1.0, bias[..., rows, diagonal])
    return (q, k, v), mask, bias


def _reached_rows(n_q: int, n_k: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """The rows that may see a key (under causal, bottom-right, those at or past n_q - n_k) and, for each, the key on
    its diagonal (clipped to the keys)."""
    diagonal = np.clip(np.arange(n_q) + n_k - n_q, 0 if not causal else -1, n_k - 1)
    rows = np.flatnonzero(diagonal >= 0)
    return rows, diagonal[rows]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", HF_SHAPES, ids=str)
@pytest.mark.parametrize("layout", ["full", "heads", "keys"])
@pytest.mark.parametrize("name", HF_RECORDS)
def test_the_hf_adapters_map_the_bias_and_mask_as_the_oracle_reads_them(name, layout, shape, causal):
    """Each transformers function takes the protocol's bias (batch, heads, n_q, n_k), (heads, n_q, n_k) or
    (batch, 1, 1, n_k), with -inf entries, beside a mask and causal: the eager functions in their additive mask, the
    sdpa integration as its position_bias. To 1e-6: the eager softmax runs in float32
    (docs/findings/hf_eager_float32_softmax_under_float64.py)."""
    (q, k, v), mask, bias = _seen_problem(shape, seed=len(layout) + shape[2], causal=causal)
    bias = {"full": bias, "heads": bias[0], "keys": np.where(np.isinf(bias[:, :1, :1]), 0.0, bias[:, :1, :1])}[layout]
    expected = attention(q, k, v, causal=causal, causal_alignment="bottom_right", mask=mask, bias=bias)
    rows, _ = _reached_rows(shape[2], shape[3], causal)  # under causal with n_q > n_k, the first rows see no key
    got = _hf(name, q, k, v, causal=causal, mask=mask, bias=bias)
    np.testing.assert_allclose(got[:, :, rows], expected.out[:, :, rows], atol=1e-6)
    if layout != "keys":  # the bias moves the answer, so the comparison above sees it
        unbiased = attention(q, k, v, causal=causal, causal_alignment="bottom_right", mask=mask)
        assert np.abs(unbiased.out[:, :, rows] - got[:, :, rows]).max() > 1e-3


@pytest.mark.parametrize("shape", HF_SHAPES, ids=str)
@pytest.mark.parametrize("softcap", [0.7, 3.0, -1.0])
def test_the_gemma2_adapter_maps_the_softcap(softcap, shape):
    """gemma2's softcap (None: no cap) from the protocol's (0 or negative: none), before the bias."""
    (q, k, v), mask, bias = _seen_problem(shape, seed=9, causal=False)
    expected = attention(q, k, v, mask=mask, bias=bias, softcap=softcap)
    np.testing.assert_allclose(_hf("gemma2_eager", q, k, v, mask=mask, bias=bias, softcap=softcap), expected.out,
                               atol=1e-6)
    if softcap > 0:
        assert np.abs(attention(q, k, v, mask=mask, bias=bias).out - expected.out).max() > 1e-3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", HF_SHAPES[:2], ids=str)
@pytest.mark.parametrize("sinks", [[0.5, -2.0, 1.25, 0.0], [-np.inf, 0.5, -np.inf, 3.0], [12.0, 13.0, 14.0, 12.5]],
                         ids=["finite", "minus-inf", "dominant"])
def test_the_gpt_oss_adapter_maps_the_sinks(sinks, shape, causal):
    """gpt-oss' sinks (the module's parameter, one per head; -inf is no sink, and no sinks at all is -inf each),
    each row's softmax denominator taking them: finite, -inf, and past log n_k so that they take most of the
    weight. A sink of +inf is a finding of its own (transformers' max-shift makes it NaN)."""
    (q, k, v), mask, bias = _seen_problem(shape, seed=11, causal=causal)
    sinks = np.asarray(sinks)
    expected = attention(q, k, v, causal=causal, causal_alignment="bottom_right", mask=mask, bias=bias, sinks=sinks)
    got = _hf("gpt_oss_eager", q, k, v, causal=causal, mask=mask, bias=bias, sinks=sinks)
    np.testing.assert_allclose(got, expected.out, atol=1e-6)
    none = attention(q, k, v, causal=causal, causal_alignment="bottom_right", mask=mask, bias=bias)
    np.testing.assert_allclose(_hf("gpt_oss_eager", q, k, v, causal=causal, mask=mask, bias=bias), none.out,
                               atol=1e-6)
    assert np.abs(none.out - got).max() > 1e-3  # the sinks move the answer


@pytest.mark.parametrize("keywords", [dict(), dict(causal=True), dict(window_size=(1, 2), softcap=2.0, scale=0.3)],
                         ids=str)
def test_the_flex_varlen_adapter_is_a_document_mask(keywords):
    """flex's varlen face: the pack as one sequence under a mask_mod of equal document ids, positions counted within
    each document, to float64 rounding. The rows and keys no sequence uses hold finite garbage here (pack_sequences'
    NaN reaches every row through flex's eager path: docs/findings/flex_attention_hidden_nan_reaches_output.py);
    a sequence with no key gives 0 and -inf."""
    pytest.importorskip("torch")
    from impls.peers.flex import flex_eager

    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, 2, 6, 8)), rng.standard_normal((3, 1, 7, 8)), rng.standard_normal((3, 1, 7, 8))
    packed = pack_sequences(q, k, v, [3, 6, 1], [4, 7, 0], unused_k=2, tail=3)
    garbage = [np.nan_to_num(x, nan=1e3) for x in (packed.q, packed.k, packed.v)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out, lse = flex_eager.attention_varlen(*garbage, *packed.arrays[3:], **packed.keywords, return_lse=True,
                                               **keywords)
    expected_out, expected_lse = varlen_attention(packed.q, packed.k, packed.v, packed.packing(),
                                                  causal_alignment="top_left", **keywords)
    np.testing.assert_allclose(out, expected_out, atol=1e-12)
    np.testing.assert_allclose(lse, expected_lse, atol=1e-12)


NUMPY_PEERS = {  # target: the keywords it takes beyond causal, mask and bias
    "impls.peers.jax_nn:jax_dot_product_attention": dict(scale=0.4, window_size=(2, 1)),
    "impls.peers.jax_nn:flax_linen_attention": dict(),
    "impls.peers.keras_numpy:keras_numpy_attention": dict(scale=0.4),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("target", NUMPY_PEERS, ids=lambda target: target.split(":")[1])
def test_the_numpy_peers_adapters_map_every_keyword_they_take(target, causal):
    """jax.nn, flax linen and Keras' NumPy backend through their adapters (layout, mask polarity, causal top-left,
    window as local_window_size) on a problem where each agrees with the oracle: heads_kv = heads and d_v = d (what
    all three take), every row sees a key. To 1e-6: jax.nn and Keras compute float64 in float32
    (docs/findings/*_float32_softmax_under_float64.py)."""
    impl = load_impl(target)
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((2, 2, 5, 8)), rng.standard_normal((2, 2, 9, 8)), rng.standard_normal((2, 2, 9, 8))
    mask = rng.random((2, 1, 5, 9)) > 0.3
    mask[..., np.arange(5), np.arange(5)] = True  # row i sees key i: within its window and its causal reach
    keywords = dict(mask=mask, bias=rng.standard_normal((1, 2, 5, 9)), **NUMPY_PEERS[target])
    out = impl.fn(q, k, v, causal=causal, **keywords)
    expected = attention(q, k, v, causal=causal, causal_alignment="top_left", **keywords)
    np.testing.assert_allclose(np.asarray(out, dtype=np.float64), expected.out, atol=1e-6)


@pytest.mark.parametrize("window_size", [(-1, -1), (-1, 0), (-1, 1), (7, -1), (8, -1)], ids=str)
def test_the_jax_window_adapter_leaves_an_unbounded_side_unbounded_at_every_distance(window_size):
    """n_q = 10 queries on n_k = 3 keys (top-left, as jax aligns): query 9 is 9 keys past the last one, further than
    n_k; an unbounded side must reach it, dense and varlen (a side mapped to n_k cut rows 4-9 short). A bounded
    left side of 7 or 8 leaves every row a key (a row with none is the fully-masked-row finding)."""
    impl = load_impl("impls.peers.jax_nn:jax_dot_product_attention")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((2, 2, 10, 8)), rng.standard_normal((2, 2, 3, 8)), rng.standard_normal((2, 2, 3, 8))
    expected = attention(q, k, v, causal_alignment="top_left", window_size=window_size)
    assert np.isfinite(expected.out).all() and not np.all(expected.out == 0, axis=-1).any()
    np.testing.assert_allclose(np.asarray(impl.fn(q, k, v, window_size=window_size), np.float64), expected.out,
                               atol=1e-6)
    packed = pack_sequences(q, k, v, [10, 9], [3, 3], tail=2)
    out = impl.face("varlen")(*packed.arrays, **packed.keywords, window_size=window_size)
    expected_out, _ = varlen_attention(packed.q, packed.k, packed.v, packed.packing(), causal_alignment="top_left",
                                       window_size=window_size)
    np.testing.assert_allclose(out, expected_out, atol=1e-6)


@pytest.mark.parametrize("keywords", [dict(), dict(causal=True, scale=0.5), dict(window_size=(1, 2))], ids=str)
def test_the_jax_varlen_adapter_maps_sequence_lengths_as_the_oracle_reads_them(keywords):
    """jax.nn's query_seq_lengths / key_value_seq_lengths behind the varlen face: each packed sequence padded alone,
    rows past cu_seqlens_q[-1] and keys past seqused_k (NaN, from pack_sequences) never read, to 1e-6 (jax.nn's
    float32 softmax); every sequence has a key here (one with none is the fully-masked-row finding)."""
    impl = load_impl("impls.peers.jax_nn:jax_dot_product_attention")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((3, 2, 6, 8)), rng.standard_normal((3, 2, 7, 8)), rng.standard_normal((3, 2, 7, 8))
    packed = pack_sequences(q, k, v, [3, 6, 0], [4, 7, 2], unused_k=2, tail=3)
    out, lse = impl.face("varlen")(*packed.arrays, **packed.keywords, return_lse=True, **keywords)
    expected_out, expected_lse = varlen_attention(packed.q, packed.k, packed.v, packed.packing(),
                                                  causal_alignment="top_left", **keywords)
    np.testing.assert_allclose(out, expected_out, atol=1e-6)
    np.testing.assert_allclose(lse, expected_lse, atol=1e-6)  # -inf where the oracle has it (rows in no sequence)
    d_out = rng.standard_normal(out.shape)
    grads = impl.face("varlen").attention_backward(packed.q, packed.k, packed.v, d_out, **dict(
        zip(("cu_seqlens_q", "cu_seqlens_k"), packed.arrays[3:], strict=True)), **packed.keywords, **keywords)
    assert not any(np.isnan(g).any() for g in grads), "a row no sequence uses reached the gradients"


# -- the findings ---------------------------------------------------------------------------------------------------
def _scripts() -> list[Path]:
    return sorted(FINDINGS.glob("*.py"))


def _peer_rows():
    names = record_names(PEER_TARGETS)
    return [row for row in load_table() if row.subject in names]


def _listed_in(heading: str) -> set[str]:
    """The scripts docs/peers.md lists under `heading`."""
    text = (ROOT / "docs" / "peers.md").read_text(encoding="utf-8")
    section = text.split(f"### {heading}", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"\(findings/(\w+\.py)\)", section))


def _found_outside_the_claims() -> set[str]:
    """The scripts found while mapping a peer, by no claim's property (so by no row), and those a claim reaches
    that no documented deviation predicts yet (so by no row either: their cells are unexpected)."""
    return _listed_in("Found outside the claims") | _listed_in("Reached by a claim, no documented deviation yet")


def test_every_finding_is_a_row_naming_its_script_and_every_script_is_named():
    rows = _peer_rows()
    assert rows and _scripts()
    named = {row: re.findall(r"docs/findings/(\w+\.py)", row.reported) for row in rows}
    missing = [f"{row.subject} {row.claim}" for row, scripts in named.items()
               if not scripts or not all((FINDINGS / script).is_file() for script in scripts)]
    assert missing == [], "a peer row's `reported` names no script of docs/findings, or one that is not there"
    by_rows = {script for scripts in named.values() for script in scripts}
    outside = _found_outside_the_claims()
    assert outside and not outside & by_rows, "a finding outside the claims is no row's"
    assert sorted(by_rows | outside) == [p.name for p in _scripts()]


@pytest.mark.parametrize("script", _scripts(), ids=lambda path: path.stem)
def test_a_finding_script_imports_only_its_peer_and_shows_it_in_under_twenty_lines(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree)
    assert docstring and "Status:" in docstring, "its docstring says whether it is known upstream (Status: ...)"
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    outside = imported - PEER_PACKAGES - set(sys.stdlib_module_names)
    assert not outside, f"imports {sorted(outside)}: a finding imports only its peer, NumPy and the standard library"
    body = tree.body[1:]  # after the docstring
    code_lines = {line for node in body for line in range(node.lineno, node.end_lineno + 1)}
    assert len(code_lines) < 20
    assert isinstance(body[-1], ast.Assert), "it ends asserting what the peer's documentation promises"


# -- the page -------------------------------------------------------------------------------------------------------
def _verdict(impl, claim, status, expected=False, why="", detail=""):
    return dict(claim=claim, impl=impl, status=status, detail=detail, counterexample=None, declared=expected,
                why=why, tests=1, test="t", failed_properties=[], examples_to_failure=None)


def test_the_page_tallies_each_peer_and_lists_each_finding_and_each_unexpected_failure():
    report = {"verdicts": [
        _verdict("peer-a[float64]", "rows-sum-to-one", "pass"),
        _verdict("peer-a[float32]", "rows-sum-to-one", "fail", expected=True, why="softmax in float32",
                 detail="beyond the tolerance"),
        _verdict("peer-a[float64]", "sdpa-formula", "skip", why="lacks"),
        _verdict("peer-b[float64]", "sdpa-formula", "fail", detail="raised ValueError"),
        _verdict("peer-b[float64]", "rows-sum-to-one", "fail", expected=True, detail="the seed is false as written"),
        _verdict("oracle", "sdpa-formula", "pass"),
    ]}
    page = peers_page.render(report, scripts={("peer-a", "rows-sum-to-one"): [(("float32",), ["peer_a_float32.py"])]})
    assert "- script: [peer_a_float32.py](../findings/peer_a_float32.py)" in page
    assert ("This run: 5 cells (claim x peer x dtype): 1 pass, 1 findings, 1 refuting a false seed sentence, 1 not "
            "run, 1 unexpected.") in page
    assert "| peer-a | 0 | 0 | 1 | 1 | 0 |" in page  # a claim is a finding where one dtype's cell is
    assert "| peer-b | 0 | 1 | 0 | 0 | 1 |" in page
    assert "### peer-a: peer_a_float32.py" in page and "### peer-b: unexpected: raised ValueError" in page
    assert "| rows-sum-to-one | **finding** | refutes the seed |" in page
    assert "| sdpa-formula | not run | **FAIL** |" in page
    assert "unexpected: the seed is false" not in page  # a refuted seed sentence is no finding


def test_a_finding_is_listed_under_the_script_of_each_row_declaring_its_claim_in_its_dtype():
    """A claim with two rows of a peer: each cell under the scripts of the rows that declare it in its dtype (in a run
    with no uncaught declaration, the rows that explained it), not under whichever row the table lists last."""
    report = {"verdicts": [_verdict("peer-a[float32]", "sharded-equals-global", "fail", expected=True),
                           _verdict("peer-a[float16]", "sharded-equals-global", "fail", expected=True)]}
    scripts = {("peer-a", "sharded-equals-global"): [(("float32", "float16"), ["aliases.py"]),
                                                     (("float32",), ["merge.py"])]}
    page = peers_page.render(report, scripts=scripts)
    aliases, merge = page.split("### peer-a: aliases.py")[1], page.split("### peer-a: merge.py")[1]
    assert "- variants: peer-a[float16], peer-a[float32]\n" in aliases.split("###")[0]
    assert "- variants: peer-a[float32]\n" in merge.split("###")[0]


def test_the_page_is_written_and_its_exit_says_whether_a_failure_is_unexpected(tmp_path, capsys):
    declared = {"verdicts": [_verdict("peer-a[float32]", "rows-sum-to-one", "fail", expected=True)]}
    (tmp_path / "report.json").write_text(json.dumps(declared))
    assert peers_page.main([str(tmp_path), str(tmp_path / "peers.md")]) == 0
    unexpected = {"verdicts": [*declared["verdicts"], _verdict("peer-b[float16]", "sdpa-formula", "error")]}
    (tmp_path / "report.json").write_text(json.dumps(unexpected))
    (tmp_path / "peers.md").unlink()
    assert peers_page.main([str(tmp_path), str(tmp_path / "peers.md")]) == 1
    assert (tmp_path / "peers.md").is_file() and "peer-b[float16] sdpa-formula" in capsys.readouterr().err


def test_reports_of_separate_runs_make_one_page_and_a_peer_in_two_is_refused(tmp_path, capsys):
    """Peers run in separate runs (a long one alone): their verdicts on one page, their durations added."""
    for name, verdict, duration in (("a", _verdict("peer-a[float32]", "rows-sum-to-one", "pass"), 10.0),
                                    ("b", _verdict("peer-b[float32]", "rows-sum-to-one", "pass"), 5.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({"verdicts": [verdict], "duration_s": duration}))
    assert peers_page.main([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "peers.md")]) == 0
    page = (tmp_path / "peers.md").read_text()
    assert "| peer-a | 1 |" in page and "| peer-b | 1 |" in page and "15 s on this machine" in page
    assert peers_page.main([str(tmp_path / "a"), str(tmp_path / "a"), str(tmp_path / "twice.md")]) == 2
    assert "peer-a[float32] is in two of the reports" in capsys.readouterr().err


def test_the_page_refuses_a_report_without_peers(tmp_path, capsys):
    (tmp_path / "report.json").write_text('{"verdicts": []}')
    assert peers_page.main([str(tmp_path), str(tmp_path / "peers.md")]) == 2
    assert "holds no peer's verdict" in capsys.readouterr().err


def test_the_page_of_one_split_group_says_to_merge_the_groups_first(tmp_path, capsys):
    """A group of a split peers run writes outcomes.json and no report: the page names the merge."""
    (tmp_path / "outcomes.json").write_text("{}")
    assert peers_page.main([str(tmp_path), str(tmp_path / "peers.md")]) == 2
    assert "one group of a split run: merge the groups first (attention-spec merge" in capsys.readouterr().err



# -- the Triton peers (tox -e triton-peers installs them): flash-attn's Triton backend and xformers' split-k --------
def _triton_peer(module: str, target: str):
    pytest.importorskip("torch")
    pytest.importorskip(module)
    impl = load_impl(target)
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    return impl


def _torch(arrays, dtype: str):
    import torch

    return [torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, dtype)) for x in arrays]


def _numpy(x) -> np.ndarray:
    return x.detach().double().numpy()


@pytest.mark.parametrize("causal", [False, True])
def test_the_flash_attn_triton_adapter_maps_every_face_as_the_oracle_reads_it(causal):
    """float32 under the interpreter (its dots are exact products summed in float32: 1e-6 here): dense in (b, n, h,
    d) transposed, GQA and n_q < n_k with the bottom-right alignment told apart, the LSE; varlen with int32
    cu_seqlens; the kv cache, its LSE's rows put back as (batch, heads, n_q). Fails on an adapter that forgets the
    transpose, the alignment or the LSE's reshape (each a wrong value here)."""
    impl = _triton_peer("flash_attn", "impls.peers.flash_attn_triton:flash_attn_triton")
    q, k, v, _ = _problem(seed=3)
    v = np.concatenate([v, v[..., :2]], axis=-1)  # flash-attn takes d_v = d
    out, lse = impl.fn(*_torch((q, k, v), "float32"), causal=causal, scale=0.4, return_lse=True)
    expected = attention(q, k, v, causal=causal, causal_alignment="bottom_right", scale=0.4)
    np.testing.assert_allclose(_numpy(out), expected.out, atol=2e-6)
    np.testing.assert_allclose(_numpy(lse), expected.lse, atol=2e-6)
    if causal:
        other = attention(q, k, v, causal=True, causal_alignment="top_left", scale=0.4)
        assert np.abs(other.out - expected.out).max() > 1e-3
    packed = pack_sequences(q, k, v, [5, 3], [9, 6], tail=2)
    cu_q, cu_k = _torch(packed.arrays[3:], "int32")
    out = impl.face("varlen")(*_torch(packed.arrays[:3], "float32"), cu_q, cu_k, **packed.keywords, causal=causal)
    want, _ = varlen_attention(packed.q, packed.k, packed.v, packed.packing(), causal=causal)
    np.testing.assert_allclose(_numpy(out), want, atol=2e-6)
    cache_k, cache_v = (np.concatenate([x.swapaxes(1, 2), np.zeros((2, 3, 2, 8))], axis=1) for x in (k, v))
    out, lse = impl.face("kvcache")(*_torch((q.swapaxes(1, 2), cache_k, cache_v), "float32"),
                                    cache_seqlens=_torch([np.array([9, 9])], "int32")[0], causal=causal,
                                    return_lse=True)
    plain = attention(q, k, v, causal=causal, causal_alignment="bottom_right")
    np.testing.assert_allclose(_numpy(out).swapaxes(1, 2), plain.out, atol=2e-6)
    np.testing.assert_allclose(_numpy(lse), plain.lse, atol=2e-6)


def test_the_xformers_splitk_adapter_maps_the_dense_varlen_and_kvcache_faces():
    """float16 under the interpreter, judged to 3e-3 (float16 inputs rounded, then products summed in float32 over
    at most 9 keys and outputs of order 1: a few units of float16's 2^-11); head dims 8 and 6 zero-padded to the
    operator's 16, GQA as BMGHK. Fails on an adapter that groups the heads wrongly (heads 0 and 1 share kv head 0
    here) or lets the padding change the scale (1/sqrt(16) for 1/sqrt(8))."""
    impl = _triton_peer("xformers", "impls.peers.xformers_splitk:xformers_splitk")
    q, k, v, _ = _problem(seed=4)
    q, k, v = (x.astype(np.float16).astype(np.float64) for x in (q, k, v))  # the inputs it sees, exactly
    out, lse = impl.fn(*_torch((q, k, v), "float16"), return_lse=True)
    expected = attention(q, k, v)
    np.testing.assert_allclose(_numpy(out), expected.out, atol=3e-3)
    np.testing.assert_allclose(_numpy(lse), expected.lse, atol=3e-3)
    out = impl.fn(*_torch((q[:, :, :3], k, v), "float16"), causal=True)  # 3 queries: within its 16 for causal
    np.testing.assert_allclose(_numpy(out), attention(q[:, :, :3], k, v, causal=True,
                                                      causal_alignment="bottom_right").out, atol=3e-3)
    packed = pack_sequences(q, k, v, [5, 3], [7, 6], unused_k=2, tail=2)  # seqused_k: 2 keys of each unread
    cu_q, cu_k = _torch(packed.arrays[3:], "int32")
    out = impl.face("varlen")(*_torch(packed.arrays[:3], "float16"), cu_q, cu_k, **packed.keywords)
    want, _ = varlen_attention(packed.q, packed.k, packed.v, packed.packing())
    np.testing.assert_allclose(_numpy(out), want, atol=3e-3)
    even = pack_sequences(q, k, v, [3, 3], [9, 6], tail=1)  # equal query lengths: the operator returns (2, 3, ..)
    cu_q, cu_k = _torch(even.arrays[3:], "int32")
    out = impl.face("varlen")(*_torch(even.arrays[:3], "float16"), cu_q, cu_k, **even.keywords)
    np.testing.assert_allclose(_numpy(out), varlen_attention(even.q, even.k, even.v, even.packing())[0], atol=3e-3)
    cache_k, cache_v = (np.concatenate([x.swapaxes(1, 2)[:, :7], np.zeros((2, 5) + x.shape[1:2] + x.shape[3:])],
                                       axis=1) for x in (k, v))
    cache = _torch((cache_k, cache_v), "float16")
    new = _torch((k.swapaxes(1, 2)[:, 7:], v.swapaxes(1, 2)[:, 7:]), "float16")
    out = impl.face("kvcache")(_torch((q.swapaxes(1, 2)[:, :3],), "float16")[0], *cache, *new,
                               cache_seqlens=_torch([np.array([7, 7])], "int32")[0], causal=True)
    np.testing.assert_allclose(_numpy(out).swapaxes(1, 2), attention(q[:, :, :3], k, v, causal=True,
                                                                     causal_alignment="bottom_right").out, atol=3e-3)
    np.testing.assert_allclose(_numpy(cache[0][:, 7:9]), k.swapaxes(1, 2)[:, 7:9], atol=0)  # written in place


# -- torch's ring attention (tox -e distributed-peers): the private template over the CPU SDPA op, in the rank pool ---
@pytest.mark.parametrize(("target", "world"), [("torch_ring", 2), ("torch_ring", 3), ("torch_ring_head_tail", 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_torch_ring_adapter_runs_the_ring_on_its_layout_as_the_oracle_reads_it(target, world, causal):
    """float64 within float32's rounding (the merge is float32's: docs/findings/torch_ring_float64_merged_in_float32.py)
    on 12 positions, contiguous or head-tail (chunks r and 2W - 1 - r), causal with the load balancer or not; the
    LSE too; each rank's shard comes back in place."""
    pytest.importorskip("torch")
    impl = load_impl(f"impls.peers.torch_ring:{target}")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(world)
    q, k, v = _torch([rng.standard_normal((1, 2, 12, 4)) for _ in range(3)], "float64")
    out, lse = impl.fn(q, k, v, causal=causal, scale=0.7, return_lse=True, world_size=world)  # the session's pool
    expected = attention(*(_numpy(x) for x in (q, k, v)), causal=causal, scale=0.7)
    np.testing.assert_allclose(_numpy(out), expected.out, atol=2e-6)
    np.testing.assert_allclose(_numpy(lse), expected.lse, atol=2e-6)


@pytest.mark.parametrize("target", ["ring_flash_attn_ring", "ring_flash_attn_zigzag", "ring_flash_attn_stripe"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_ring_flash_attn_adapter_runs_each_layout_as_the_oracle_reads_it(target, causal):
    """float32 under the interpreter on two ranks, 8 positions (equal shards in every layout): out and LSE within
    float32's rounding; zigzag and stripe without causal run the library's ring, as it says to."""
    pytest.importorskip("torch")
    impl = load_impl(f"impls.peers.ring_flash_attn:{target}")
    if impl.unavailable:  # its probe, which imports nothing (flash_attn imports only with its backend chosen)
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(3)
    q, k, v = _torch([rng.standard_normal((1, 2, 8, 16)) for _ in range(3)], "float32")
    out, lse = impl.fn(q, k, v, causal=causal, scale=0.3, return_lse=True, world_size=2)  # the session's pool
    expected = attention(*(_numpy(x) for x in (q, k, v)), causal=causal, scale=0.3)
    np.testing.assert_allclose(_numpy(out), expected.out, atol=2e-6)
    np.testing.assert_allclose(_numpy(lse), expected.lse, atol=2e-6)


RING_FLASH_ATTN_RECORDS = {"contiguous": "ring", "zigzag": "zigzag", "stripe": "stripe"}  # record name's suffix


@pytest.mark.parametrize(("layout", "world"), [("contiguous", 2), ("contiguous", 3), ("zigzag", 3), ("stripe", 2)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("d", [1, 8])
def test_ring_flash_attn_s_backward_is_what_its_declared_deviation_predicts(layout, world, causal, dtype, d):
    """The library's own backwards through the adapters, 2 heads, 12 positions: every rank's dQ (and dK where it is
    predicted: float16 with a head dim of 1, where flash-attn reads dO misplaced) is
    dq-accumulator-aliases-step-buffer's prediction within its allowance; float32's dQ and head dim 1's are not the
    oracle's."""
    pytest.importorskip("torch")
    impl = load_impl(f"impls.peers.ring_flash_attn:ring_flash_attn_{RING_FLASH_ATTN_RECORDS[layout]}")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((1, 2, 12, d)).astype(dtype).astype(np.float64) for _ in range(4)]
    q, k, v = _torch(arrays[:3], dtype)
    for x in (q, k, v):
        x.requires_grad_()
    out = impl.fn(q, k, v, causal=causal, world_size=world)  # the session's pool
    out.backward(_torch(arrays[3:], dtype)[0])
    call = Call(*arrays[:3], {"causal": causal} if causal else {}, dtype, d_out=arrays[3],
                tiles={"world_size": world, "layout": layout})
    deviation = deviation_from_fields("dq-accumulator-aliases-step-buffer", {}, "test")
    predicted, extra = deviation.predicted_values(call), deviation.extra_allowance(call)
    oracle = gradient_allowance(*arrays, dtype=dtype, causal=causal)
    assert set(predicted) == ({"dq", "dk"} if d == 1 and dtype == "float16" else {"dq"})
    for name, (_, value) in predicted.items():
        index = ("dq", "dk").index(name)
        got = _numpy((q, k)[index].grad)
        assert np.all(np.abs(got - value) <= oracle.allowances[index].bound + extra[name]), name
    if dtype == "float32" or d == 1:
        assert np.any(np.abs(_numpy(q.grad) - oracle.grads[0]) > oracle.allowances[0].bound)


def _ring_float16_run(problem, seed: int):
    """One of the peers run's float16 examples through ring-flash-attn's ring on two ranks, with the run's cotangent
    (drawn from `seed`): the library's dQ and dK, dq-accumulator-aliases-step-buffer's prediction, allowance beyond
    the rule and undefined elements, and the oracle."""
    from harness.api.trial import Trial
    from protocol.registry import Variant

    impl = load_impl("impls.peers.ring_flash_attn:ring_flash_attn_ring")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    arrays = [x.astype(np.float16).astype(np.float64) for x in (problem.q, problem.k, problem.v)]
    d_out = Trial(Variant(impl, "float16"), problem).cotangent(problem, seed).astype(np.float64)
    q, k, v = _torch(arrays, "float16")
    for x in (q, k):
        x.requires_grad_()
    impl.fn(q, k, v, world_size=2).backward(_torch([d_out], "float16")[0])  # the session's pool
    call = Call(*arrays, {}, "float16", d_out=d_out, tiles={"world_size": 2, "layout": "contiguous"})
    deviation = deviation_from_fields("dq-accumulator-aliases-step-buffer", {}, "test")
    return ({"dq": _numpy(q.grad), "dk": _numpy(k.grad)}, deviation.predicted_values(call),
            deviation.extra_allowance(call), deviation.undefined(call), gradient_allowance(*arrays, d_out,
                                                                                         dtype="float16"))


def _within_the_prediction(got, predicted, extra, oracle) -> None:
    """Every judged element of each gradient predicted: the prediction's +-inf and NaN exactly, the rest within the
    rule and the deviation's allowance."""
    for name, (judged, value) in predicted.items():
        exact, finite = judged & ~np.isfinite(value), judged & np.isfinite(value)
        np.testing.assert_array_equal(got[name][exact], value[exact])
        bound = oracle.allowances[("dq", "dk").index(name)].bound + extra[name]
        assert np.all(np.abs(got[name] - value)[finite] <= bound[finite]), name


def test_ring_flash_attn_s_float16_shares_past_its_range_are_inf_where_its_declared_deviation_says():
    """The peers run's example (2 heads over 1 kv head, 4 positions of head dim 1 on two ranks, scores near 1000):
    the misplaced dO makes dQ's and dK's shares past float16's 65504, which their float16 buffers hold as inf; the
    elements dq-accumulator-aliases-step-buffer predicts inf are inf, the rest it predicts within its allowance (the
    oracle's dQ is below 1e-60 everywhere, so each large element is the deviation's). One dQ element (65397) it
    leaves undefined: within its error of 65408, past which the ring's bfloat16 dQ is 65536, inf as float16 (the
    library's is inf)."""
    pytest.importorskip("torch")
    from specs.derivations import spans_taken
    from specs.problems import build

    problem = spans_taken(build(heads=2, n_q=5, n_k=5, seed=2, score_style="large", value_style="offset"),
                          queries=(0, 4), keys=(0, 4))
    got, predicted, extra, undefined, oracle = _ring_float16_run(problem, 2)
    assert np.all(np.abs(oracle.grads[0]) < 1e-60)
    assert undefined["dq"].sum() == 1 and not undefined["dk"].any()
    for name, (judged, value) in predicted.items():
        np.testing.assert_array_equal(judged, ~undefined[name])
        assert (judged & np.isinf(value)).any(), name  # the example reaches the overflow
    _within_the_prediction(got, predicted, extra, oracle)


@pytest.mark.parametrize(("build_keywords", "spans", "name", "at"), [
    # a row's two blocks' outs, near +-3.9, are each returned in float16 and cancel in the merge, so the misread dO's
    # rowsum(O * dO) carries their rounding: the library's dQ there is 1.2e-3, the oracle's 4e-9, the re-enactment
    # from the exact out -2e-7
    (dict(score_style="integers", value_style="integers", n_q=5, n_k=5), (0, 4), "dq", (0, 1, 2, 0)),
    # the misread dO leaves dS near 1e-8, which the kernel rounds to float16 subnormals before dK sums it over queries
    # of up to 92: the library's dK there is 1.55e-6, the float64 dS's 1.40e-6, the rule allows 6e-8
    (dict(score_style="large", value_style="offset", n_q=14, n_k=14), None, "dk", (1, 0, 11, 0))])
def test_ring_flash_attn_s_float16_rounding_past_the_rule_is_within_its_declared_deviation_s_allowance(
        build_keywords, spans, name, at):
    """The peers run's examples (2 heads over 1 kv head, head dim 1, two ranks, the run's seed 14): an element more
    than twice the rule from dq-accumulator-aliases-step-buffer's float64 prediction, which its allowance for the
    stored out's rounding and for subnormal dS covers, as every other element."""
    pytest.importorskip("torch")
    from specs.derivations import spans_taken
    from specs.problems import build

    problem = build(batch=2, heads=2, seed=14, **build_keywords)
    if spans is not None:
        problem = spans_taken(problem, queries=spans, keys=spans)
    got, predicted, extra, _, oracle = _ring_float16_run(problem, 14)
    assert abs(got[name][at] - predicted[name][1][at]) > 2 * oracle.allowances[("dq", "dk").index(name)].bound[at]
    _within_the_prediction(got, predicted, extra, oracle)


def test_ring_flash_attn_s_float16_shares_that_cancel_are_nan_where_its_declared_deviation_says():
    """docs/findings/ring_flash_attn_float16_dq_share_overflows_its_buffer.py through the adapter: dQ is 0 on every
    row, and the library's, NaN, is dq-accumulator-aliases-step-buffer's prediction (its shares +-70,711 are +-inf
    in their float16 buffers); the oracle's dQ fails it."""
    pytest.importorskip("torch")
    impl = load_impl("impls.peers.ring_flash_attn:ring_flash_attn_ring")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    arrays = [np.tile([1.0, 0.0], (1, 1, 4, 1)), np.tile([500.0, 0.0], (1, 1, 4, 1)),
              np.array([[400.0, 0.0], [400.0, 0.0], [-400.0, 0.0], [-400.0, 0.0]]).reshape(1, 1, 4, 2)]
    d_out = np.tile([1.0, 0.0], (1, 1, 4, 1))
    q, k, v = _torch(arrays, "float16")
    q.requires_grad_()
    impl.fn(q, k, v, world_size=2).backward(_torch([d_out], "float16")[0])  # the session's pool
    call = Call(*arrays, {}, "float16", d_out=d_out, tiles={"world_size": 2, "layout": "contiguous"})
    judged, value = deviation_from_fields("dq-accumulator-aliases-step-buffer", {}, "test").predicted_values(call)["dq"]
    got = _numpy(q.grad)
    assert judged.all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(value))
    np.testing.assert_array_equal(got[~np.isnan(value)], 0.0)
    assert np.isnan(got).any() and not np.isnan(gradient_allowance(*arrays, d_out, dtype="float16").grads[0]).any()


@pytest.mark.parametrize(("build_keywords", "seed"), [
    (dict(heads=3, n_q=5, n_k=5, seed=290, score_style="integers", causal=True), 290),
    (dict(heads=3, n_q=19, n_k=19, seed=66, scale=6.0, causal=True), 66),
    (dict(heads=2, n_q=21, n_k=21, seed=66, score_style="integers", causal=True), 66)])
def test_ring_flash_attn_stripe_s_float32_misread_shares_are_within_its_declared_deviation_s_allowance(
        build_keywords, seed):
    """The peers run's stripe examples (3 heads over 1 kv head, head dim 1, causal, two ranks, float32): a rank
    past the first reads dO misplaced, so a share's terms exceed its row's, and the aliased buffer returns one share
    twice; dQ is dq-accumulator-aliases-step-buffer's prediction within the allowance that scales each share's kernel
    error by its terms (the row's rule alone allowed 3.2e-7 where the library was 4.1e-7 off), and not the
    oracle's."""
    pytest.importorskip("torch")
    from harness.api.trial import Trial
    from protocol.registry import Variant
    from specs.derivations import spans_taken
    from specs.problems import build

    impl = load_impl("impls.peers.ring_flash_attn:ring_flash_attn_stripe")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    n = build_keywords["n_q"] - 1
    problem = spans_taken(build(**build_keywords), queries=(0, n), keys=(0, n))
    arrays = [x.astype(np.float32).astype(np.float64) for x in (problem.q, problem.k, problem.v)]
    d_out = Trial(Variant(impl, "float32"), problem).cotangent(problem, seed).astype(np.float64)  # the run's
    q, k, v = _torch(arrays, "float32")
    for x in (q, k, v):
        x.requires_grad_()
    keywords = problem.kwargs()
    impl.fn(q, k, v, **keywords, world_size=2).backward(_torch([d_out], "float32")[0])  # the session's pool
    call = Call(*arrays, keywords, "float32", d_out=d_out, tiles={"world_size": 2, "layout": "stripe"})
    deviation = deviation_from_fields("dq-accumulator-aliases-step-buffer", {}, "test")
    (judged, value), extra = deviation.predicted_values(call)["dq"], deviation.extra_allowance(call)["dq"]
    oracle = gradient_allowance(*arrays, d_out, dtype="float32", **keywords)
    got = _numpy(q.grad)
    assert judged.all()
    assert np.all(np.abs(got - value) <= oracle.allowances[0].bound + extra)
    assert np.any(np.abs(got - oracle.grads[0]) > oracle.allowances[0].bound)


@pytest.mark.parametrize(("layout", "world", "n"), [("contiguous", 2, 6), ("contiguous", 2, 64), ("contiguous", 3, 9),
                                              ("zigzag", 2, 8), ("zigzag", 3, 12), ("stripe", 2, 6)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [0.0, -1.0])
def test_ring_flash_attn_s_nan_rows_are_its_declared_deviation_s(layout, world, n, causal, scale):
    """float32 under the interpreter: the rows whose output and LSE are NaN at a scale of 0 or below are exactly
    those padded-keys-nan-at-nonpositive-scale (block_n 64, ring_steps) predicts, the rest the oracle's (n = 64 on two
    ranks: blocks of 32 keys pad their tile, which 64 keys would not; causal: the masked blocks do not; zigzag's
    rows split)."""
    pytest.importorskip("torch")
    impl = load_impl(f"impls.peers.ring_flash_attn:ring_flash_attn_{RING_FLASH_ATTN_RECORDS[layout]}")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal((1, 2, n, 4)).astype(np.float32).astype(np.float64) for _ in range(3)]
    out, lse = impl.fn(*_torch(arrays, "float32"), causal=causal, scale=scale, return_lse=True, world_size=world)
    keywords = {"scale": scale, **({"causal": True} if causal else {})}
    call = Call(*arrays, keywords, "float32", tiles={"world_size": world, "layout": layout})
    deviation = deviation_from_fields("padded-keys-nan-at-nonpositive-scale", {"block_n": 64, "ring_steps": True},
                                      "test")
    predicted = deviation.non_finite(call).get("lse", np.zeros(arrays[0].shape[:3], dtype=bool))
    np.testing.assert_array_equal(np.isnan(_numpy(lse)), predicted)
    np.testing.assert_array_equal(np.isnan(_numpy(out)).any(axis=-1), predicted)
    expected = attention(*arrays, **keywords)
    np.testing.assert_allclose(_numpy(out)[~predicted], expected.out[~predicted], atol=2e-6)


@pytest.mark.parametrize(("layout", "world", "n"), [("contiguous", 2, 8), ("contiguous", 3, 9), ("zigzag", 2, 8),
                                              ("zigzag", 3, 12), ("stripe", 2, 8)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_ring_flash_attn_s_nan_dq_rows_are_where_its_declared_deviation_puts_them(layout, world, n, causal, dtype):
    """Every score -100 (q = -10, k = 5, head dim 4): each row's log-sum-exp is below -88.72, so a block's dQ kernel
    that reads padded keys weighs them by an overflowing exp(-lse) and its share is NaN; the rows of dQ that are
    not finite are exactly those padded-keys-weight-overflow (block_n 32, ring_steps) puts them in through the
    backward's buffer (float32 zigzag: the aliased buffer spreads the second-half share to the first half)."""
    pytest.importorskip("torch")
    impl = load_impl(f"impls.peers.ring_flash_attn:ring_flash_attn_{RING_FLASH_ATTN_RECORDS[layout]}")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    arrays = [np.full((1, 2, n, 4), -10.0), np.full((1, 2, n, 4), 5.0), np.random.default_rng(9).standard_normal(
        (1, 2, n, 4)).astype(dtype).astype(np.float64)]
    d_out = np.random.default_rng(10).standard_normal((1, 2, n, 4)).astype(dtype).astype(np.float64)
    q, k, v = _torch(arrays, dtype)
    for x in (q, k, v):
        x.requires_grad_()
    impl.fn(q, k, v, causal=causal, world_size=world).backward(_torch([d_out], dtype)[0])  # the session's pool
    call = Call(*arrays, {"causal": True} if causal else {}, dtype, d_out=d_out,
                tiles={"world_size": world, "layout": layout})
    deviation = deviation_from_fields("padded-keys-weight-overflow", {"block_n": 32, "ring_steps": True}, "test")
    predicted = deviation.non_finite_gradients(call).get("dq", np.zeros(q.shape, dtype=bool))
    np.testing.assert_array_equal(~np.isfinite(_numpy(q.grad)), predicted)


@pytest.mark.parametrize(("world", "n", "raises"), [(2, 2, True), (3, 3, True), (2, 4, False)])
def test_ring_flash_attn_stripe_asserts_where_its_declared_deviation_says(world, n, raises):
    """A causal stripe call of one position a rank raises AssertionError from a rank raises-on-empty-ring-block
    names; two positions a rank return the oracle's output."""
    pytest.importorskip("torch")
    from harness.engine.guarded_call import CallFailed, call_in_process

    impl = load_impl("impls.peers.ring_flash_attn:ring_flash_attn_stripe")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    arrays = [np.random.default_rng(7).standard_normal((1, 1, n, 4)) for _ in range(3)]
    call = Call(*arrays, {"causal": True}, "float32", tiles={"world_size": world, "layout": "stripe"})
    deviation = deviation_from_fields("raises-on-empty-ring-block", {"raises": "AssertionError"}, "test")
    try:
        out = call_in_process(impl.fn, tuple(x.astype(np.float32) for x in arrays),
                              {"causal": True, "world_size": world}, "torch", timeout_s=300)
    except CallFailed as failure:
        assert raises and deviation.explains_raise(call, failure.summary.removeprefix("the implementation raised "))
    else:
        assert not raises and not deviation.explains_raise(call, "AssertionError: ")
        np.testing.assert_allclose(_numpy(out), attention(*arrays, causal=True).out, atol=2e-6)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "stripe"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("world", "n"), [(1, 1), (1, 2), (2, 4)])
def test_ring_flash_attn_s_backward_fails_where_its_declared_deviation_says(layout, causal, world, n):
    """On a group of one rank every backward raises, and backward-fails-on-one-rank explains what it raises (zigzag's
    causal call of one position: the IndexError of halving its shard); on two ranks the backward runs, and the same
    errors would not be explained."""
    pytest.importorskip("torch")
    from protocol.rank_pool import RankFailed

    impl = load_impl(f"impls.peers.ring_flash_attn:ring_flash_attn_{RING_FLASH_ATTN_RECORDS[layout]}")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(n)
    arrays = [rng.standard_normal((1, 1, n, 4)) for _ in range(4)]
    q, k, v, d_out = _torch(arrays, "float32")
    for x in (q, k, v):
        x.requires_grad_()
    call = Call(*arrays[:3], {"causal": causal}, "float32", d_out=arrays[3],
                tiles={"world_size": world, "layout": layout})
    deviation = deviation_from_fields("backward-fails-on-one-rank", {}, "test")
    out = impl.fn(q, k, v, causal=causal, world_size=world)  # the session's pool; the forward runs on any group
    if world == 1:
        with pytest.raises(RankFailed) as failed:
            out.backward(d_out)
        assert deviation.explains_raise(call, failed.value.summary), failed.value.summary
    else:
        out.backward(d_out)
        assert not any(deviation.explains_raise(call, error) for error in ("RuntimeError: ", "IndexError: "))


@pytest.mark.parametrize("causal", [False, True])
def test_the_yunchang_ulysses_adapter_swaps_heads_and_sequence_as_the_oracle_reads_it(causal):
    """float32 under the interpreter on two ranks: 4 heads, 8 positions, out within float32's rounding."""
    pytest.importorskip("torch")
    impl = load_impl("impls.peers.yunchang_ulysses:yunchang_ulysses")
    if impl.unavailable:
        pytest.skip(impl.unavailable)
    rng = np.random.default_rng(4)
    q, k, v = _torch([rng.standard_normal((1, 4, 8, 16)) for _ in range(3)], "float32")
    out = impl.fn(q, k, v, causal=causal, scale=0.3, world_size=2)  # the session's pool
    np.testing.assert_allclose(_numpy(out), attention(*(_numpy(x) for x in (q, k, v)), causal=causal, scale=0.3).out,
                               atol=2e-6)
