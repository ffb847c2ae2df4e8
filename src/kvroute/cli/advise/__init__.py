"""``kvroute advise``: the command (``command``) and the ``--out`` directory it writes
(``output``)."""
