"""The command-line tools behind the console scripts and the top-level train.py / decode.py.

Each module defines its flags in `define_flags()` and exposes `run()`; nothing is registered at import, so
importing every fastmt module together never defines a flag twice.
"""
