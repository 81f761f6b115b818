"""Serving engines loomterm can start for itself (today: llama.cpp's ``llama-server``).

loomterm is a client of serving engines (``loomterm.engine.remote``); this package only
builds and starts one locally, for the tests and for users who want a server without
installing one. Standard library (and ``filelock``) only: no torch, no engine.
"""
