"""``kvroute analyze`` and ``kvroute sample``: the commands (``command``), the cache
breakers' options and kept prompts (``breakers``), class labels (``labels``) and the KV
pool from ``--capacity-tokens`` or ``--model``/``--gpu`` (``pool``)."""
