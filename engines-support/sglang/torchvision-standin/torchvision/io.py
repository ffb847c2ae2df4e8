"""``torchvision.io`` as far as start-up imports go."""

from __future__ import annotations

import enum

from torchvision._unavailable import module_getattr


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


__getattr__ = module_getattr(__name__)
