"""An implementation's own block sizes: the defaults of the keywords it names in Capabilities.tile_keywords, where
its kernels switch tiles (seed 000 § Flash Attention: any block sizes give the global result)."""

from __future__ import annotations

import inspect


def default_block_sizes(variant) -> dict[str, int]:
    params = inspect.signature(variant.impl.fn).parameters
    return {kw: params[kw].default for kw in variant.capabilities.tile_keywords
            if kw in params and isinstance(params[kw].default, int)}
