"""Prefix-cache models of llama.cpp, vLLM and SGLang, and their replay on a trace.

Pure and synchronous: no clock, no randomness that is not passed in. ``base`` holds the
interface every model implements; ``models/`` holds one model per engine, each with the
parts only it uses and its own invariant check; ``registry`` lists the models;
``replay/`` runs one model over a trace in time; ``simulate`` runs several models (and
capacities) and gathers a versioned result.
"""
