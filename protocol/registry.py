"""CONTRACT 1: loading implementations and reading their capabilities.

An implementation is `fn(q, k, v, *, scale=None, causal=False, mask=None) -> out`.
Keywords present in the signature are features it has; the optional attribute
`fn.attention_capabilities` (a dict) refines the rest; `fn.attention_backward`, when present, is the
implementation's own backward pass; `fn.attention_expectations` (formerly `fn.known_defects`, still read)
declares the claims it is known to break, each row naming the documented deviation that explains how
(protocol.expectation_rows). Built-in records use the `attention_impl` decorator, which only sets those same
attributes, so one mechanism reads built-in and outside implementations alike; a record's expectations are the
rows of its name in impls/expectations.toml (protocol.expectations);
the list of built-in records is impls.records. Besides the dense face, an implementation may offer the varlen and
kv-cache faces (protocol.faces, the capability `faces`); the dense problems reach the first of them through
protocol.dense_adapters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from protocol.dense_adapters import dense_through
from protocol.expectation_rows import Expectation, ExpectationError, declared_expectations, parse_expectations
from protocol.expectations import rows_for
from protocol.faces import FEATURE_KEYWORDS, FaceError, check_faces, face_features, face_functions
from protocol.sharded_adapter import dense_over_ranks
from protocol.triton_interpreter import interpret_without_gpu
from specs.sharding import LAYOUTS
from specs.tolerance import SUPPORTED_DTYPES
from specs.validation import CAUSAL_ALIGNMENTS

SIGNATURE_FEATURES = ("scale", "causal", "mask", "dropout_p", "dropout_seed")
# Beyond the seeds (specs.score_mods): a feature only where the signature names the keyword. A function that takes
# **kwargs has the seeds' keywords (it may forward them), not these: a wrapper that forwards everything to a kernel
# without them would be asked for five features it never offered.
SCORE_MODS = ("bias", "window_size", "softcap", "alibi_slopes", "sinks")
DIFFERENTIABLE_MODS = ("bias", "sinks")  # the modification arrays a gradient is taken of (specs.gradients)
TENSOR_KINDS = ("numpy", "torch")  # what the harness hands an implementation as q, k, v and mask
BACKENDS = ("numpy", "torch", "cupy", "peers", "triton", "distributed")  # what --backend selects among built-in records
# "peers" are the implementations people use, checked as they are (impls/peers): their installs are large, so a run
# checks them only when --backend names them (tox -e peers)
DEFAULT_BACKENDS = ("numpy", "torch", "cupy")


class ImplLoadError(ValueError):
    """An --impl target could not be turned into an implementation."""


@dataclass(frozen=True)
class Capabilities:
    """What an implementation can be asked to do."""

    scale: bool = False
    causal: bool = False
    mask: bool = False
    dropout: bool = False
    dropout_seed: bool = False  # the mask is specs.dropout_mask's pure function of (seed, batch, head, row, column)
    dtypes: tuple[str, ...] = ("float64",)
    gqa: bool = True  # heads_kv < heads
    cross: bool = True  # n_q != n_k
    value_dim: bool = True  # d_v != d
    causal_alignment: str = "top_left"
    max_seq: int | None = None
    tile_keywords: tuple[str, ...] = ()  # keyword arguments that set block sizes
    min_block_size: int = 1  # the smallest size they take (a Triton kernel's tl.dot needs tiles of 16 on a GPU)
    lse: bool = False  # accepts return_lse=True and returns (out, lse)
    fused: bool = False  # one kernel for MatMul -> Scale -> Softmax -> (Dropout) -> MatMul
    compiles_per_shape: bool = False  # every new shape compiles (jax.jit, torch.compile): draw from FIXED_SHAPES
    native: bool = False  # compiled code that may crash its process: calls run isolated (harness.engine.isolation)
    cuda_checkers: bool = False  # a CUDA kernel run on the CPU: fn.cuda_run(..., executor=CHECKER) (impls.cuda)
    tensors: str = "numpy"  # "torch": q, k, v (and mask) arrive as torch tensors, and the output is differentiable
    differentiable: bool = True  # tensors="torch": False for a forward-only kernel (inference, decoding)
    backward: bool = False  # fn.attention_backward(q, k, v, d_out, **kwargs) -> (dq, dk, dv) in NumPy
    bias: bool = False  # an additive float bias on the scaled scores (SDPA's float attn_mask)
    window_size: bool = False  # a (left, right) sliding window around each query's diagonal
    softcap: bool = False  # softcap * tanh(scores / softcap)
    alibi_slopes: bool = False  # ALiBi: -slope * |i + offset - j|
    sinks: bool = False  # a per-head logit in each row's softmax denominator
    # the score-modification arrays autograd reaches (tensors="torch"): their gradients dBias, dSinks are checked
    differentiable_mods: tuple[str, ...] = ()
    # the faces it offers (protocol.faces); the first is the function's own, and the dense properties reach it
    faces: tuple[str, ...] = ("dense",)
    seqused_k: bool = False  # varlen: keys past seqused_k[i] are not read
    empty_sequences: bool = True  # varlen: takes sequences of no query or no key (their rows give 0)
    cache_batch_idx: bool = False  # kvcache: sequence b uses cache row cache_batch_idx[b]
    cache_leftpad: bool = False  # kvcache: a sequence's keys start at cache_leftpad[b]
    block_table: bool = False  # kvcache: a paged cache, pages found through block_table
    num_splits: bool = False  # kvcache: keys cut into num_splits splits merged through their log-sum-exp
    sharding: str = "contiguous"  # sharded: how q, k, v are laid across the ranks (specs.sharding.LAYOUTS)
    even_shards: bool = False  # sharded: on more than one rank, takes only lengths the layout splits into equal shards
    heads_divisible: bool = False  # sharded: splits the query heads among the ranks (Ulysses), refusing otherwise
    # sharded: each rank merges the K/V blocks passed around the ranks by their log-sum-exp (ring attention), so
    # keys whose shards are exchanged among the ranks change only the merge's order
    ring_merge: bool = False

    @property
    def varlen(self) -> bool:
        return "varlen" in self.faces

    @property
    def kvcache(self) -> bool:
        return "kvcache" in self.faces

    @property
    def sharded(self) -> bool:
        return "sharded" in self.faces

    @property
    def gradients(self) -> bool:
        """Gradients reach it: through torch's autograd, or through its own declared backward."""
        return (self.tensors == "torch" and self.differentiable) or self.backward

    @property
    def paged(self) -> bool:
        return "page_size" in self.tile_keywords

    def lacking(self, *features: str) -> str | None:
        """A skip reason naming the first feature this implementation lacks, or None."""
        for feature in features:
            if not getattr(self, feature):
                return f"implementation lacks '{feature}' ({_FEATURE_NOTES[feature]})"
        return None


