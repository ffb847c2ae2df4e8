"""kvroute's stand-in for ``sgl_kernel`` on CPU: importable, registers no ops.

SGLang's CPU layers call sgl-kernel only when ``torch.ops.sgl_kernel.convert_weight_packed``
exists. Nothing here registers a ``torch.ops.sgl_kernel`` op, so SGLang takes its
plain-torch layers. The server still imports the names below at start-up; plain serving
(no speculative decoding, no HiCache) never calls them, and if something does, it fails
with an error naming the kernel instead of computing something wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

__version__ = "0.0.0+kvroute.standin"


def _not_available(name: str) -> Callable[..., NoReturn]:
    def kernel(*args: object, **kwargs: object) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not available: this is kvroute's CPU stand-in for "
            "sgl-kernel, which has no kernels (serve without speculative decoding)"
        )

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


# Imported at start-up on CPU by sglang 0.5.23 (kernels/ops/kvcache, speculative/).
NAMES = ("copy_all_layer_kv_cache_cpu",)

copy_all_layer_kv_cache_cpu = _not_available("copy_all_layer_kv_cache_cpu")
