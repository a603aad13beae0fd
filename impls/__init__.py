"""Implementations under test, one declarative record each (see impls.registry).

`from impls import flash_attention, flash_attn_func` gives the project's FlashAttention (impls.torch_flash);
torch is imported only then, so `import impls` works where torch is not installed.
"""

_FLASH_FACES = ("flash_attention", "flash_attn_func")


def __getattr__(name: str):
    if name in _FLASH_FACES:
        from impls import torch_flash

        return getattr(torch_flash, name)
    raise AttributeError(f"module 'impls' has no attribute {name!r}")
