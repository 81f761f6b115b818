"""Loading a model: ``load`` (a folder, a ``.gguf`` file, a name or the default),
``default`` (the default model, fetched and converted once), ``gguf`` (a GGUF file to
a float32 folder) and ``fingerprint`` (what identifies a model's files).
"""
