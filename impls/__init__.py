"""Implementations under test, one declarative record each (CONTRACT 1: protocol), by kind: numpy/ (the
reference, tiled, paged, split-KV), torch/ (SDPA per backend, nn.MultiheadAttention, the project's FlashAttention),
cuda/ (the kernels, their Python faces, the runtime that runs them on a GPU or on this CPU), seeds/ (the seeds'
code as written and its records). impls.records lists the built-in records, impls/expectations.toml holds
their expected failures (registered with the protocol on import).

`from impls import flash_attention, flash_attn_func` gives the project's FlashAttention (impls.torch.torch_flash);
torch is imported only then, so `import impls` works where torch is not installed.
"""

from pathlib import Path

from protocol.expectations import register_table

TABLE_PATH = Path(__file__).with_name("expectations.toml")  # the built-in records' expected failures
register_table(TABLE_PATH)

_FLASH_FACES = ("flash_attention", "flash_attn_func")


def __getattr__(name: str):
    if name in _FLASH_FACES:
        from impls.torch import torch_flash

        return getattr(torch_flash, name)
    raise AttributeError(f"module 'impls' has no attribute {name!r}")