_FEATURE_NOTES = {
    "scale": "no `scale` keyword",
    "causal": "no `causal` keyword",
    "mask": "no `mask` keyword",
    "dropout": "no `dropout_p` keyword",
    "dropout_seed": "no `dropout_seed` keyword (a mask that is a pure function of the seed and the position)",
    "gqa": "declared gqa=False: heads_kv must equal heads",
    "cross": "declared cross=False: n_q must equal n_k",
    "value_dim": "declared value_dim=False: d_v must equal d",
    "tile_keywords": "no block-size keywords declared",
    "lse": "declared lse=False",
    "fused": "not declared fused=True",
    "paged": "no page_size keyword",
    "gradients": "neither tensors='torch' with a differentiable output (autograd) nor fn.attention_backward",
    "cuda_checkers": "not a CUDA kernel executed on the CPU (no fn.cuda_run for the memory, race and barrier checkers)",
    **{mod: f"no `{mod}` keyword named in the signature" for mod in SCORE_MODS},
    "varlen": "no varlen face (capability faces)",
    "kvcache": "no kvcache face (capability faces)",
    "sharded": "no sharded face (capability faces)",
    **{feature: f"no `{feature}` keyword named in its face's signature" for feature in FEATURE_KEYWORDS},
}
FEATURES = tuple(_FEATURE_NOTES)  # what a property may require (`requires(...)` markers)
_DECLARABLE = {f.name for f in dataclasses.fields(Capabilities)} - {"scale", "causal", "mask", "dropout",
                                                                    "dropout_seed", "backward", *SCORE_MODS,
                                                                    *FEATURE_KEYWORDS}


@dataclass(frozen=True, eq=False)
class Impl:
    """One declarative record: the callable, what it can do, and what it is known to get wrong."""

    name: str
    target: str
    fn: Callable = field(repr=False)  # the dense face (through protocol.dense_adapters when not its own)
    capabilities: Capabilities
    expectations: tuple[Expectation, ...]  # the rows that declare what it is known to get wrong
    backend: str
    unavailable: str | None = None  # why it cannot run on this machine
    faces: dict = field(default_factory=dict, repr=False)  # face -> its own function (protocol.faces)

    def face(self, name: str) -> Callable:
        """The function of face `name` (protocol.faces), called as that face's protocol says."""
        if name not in self.faces:
            raise ValueError(f"{self.name} offers the faces {tuple(self.faces)}, not {name!r}")
        return self.faces[name]

    def declared_claims(self) -> set[str]:
        return {row.claim for row in self.expectations}

    @property
    def known_defects(self) -> tuple[Expectation, ...]:
        """Deprecated name of `expectations` (docs/glossary.md)."""
        warnings.warn("Impl.known_defects is deprecated: read Impl.expectations", DeprecationWarning, stacklevel=2)
        return self.expectations


