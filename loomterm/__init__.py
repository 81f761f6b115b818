"""loomterm: a terminal loom for language-model output, on a tree of cached KV branches."""

__version__ = "0.1.0"


def open(path, **options):  # noqa: A001 - loomterm.open reads like open()
    """Open a saved session: ``loomterm.open("story.loom").loom`` is its live Loom.
    Options as :meth:`loomterm.session.Session.open`."""
    from loomterm.session import Session

    return Session.open(path, **options)


def save(loom, path, kv_snapshot: bool = False):
    """Record ``loom`` in a session file at ``path`` (:meth:`Session.create`)."""
    from loomterm.session import Session

    return Session.create(loom, path, kv_snapshot=kv_snapshot)
