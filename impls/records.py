"""The built-in records: every implementation this project maintains, kept apart from the protocol that reads
them (impls.registry), as PyTorch keeps op_db apart from OpInfo. Adding a record is adding its target here
(tests/test_expectation_rows.py fails for a record defined in impls/ and missing from the list); its known
defects are its rows in impls/expectations.toml."""

from __future__ import annotations

import importlib
import pkgutil

from impls.registry import Impl, Unavailable, load_impl

BUILTIN_TARGETS = (
    "impls.numpy_reference:reference_attention",
    "impls.numpy_tiled:tiled_attention",
    "impls.numpy_paged:paged_attention",
    "impls.numpy_split_kv:split_kv_attention",
    "impls.seed000_exp_ratio:exp_ratio_attention",
    "impls.seed000_three_line:three_line_attention",
    "impls.seed001_multihead:seed_multi_head_attention",
    "impls.seed002_tiled:memory_optimized_tiled_attention",
    "impls.seed002_tiled:hardware_aware_attention",
    "impls.torch_sdpa:sdpa_math",
    "impls.torch_sdpa:sdpa_flash_cpu",
    "impls.torch_mha:multihead_attention_module",
    "impls.torch_flash_records:flash_tiled",
    "impls.torch_flash_records:flash_tiled_bottom_right",
    "impls.torch_flash_records:unfused_attention",
    "impls.torch_sdpa_cuda:sdpa_cuda_flash",
    "impls.torch_sdpa_cuda:sdpa_cuda_efficient",
    "impls.torch_sdpa_cuda:sdpa_cuda_cudnn",
    "impls.cuda_seed002_kernels:naive_kernel_on_device",
    "impls.cuda_seed002_kernels:naive_kernel_on_cpu",
    "impls.cuda_seed002_kernels:shared_memory_kernel_on_device",
    "impls.cuda_seed002_kernels:shared_memory_kernel_on_cpu",
    "impls.cuda_flash_simt:flash_simt_on_device",
    "impls.cuda_flash_simt:flash_simt_on_cpu",
    "impls.cuda_flash_simt:flash_simt_bottom_right_on_device",
    "impls.cuda_flash_simt:flash_simt_bottom_right_on_cpu",
    "impls.cuda_flash_wmma:flash_wmma_on_device",
    "impls.cuda_flash_wmma:flash_wmma_on_cpu",
    "impls.cuda_paged_decode:paged_decode_on_device",
    "impls.cuda_paged_decode:paged_decode_on_cpu",
)


def is_builtin(impl: Impl) -> bool:
    """A record this project maintains (its declarations must all be caught under the `ci` profile)."""
    return impl.target in BUILTIN_TARGETS


def builtin_impls(backends: tuple[str, ...] = ()) -> tuple[list[Impl], list[Unavailable]]:
    """Every built-in record, split into those that can run here and those that cannot."""
    ready: list[Impl] = []
    missing: list[Unavailable] = []
    for target in BUILTIN_TARGETS:
        try:
            impl = load_impl(target)
        except ImportError as exc:
            missing.append(Unavailable(target, f"{exc.name or exc} is not installed"))
            continue
        if backends and impl.backend not in backends:
            continue
        if impl.unavailable:
            missing.append(Unavailable(target, impl.unavailable))
        else:
            ready.append(impl)
    return ready, missing


def discover_records(package: str = "impls") -> list[str]:
    """The target of every record (a function carrying `attention_impl`'s name) defined in a module of
    `package` or its subpackages, where it is defined (not where it is imported)."""
    root = importlib.import_module(package)
    modules = [root] + [importlib.import_module(info.name)
                        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}.")]
    return sorted(f"{module.__name__}:{attr}" for module in modules for attr, value in vars(module).items()
                  if callable(value) and hasattr(value, "attention_name")
                  and getattr(value, "__module__", None) == module.__name__)
