"""Sampling as pure functions of logits: the chain and its parameters (``chain``),
logit bias, penalties and DRY (``sample.penalties``), truncation and temperature
(``sample.truncation``).
"""
