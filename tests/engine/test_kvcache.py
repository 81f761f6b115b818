"""Node KV that aliases the working buffer: never clobbered, and memory held once.

The unit tests drive a bare ``WorkingCache`` with fake nodes and, after each buffer
mutation, scribble noise over every column the cache may write again (``scribble``):
a view that should have been detached would then change. The end-to-end tests run the
real operations on the tiny models and compare every node's stored KV with a fresh
recompute of its tokens.
"""

from __future__ import annotations

import pytest
import torch

from loomterm.engine.kv.cache import KVBytes, WorkingCache, kv_bytes, resident_bytes, split_kv
from loomterm.tree import Node
from tests.helpers import REL_TOL, make_loom, relative_error

L, H, D = 2, 2, 4  # layers, KV heads, head dim of the bare caches
PROMPT = "The quick brown fox jumps over the lazy dog."


# -- a bare working cache ---------------------------------------------------------
def make_cache(max_len: int = 512, owners: bool = True) -> tuple[WorkingCache, list[Node]]:
    cache = WorkingCache(L, H, D, torch.float32, torch.device("cpu"), max_len)
    nodes: list[Node] = []
    if owners:
        cache.owners = lambda: nodes
    return cache, nodes


def feed(cache: WorkingCache, q: int, batch: int | None = None) -> None:
    """One forward pass of ``q`` random columns over every row, committed."""
    cache.prepare(q, batch)
    for layer in range(L):
        keys = torch.randn(cache.batch, H, q, D)  # (B, H, q, D)
        cache.write(layer, keys, torch.randn(cache.batch, H, q, D))
    cache.commit(q)


def scribble(cache: WorkingCache) -> None:
    """Overwrite whatever the cache may write again: columns from ``length`` on, and
    rows from ``batch`` on."""
    cache.buf[:, :, :, :, cache.length :] = torch.randn_like(cache.buf[:, :, :, :, cache.length :])
    cache.buf[:, :, cache.batch :] = torch.randn_like(cache.buf[:, :, cache.batch :])


def node(nodes: list[Node], kv: torch.Tensor | None) -> Node:
    item = Node(id=len(nodes) + 1, tokens=[0] * (0 if kv is None else kv.shape[3]))
    item.kv = kv
    nodes.append(item)
    return item


def snapshot(nodes: list[Node]) -> dict[int, torch.Tensor]:
    return {n.id: n.kv.clone() for n in nodes if n.kv is not None}


def assert_unchanged(nodes: list[Node], before: dict[int, torch.Tensor]) -> None:
    for item in nodes:
        if item.id in before:
            assert torch.equal(item.kv, before[item.id]), f"node {item.id}'s KV was clobbered"


def aliases(cache: WorkingCache, item: Node) -> bool:
    return item.kv.untyped_storage().data_ptr() == cache.buf.untyped_storage().data_ptr()


def test_columns_are_views_and_extend_widens_them():
    cache, nodes = make_cache()
    feed(cache, 10)
    a = node(nodes, cache.columns(0, 6))
    assert aliases(cache, a) and cache.region(a.kv) == (0, 0, 6)
    assert torch.equal(a.kv, cache.buf[:, :, 0, :, :6])
    feed(cache, 5)
    wider = cache.extend(a.kv, 6, 15)
    assert wider.untyped_storage().data_ptr() == cache.buf.untyped_storage().data_ptr()
    assert cache.region(wider) == (0, 0, 15) and wider.shape == (L, 2, H, 15, D)
    # Not contiguous with the new columns: concatenated, a storage of its own.
    joined = cache.extend(cache.columns(0, 4), 6, 10)
    assert cache.region(joined) is None and joined.shape[3] == 8
    assert torch.equal(
        joined, torch.cat([cache.buf[:, :, 0, :, :4], cache.buf[:, :, 0, :, 6:10]], 3)
    )
    assert torch.equal(cache.extend(None, 2, 5), cache.buf[:, :, 0, :, 2:5])


