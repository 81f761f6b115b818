"""The fast paths of a forward pass: the one-token decode ``step`` and its CUDA graph,
``fused`` and ``quant`` products, oneDNN float32 ``cpu_linear``, and ``attention`` over
the working cache's views.
"""
