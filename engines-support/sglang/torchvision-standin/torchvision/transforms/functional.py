"""``torchvision.transforms.functional`` as far as start-up imports go."""

from __future__ import annotations

from torchvision._unavailable import module_getattr

__getattr__ = module_getattr(__name__)
