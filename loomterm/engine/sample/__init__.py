"""Sampling as pure functions of logits: what is asked (``params``), the chain
(``chain``), logit bias, penalties and DRY (``penalties``), truncation and temperature
(``truncation``), and the penalties' token history (``history``).
"""