def test_without_owners_nothing_aliases():
    cache, nodes = make_cache(owners=False)
    feed(cache, 8)
    assert cache.region(cache.columns(0, 8)) is None
    assert cache.region(cache.extend(cache.columns(0, 4), 4, 8)) is None
    item = node(nodes, cache.columns(0, 8))
    cache.truncate(0)
    cache.load(item, 0, 8)
    assert cache.region(item.kv) is None  # no adoption the cache could not undo
    assert not cache.adopt(item, 0)


def test_columns_refuse_what_is_not_committed():
    cache, _ = make_cache()
    feed(cache, 8)
    with pytest.raises(ValueError, match="not committed"):
        cache.columns(4, 9)
    with pytest.raises(ValueError, match="not committed"):
        cache.columns(0, 4, row=1)


def test_truncate_detaches_whole_views_that_reach_the_cut():
    cache, nodes = make_cache()
    feed(cache, 20)
    a = node(nodes, cache.columns(0, 10))
    b = node(nodes, cache.columns(10, 20))
    head_kv, tail_kv = split_kv(cache.columns(0, 20), 8)  # a split node: two views
    head, tail = node(nodes, head_kv), node(nodes, tail_kv)
    before = snapshot(nodes)
    cache.truncate(15)
    assert aliases(cache, a) and aliases(cache, head)  # they end before the cut
    assert not aliases(cache, b) and not aliases(cache, tail)  # whole copies
    assert b.kv.shape[3] == 10 and tail.kv.shape[3] == 12 and b.kv.is_contiguous()
    scribble(cache)
    feed(cache, 5)
    assert_unchanged(nodes, before)
    cache.truncate(cache.length)  # nothing forgotten: nothing detached
    assert aliases(cache, a)


def test_growth_repoints_views_into_the_new_buffer():
    cache, nodes = make_cache(max_len=4096)
    feed(cache, 60)
    a = node(nodes, cache.columns(0, 30))
    b = node(nodes, cache.columns(30, 60))
    before = snapshot(nodes)
    old = cache.buf.untyped_storage().data_ptr()
    feed(cache, 100)  # past the capacity: reallocates
    assert cache.buf.untyped_storage().data_ptr() != old
    assert aliases(cache, a) and aliases(cache, b)
    assert cache.region(b.kv) == (0, 30, 60)
    assert_unchanged(nodes, before)
    assert kv_bytes(nodes) == cache.nbytes()  # the old buffer is no longer held


def test_fork_then_select_row_detaches_siblings_and_shrinks():
    cache, nodes = make_cache(max_len=4096)
    feed(cache, 40)
    prefix = node(nodes, cache.columns(0, 40))
    cache.fork(4, columns=40 + 12)
    assert cache.buf.shape[2] == 4 and cache.capacity == 52  # sized exactly
    for _ in range(12):
        feed(cache, 1)
    kids = [node(nodes, cache.columns(40, 52, row=r)) for r in range(4)]
    assert len({k.kv.untyped_storage().data_ptr() for k in kids}) == 1  # all in the buffer
    assert not torch.equal(kids[0].kv, kids[1].kv)
    before = snapshot(nodes)
    cache.select_row(0, cache.segments)
    assert cache.buf.shape[2] == 1 and cache.batch == 1
    assert cache.capacity == 64  # 52 rounded up to 16 columns
    assert aliases(cache, prefix) and aliases(cache, kids[0])
    assert not any(aliases(cache, k) for k in kids[1:])
    assert all(k.kv.shape[3] == 12 for k in kids)
    scribble(cache)
    assert_unchanged(nodes, before)
    memory = resident_bytes(nodes, cache)
    per_column = L * 2 * H * D * 4
    assert memory == KVBytes(nodes=3 * 12 * per_column, working=64 * per_column)
    assert memory.total == memory.nodes + memory.working
    # A second fork overwrites rows 1..: only row-0 views are kept as views.
    cache.fork(2)
    scribble(cache)
    assert_unchanged(nodes, before)