@dataclass(frozen=True, eq=False)
class Variant:
    """An implementation run in one precision: the unit a property is parametrized over."""

    impl: Impl
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.impl.name}[{self.dtype}]"

    @property
    def capabilities(self) -> Capabilities:
        return self.impl.capabilities


def attention_impl(*, name: str, backend: str, probe: Callable[[], str | None] | None = None, **capabilities):
    """Declare a built-in implementation's record on the function itself (its known defects: the rows of
    `name` in impls/expectations.toml)."""

    if backend not in BACKENDS:
        raise ValueError(f"{name}: backend {backend!r} is not one of {BACKENDS}")
    if {"attention_expectations", "expectations", "known_defects"} & capabilities.keys():
        raise ValueError(f"{name}: a record's expectations are its rows in impls/expectations.toml "
                         f"(subject = {name!r}), not an attention_impl argument")

    def declare(fn: Callable) -> Callable:
        fn.attention_name = name
        fn.attention_backend = backend
        fn.attention_capabilities = capabilities
        fn.attention_probe = probe
        return fn

    return declare


def _capabilities(fn: Callable, target: str) -> tuple[Capabilities, dict[str, Callable]]:
    """The capabilities read from the signature and the declaration, and each face's function."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise ImplLoadError(f"{target}: cannot read the signature ({exc})") from None
    positional = [p for p in params.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    if len(positional) < 3 and not any(p.kind == p.VAR_POSITIONAL for p in positional):
        raise ImplLoadError(f"{target}: must take q, k, v positionally; signature is {inspect.signature(fn)}")
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params.values())
    present = {f: (f in params) or takes_kwargs for f in SIGNATURE_FEATURES}
    declared = dict(getattr(fn, "attention_capabilities", None) or {})
    unknown = set(declared) - _DECLARABLE
    if unknown:
        raise ImplLoadError(f"{target}: unknown capabilities {sorted(unknown)}; known: {sorted(_DECLARABLE)}")
    dtypes = tuple(declared.pop("dtypes", ("float64",)))
    bad = [d for d in dtypes if d not in SUPPORTED_DTYPES]
    if bad or not dtypes:
        found = f"unknown dtypes {bad}" if bad else "no dtypes"
        raise ImplLoadError(f"{target}: {found} declared; valid: {', '.join(SUPPORTED_DTYPES)}")
    if declared.get("tensors", "numpy") not in TENSOR_KINDS:
        raise ImplLoadError(f"{target}: tensors must be one of {TENSOR_KINDS}, got {declared['tensors']!r}")
    if declared.get("differentiable", True) is not True and (declared.get("differentiable") is not False
                                                            or declared.get("tensors") != "torch"):
        raise ImplLoadError(f"{target}: differentiable is True or False, and False only with tensors='torch' (a "
                            f"forward-only kernel on tensors); got {declared['differentiable']!r}")
    backward = getattr(fn, "attention_backward", None)
    if backward is not None and not callable(backward):
        raise ImplLoadError(f"{target}: attention_backward is a {type(backward).__name__}, not a function")
    if declared.get("causal_alignment", "top_left") not in CAUSAL_ALIGNMENTS:
        raise ImplLoadError(f"{target}: causal_alignment must be one of {CAUSAL_ALIGNMENTS}")
    differentiable = tuple(declared.pop("differentiable_mods", ()))
    wrong = [m for m in differentiable if m not in DIFFERENTIABLE_MODS or m not in params]
    if wrong or (differentiable and declared.get("tensors") != "torch"):
        raise ImplLoadError(f"{target}: differentiable_mods {list(differentiable)}: each must be one of "
                            f"{DIFFERENTIABLE_MODS} named in the signature, with tensors='torch' (autograd reaches "
                            "them)")
    try:
        faces = check_faces(declared.pop("faces", ("dense",)), target)
        functions = face_functions(fn, faces, target)
    except FaceError as exc:
        raise ImplLoadError(str(exc)) from None
    features = face_features(functions)
    if "sharded" in faces and (declared.get("tensors") != "torch" or declared.get("native")
                               or declared.get("sharding", "contiguous") not in LAYOUTS):
        raise ImplLoadError(f"{target}: the sharded face runs torch tensors in a process group of its own: declare "
                            f"tensors='torch', not native, and sharding one of {LAYOUTS}")
    if "kvcache" in faces and declared.get("causal_alignment") != "bottom_right":
        raise ImplLoadError(f"{target}: the kvcache face aligns causal bottom-right (the newest query sees every "
                            "key): declare causal_alignment='bottom_right'")
    tiles = tuple(declared.pop("tile_keywords", ()))
    smallest = declared.get("min_block_size", 1)
    if isinstance(smallest, bool) or not isinstance(smallest, int) or smallest < 1 or (smallest > 1 and not tiles):
        raise ImplLoadError(f"{target}: min_block_size must be a positive int, and above 1 only with tile_keywords; "
                            f"got {smallest!r}")
    adapter_keywords = ("page_size",) if faces[0] == "kvcache" and features["block_table"] else ()
    missing = [t for t in tiles if t not in params and not takes_kwargs and t not in adapter_keywords]
    if missing:
        raise ImplLoadError(f"{target}: tile_keywords {missing} are not in the signature")
    capabilities = Capabilities(scale=present["scale"], causal=present["causal"], mask=present["mask"],
                                dropout=present["dropout_p"], dropout_seed=present["dropout_seed"], dtypes=dtypes,
                                tile_keywords=tiles, backward=backward is not None,
                                differentiable_mods=differentiable, **{mod: mod in params for mod in SCORE_MODS},
                                faces=faces, **features, **declared)
    return capabilities, functions


def _import_target(target: str) -> Callable:
    interpret_without_gpu()  # before the module's @triton.jit decorators run, if it has any
    where, sep, attr = target.rpartition(":")
    if not sep or not where or not attr:
        raise ImplLoadError(f"--impl {target!r}: expected 'module.path:function' or 'path/to/file.py:function'")
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = Path(where).resolve()
        if not path.is_file():
            raise ImplLoadError(f"--impl {target!r}: no such file {path}")
        module_name = f"attn_impl_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ImplLoadError(f"--impl {target!r}: importing {path} raised {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(where)
        except ImportError:
            raise  # a missing backend: impls.records reports the record as unavailable
        except Exception as exc:
            raise ImplLoadError(f"--impl {target!r}: importing {where} raised {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, attr, None)
    if fn is None:
        raise ImplLoadError(f"--impl {target!r}: {where} has no attribute {attr!r}")
    if not callable(fn):
        raise ImplLoadError(f"--impl {target!r}: {attr} is a {type(fn).__name__}, not a function")
    return fn


def load_impl(target: str) -> Impl:
    """Turn 'module.path:function' or 'path/to/file.py:function' into a record."""
    fn = _import_target(target)  # carries the declarations; `dense` is what the dense properties call
    capabilities, functions = _capabilities(fn, target)
    dense = functions.get("dense")
    if dense is None and capabilities.faces[0] == "sharded":
        dense = dense_over_ranks(functions["sharded"], target, capabilities)
    elif dense is None:
        first = capabilities.faces[0]
        dense = dense_through(first, functions[first], alignment=capabilities.causal_alignment,
                              features={name: getattr(capabilities, name)
                                        for name in (*FEATURE_KEYWORDS, "empty_sequences")},
                              tile_keywords=capabilities.tile_keywords)
    name = getattr(fn, "attention_name", target)
    try:
        known = parse_expectations(declared_expectations(fn, target), capabilities.dtypes, target)
        known += rows_for(name, capabilities.dtypes)  # the table's rows of its name (a record's, the zoo's, ...)
    except ExpectationError as exc:
        raise ImplLoadError(str(exc)) from None
    probe = getattr(fn, "attention_probe", None)
    return Impl(
        name=name,
        target=target,
        fn=dense,
        capabilities=capabilities,
        expectations=known,
        backend=getattr(fn, "attention_backend", "user"),
        unavailable=probe() if probe else None,
        faces=functions,
    )


@dataclass(frozen=True)
class Unavailable:
    """A built-in that cannot run here, and why (shown in the run's summary)."""

    target: str
    reason: str


def load_targets(targets: Iterable[str], backends: tuple[str, ...] = ()) -> tuple[list[Impl], list[Unavailable]]:
    """The implementations at `targets` (of `backends`; DEFAULT_BACKENDS when empty), split into those that can run
    here and those that cannot (a missing package, or the record's own reason)."""
    ready: list[Impl] = []
    missing: list[Unavailable] = []
    for target in targets:
        try:
            impl = load_impl(target)
        except ImportError as exc:
            missing.append(Unavailable(target, f"{exc.name or exc} is not installed"))
            continue
        if impl.backend not in (backends or DEFAULT_BACKENDS):
            continue
        if impl.unavailable:
            missing.append(Unavailable(target, impl.unavailable))
        else:
            ready.append(impl)
    return ready, missing


def variants(impls: list[Impl]) -> list[Variant]:
    return [Variant(impl, dtype) for impl in impls for dtype in impl.capabilities.dtypes]
