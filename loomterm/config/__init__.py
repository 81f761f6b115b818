"""Configuration: settings and their specs, presets, folders, the injected context's
shapes, the CPU build target, the key map file.

Headless: no textual, no rich.
"""
