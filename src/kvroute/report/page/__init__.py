"""The HTML page every report is: a block model, its stylesheet and text escaping,
rendered to one self-contained file (no network, no JavaScript)."""
