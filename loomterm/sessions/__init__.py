"""Sessions: a Loom recorded in a file, opened, recorded as it changes, and closed.

Headless: never imports the editor (``loomterm.tui``).
"""