def test_select_row_other_than_zero_keeps_that_row():
    cache, nodes = make_cache()
    feed(cache, 16)
    prefix = node(nodes, cache.columns(0, 16))  # row 0, shared by every row
    cache.fork(3)
    feed(cache, 4)
    kids = [node(nodes, cache.columns(16, 20, row=r)) for r in range(3)]
    before = snapshot(nodes)
    cache.select_row(2, cache.segments)
    assert cache.buf.shape[2] == 1
    assert aliases(cache, prefix) and aliases(cache, kids[2])
    assert cache.region(kids[2].kv) == (0, 16, 20)
    assert not aliases(cache, kids[0]) and not aliases(cache, kids[1])
    scribble(cache)
    assert_unchanged(nodes, before)
    assert torch.equal(cache.buf[:, :, 0, :, 16:20], before[kids[2].id])


def test_fork_overwrites_rows_past_the_first():
    cache, nodes = make_cache()
    feed(cache, 8)
    cache.fork(3)
    feed(cache, 2)
    other = node(nodes, cache.columns(0, 10, row=1))
    mine = node(nodes, cache.columns(0, 10, row=0))
    before = snapshot(nodes)
    cache.fork(3)  # copies row 0 over rows 1..2
    assert not aliases(cache, other) and aliases(cache, mine)
    scribble(cache)
    assert_unchanged(nodes, before)


def test_dropping_rows_detaches_their_views():
    cache, nodes = make_cache()
    feed(cache, 8)
    cache.fork(3)
    feed(cache, 2)
    last = node(nodes, cache.columns(8, 10, row=2))
    first = node(nodes, cache.columns(0, 10, row=0))
    before = snapshot(nodes)
    cache.prepare(1, batch=2)
    assert not aliases(cache, last) and aliases(cache, first)
    scribble(cache)
    assert_unchanged(nodes, before)


def test_forget_columns_detaches_what_moves():
    cache, nodes = make_cache()
    feed(cache, 30)
    keep = node(nodes, cache.columns(0, 8))
    moved = node(nodes, cache.columns(8, 30))
    before = snapshot(nodes)
    cache.forget_columns(8, 10)
    assert cache.length == 20
    assert aliases(cache, keep) and not aliases(cache, moved)
    cache.buf[:, :, :, :, 8:] = torch.randn_like(cache.buf[:, :, :, :, 8:])  # the shift
    assert_unchanged(nodes, before)


def test_load_adopts_a_whole_copy_only():
    cache, nodes = make_cache()
    whole = node(nodes, torch.randn(L, 2, H, 6, D))
    part = node(nodes, torch.randn(L, 2, H, 6, D))
    before = snapshot(nodes)
    cache.load(whole, 0, 6)
    assert aliases(cache, whole) and cache.region(whole.kv) == (0, 0, 6)
    cache.load(part, 0, 5)  # its last column is left to compute
    assert not aliases(cache, part)
    assert_unchanged(nodes, before)
    feed(cache, 1)
    assert cache.adopt(part, 6)  # the caller vouches for the columns
    assert cache.region(part.kv) == (0, 6, 12)
    assert not cache.adopt(part, 6)  # already a view
    assert not cache.adopt(node(nodes, torch.randn(L, 2, H, 6, D)), 8)  # not committed


def test_an_alias_of_unknown_layout_is_always_detached():
    cache, nodes = make_cache()
    feed(cache, 12)
    odd = node(nodes, cache.buf[:, :, 0, :, :4, :2])  # half the head dim
    plain = node(nodes, cache.columns(0, 4))
    assert cache.region(odd.kv)[0] == -1
    before = snapshot(nodes)
    cache.truncate(10)  # far past both
    assert not aliases(cache, odd) and aliases(cache, plain)
    assert_unchanged(nodes, before)


def test_resident_bytes_count_each_storage_once():
    cache, nodes = make_cache()
    feed(cache, 10)
    node(nodes, cache.columns(0, 5))
    node(nodes, cache.columns(5, 10))
    own = node(nodes, torch.zeros(L, 2, H, 3, D))
    head, tail = split_kv(own.kv, 1)
    own.kv = tail
    node(nodes, head)
    node(nodes, None)
    memory = resident_bytes(nodes, cache)
    assert memory.nodes == own.kv.untyped_storage().nbytes()
    assert memory.working == cache.nbytes()
    assert kv_bytes(nodes) == memory.total
    assert resident_bytes(nodes, None) == KVBytes(kv_bytes(nodes), 0)


