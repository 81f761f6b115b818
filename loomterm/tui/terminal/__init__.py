"""loomterm's own terminal input: the key-sequence tables (``keytable``, ``kitty_keys``), sequences to
keys (``keys``), the input parser (``parser``) and the Linux driver that reads with it
(``driver``). Built on Textual's public events and driver only, so Textual's private
input parser can change under it without breaking loomterm."""
