"""``kvroute predict``: the command (``command``) and the live-engine run its
``--validate`` and ``kvroute calibrate`` share (``live``)."""