# -- the loom -----------------------------------------------------------------------
def assert_node_kv_exact(loom, approx: bool = False) -> int:
    """Every node's stored KV equals a fresh recompute of its path's tokens (nodes on an
    approximate path too when ``approx``). Returns how many were checked."""
    checked = 0
    for item in list(loom.tree.nodes.values()):
        kv = item.kv
        if kv is None or kv.shape[3] == 0 or (not approx and not loom.is_exact(item)):
            continue
        tokens = loom.tokens(item)[: item.start + kv.shape[3]]
        fresh = loom.runner.fresh_kv(tokens, 0)[:, :, :, item.start :]  # (L, 2, H, T, D)
        err = relative_error(kv, fresh)
        assert err < REL_TOL, f"{item}: stored KV differs from a recompute by {err:.1e}"
        checked += 1
    return checked


def test_node_kv_stays_exact_through_every_operation(loom):
    prompt = loom.append(loom.root, PROMPT * 2)
    assert_node_kv_exact(loom)
    kids = loom.generate(prompt, 8, n=8, temperature=1.0, seed=3)
    assert_node_kv_exact(loom)
    loom.next_logits(kids[5])  # another branch
    assert_node_kv_exact(loom)
    cut = loom.truncate(kids[5], prompt.end + 3)  # splits kids[5]
    loom.next_logits(cut)
    assert_node_kv_exact(loom)
    loom.generate(cut, 6, temperature=1.0, seed=1)  # one continuation: drafted decoding
    assert_node_kv_exact(loom)
    loom.next_logits(kids[0])
    assert_node_kv_exact(loom)
    fast = loom.splice(kids[5], 2, 3, " red")  # fast on RoPE, exact otherwise
    assert_node_kv_exact(loom)
    exact = loom.splice(kids[2], 4, 6, " slow", exact=True)
    assert_node_kv_exact(loom)
    loom.append(exact, " And so on.")
    loom.generate(fast, 5, n=3, temperature=1.0, seed=2)
    loom.truncate(prompt, 5)
    loom.next_logits(kids[1])
    assert assert_node_kv_exact(loom) >= 8


@pytest.mark.parametrize("n", [1, 3])
def test_node_kv_stays_exact_through_a_context_shift(family, tiny_llama_dir, tiny_gpt2_dir, n):
    folder = tiny_llama_dir if family == "llama" else tiny_gpt2_dir
    loom = make_loom(folder, n_ctx=32)
    node = loom.append(loom.root, "Once upon a time, in a land far away,")
    kids = loom.generate(node, 40, n=n, temperature=1.0, seed=4)
    assert all(kid.end > loom.n_ctx for kid in kids)
    # No splice here: whatever KV a node stored was computed at its path positions, so
    # it is exact even where the window made the node approximate.
    assert assert_node_kv_exact(loom, approx=True) >= 1
    short = loom.truncate(kids[-1], node.end + 4)
    loom.next_logits(short)
    assert_node_kv_exact(loom, approx=True)


@pytest.mark.parametrize("n", [1, 4, 8])
def test_resident_kv_after_siblings_is_near_the_ideal(llama_loom, n):
    from loomterm.bench import corpus_text

    loom = llama_loom
    loom.update_settings(drafting="off")
    prompt = loom.append_tokens(loom.root, loom.encode(corpus_text())[:256])
    assert prompt.end == 256
    kids = loom.generate(prompt, 48, n=n, temperature=1.0, seed=n)
    per_token = prompt.kv[:, :, :, :1].numel() * prompt.kv.element_size()
    ideal = per_token * (prompt.end + sum(len(kid.tokens) for kid in kids))
    memory = resident_bytes(loom.tree.nodes.values(), loom.runner.work)
    assert memory.total <= 1.1 * ideal, f"{memory} for an ideal of {ideal} bytes"
    assert loom.runner.work.buf.shape[2] == 1  # the batch rows are gone
    loom.next_logits(kids[-1])  # moving to a sibling holds it once too
    memory = resident_bytes(loom.tree.nodes.values(), loom.runner.work)
    assert memory.total <= 1.1 * ideal, f"{memory} after moving, for an ideal of {ideal}"
