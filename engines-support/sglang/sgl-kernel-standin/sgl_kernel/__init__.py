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


# The names sglang 0.5.23 imports at start-up on CPU (kernels/ops/kvcache/cache_move.py,
# mem_cache/allocation.py, speculative/): one KV copy for HiCache, the rest speculative
# decoding's; plain serving calls none of them.
copy_all_layer_kv_cache_cpu = _not_available("copy_all_layer_kv_cache_cpu")
assign_req_to_token_pool_cpu = _not_available("assign_req_to_token_pool_cpu")
build_tree_kernel_efficient_cpu = _not_available("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = _not_available("verify_tree_greedy_cpu")
assign_draft_cache_locs_contiguous_cpu = _not_available("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _not_available("assign_extend_cache_locs_cpu")
fill_accept_out_cache_loc_cpu = _not_available("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _not_available("fill_bonus_tokens_cpu")
