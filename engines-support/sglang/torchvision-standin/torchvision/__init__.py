"""kvroute's stand-in for ``torchvision`` next to CPU torch: importable, computes nothing.

PyPI's torchvision wheels are built against CUDA torch and fail to import next to the
CPU build (``operator torchvision::nms does not exist``). SGLang and transformers import
``torchvision.transforms`` / ``torchvision.io`` names at start-up for image processors,
which serving a text model never runs. Those names exist here; calling one raises
``NotImplementedError``.
"""

from __future__ import annotations

from torchvision import io, transforms
from torchvision._unavailable import module_getattr

__version__ = "0.0.0+kvroute.standin"
__all__ = ["io", "transforms"]

__getattr__ = module_getattr(__name__)
