"""``torchvision.transforms`` as far as start-up imports go."""

from __future__ import annotations

import enum

from torchvision._unavailable import module_getattr


class InterpolationMode(enum.Enum):
    """The interpolation names image processors use as defaults at import time."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


__getattr__ = module_getattr(__name__)
