"""The built-in records: every implementation this project maintains, kept apart from the protocol that reads
them (protocol.registry), as PyTorch keeps op_db apart from OpInfo. Adding a record is adding its target here
(tests/unit/test_expectation_rows.py fails for a record defined in impls/ and missing from the list); its known
defects are its rows in impls/expectations.toml."""

from __future__ import annotations

import importlib
import pkgutil

from protocol.registry import Impl, Unavailable, load_targets

BUILTIN_TARGETS = (
    "impls.numpy.numpy_reference:reference_attention",
    "impls.numpy.numpy_tiled:tiled_attention",
    "impls.numpy.numpy_paged:paged_attention",
    "impls.numpy.numpy_split_kv:split_kv_attention",
    "impls.numpy.numpy_kv_cache:kv_cache_attention",
    "impls.seeds.seed000_exp_ratio:exp_ratio_attention",
    "impls.seeds.seed000_three_line:three_line_attention",
    "impls.seeds.seed001_multihead_record:seed_multi_head_attention",
    "impls.seeds.seed002_tiled:memory_optimized_tiled_attention",
    "impls.seeds.seed002_tiled:hardware_aware_attention",
    "impls.torch.torch_sdpa:sdpa_math",
    "impls.torch.torch_sdpa:sdpa_flash_cpu",
    "impls.torch.torch_sdpa_nested:sdpa_jagged",
    "impls.torch.torch_mha:multihead_attention_module",
    "impls.torch.torch_flash_records:flash_tiled",
    "impls.torch.torch_flash_records:flash_tiled_bottom_right",
    "impls.torch.torch_flash_records:unfused_attention",
    "impls.torch.torch_flash_varlen:flash_attn_varlen",
    "impls.torch.torch_sdpa_cuda:sdpa_cuda_flash",
    "impls.torch.torch_sdpa_cuda:sdpa_cuda_efficient",
    "impls.torch.torch_sdpa_cuda:sdpa_cuda_cudnn",
    "impls.cuda.cuda_seed002_kernels:naive_kernel_on_device",
    "impls.cuda.cuda_seed002_kernels:naive_kernel_on_cpu",
    "impls.cuda.cuda_seed002_kernels:shared_memory_kernel_on_device",
    "impls.cuda.cuda_seed002_kernels:shared_memory_kernel_on_cpu",
    "impls.cuda.cuda_flash_simt:flash_simt_on_device",
    "impls.cuda.cuda_flash_simt:flash_simt_on_cpu",
    "impls.cuda.cuda_flash_simt:flash_simt_bottom_right_on_device",
    "impls.cuda.cuda_flash_simt:flash_simt_bottom_right_on_cpu",
    "impls.cuda.cuda_flash_wmma:flash_wmma_on_device",
    "impls.cuda.cuda_flash_wmma:flash_wmma_on_cpu",
    "impls.cuda.cuda_paged_decode:paged_decode_on_device",
    "impls.cuda.cuda_paged_decode:paged_decode_on_cpu",
    # Triton kernels (backend "triton": checked when --backend names it, tox -e triton; under the interpreter
    # without a GPU)
    "impls.triton.triton_flash_records:triton_flash",
    "impls.triton.triton_flash_records:triton_flash_bottom_right",
    # the peers (backend "peers": checked only when --backend names them, tox -e peers)
    "impls.peers.flex:flex_eager",
    "impls.peers.flex:flex_compiled",
    "impls.peers.jax_nn:jax_dot_product_attention",
    "impls.peers.jax_nn:flax_linen_attention",
    "impls.peers.keras_numpy:keras_numpy_attention",
    "impls.peers.hf_attention:llama_eager",
    "impls.peers.hf_attention:gemma2_eager",
    "impls.peers.hf_attention:gpt_oss_eager",
    "impls.peers.hf_attention:hf_sdpa",
    # the sharded records: tox -e distributed (process groups of up to four ranks)
    "impls.distributed.distributed_records:ring",
    "impls.distributed.distributed_records:ring_zigzag",
    "impls.distributed.distributed_records:ulysses",
    "impls.distributed.distributed_records:ring_allgather",
    # torch's ring attention on the CPU, ring-flash-attention and yunchang: tox -e distributed-peers
    "impls.peers.torch_ring:torch_ring",
    "impls.peers.torch_ring:torch_ring_head_tail",
    "impls.peers.ring_flash_attn:ring_flash_attn_ring",
    "impls.peers.ring_flash_attn:ring_flash_attn_zigzag",
    "impls.peers.ring_flash_attn:ring_flash_attn_stripe",
    "impls.peers.yunchang_ulysses:yunchang_ulysses",
    # Triton peers: tox -e triton-peers
    "impls.peers.liger:liger_neighborhood_attention",
    "impls.peers.flash_attn_triton:flash_attn_triton",
    "impls.peers.xformers_splitk:xformers_splitk",
)


def is_builtin(impl: Impl) -> bool:
    """A record this project maintains (its declarations must all be caught under the `ci` profile)."""
    return impl.target in BUILTIN_TARGETS


def builtin_impls(backends: tuple[str, ...] = ()) -> tuple[list[Impl], list[Unavailable]]:
    """Every built-in record, split into those that can run here and those that cannot."""
    return load_targets(BUILTIN_TARGETS, backends)


def pytest_attention_builtin_targets() -> tuple[str, ...]:
    """The hook's answer (harness.hookspecs): the records a run without --impl checks. This module is a pytest
    plugin, registered by conftest.py in a checkout and by the package's entry point when installed."""
    return BUILTIN_TARGETS


def discover_records(package: str = "impls") -> list[str]:
    """The target of every record (a function carrying `attention_impl`'s name) defined in a module of
    `package` or its subpackages, where it is defined (not where it is imported). A module that needs a package
    not installed here (impls/triton's kernels need Triton) is passed over: records live in modules that import
    their packages only where they run, so they are found everywhere."""
    root = importlib.import_module(package)
    modules = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.partition(".")[0] == package.partition(".")[0]:
                raise
    return sorted(f"{module.__name__}:{attr}" for module in modules for attr, value in vars(module).items()
                  if callable(value) and hasattr(value, "attention_name")
                  and getattr(value, "__module__", None) == module.__name__)
