"""``loomterm bench --model URL``: the rows that apply to a server, each a ratio measured
in one run against a direct request to the same server.

- Edit latency: an operation (truncate, branch switch, pick, exact splice, append 10)
  until the first new token, against the same token path sent with the server's prefix
  cache off (llama-server ``cache_prompt: false``; vLLM a fresh ``cache_salt``). Each row
  notes how many prompt tokens the server evaluated on both sides (llama-server's
  ``timings.prompt_n``; vLLM's ``prompt_tokens - cached_tokens``): the proof that only
  what changed was computed.
- Decode: greedy tokens per second through the Loom against a direct streaming request
  for the same tokens (the Loom's overhead over a plain client).
- Siblings: N sampled continuations in one generation against N sequential ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from loomterm.bench import corpus_text
from loomterm.bench.report import Row, ratio, speedup
from loomterm.bench.timing import median
from loomterm.engine import Loom, Node
from loomterm.engine.remote.runner import RemoteRunner

LATENCY = "Edit latency (server)"
LATENCY_NOTE = (
    "time until the first new token; baseline: the same path with the server's prefix "
    "cache off [prompt tokens the server evaluated: baseline / loomterm]"
)
DECODE = "Decode (server)"
DECODE_NOTE = "greedy, prompt cached; baseline: a direct streaming request for the same tokens"
SIBLINGS = "Siblings (server)"
SIBLINGS_NOTE = "N sampled continuations in one generation; baseline: N sequential generations"
NOTES = {LATENCY: LATENCY_NOTE, DECODE: DECODE_NOTE, SIBLINGS: SIBLINGS_NOTE}
TAIL = 32


@dataclass(frozen=True)
class RemotePlan:
    lengths: tuple[int, ...] = (256, 1000)
    reps: int = 3
    decode_tokens: int = 64
    sibling_tokens: int = 16
    sibling_counts: tuple[int, ...] = (4,)

    @classmethod
    def quick(cls) -> RemotePlan:
        return cls(lengths=(256,), reps=2, decode_tokens=24, sibling_tokens=8)


def run_remote_bench(loom: Loom, plan: RemotePlan, log: Callable[[str], None]) -> list[Row]:
    runner = loom.runner
    assert isinstance(runner, RemoteRunner)
    corpus = loom.encode(corpus_text())
    room = runner.n_ctx - 16  # leave room for the new token and the appended ones
    rows: list[Row] = []
    for length in plan.lengths:
        if length > room:
            log(f"skipping {length} tokens: the server's context is {runner.n_ctx}")
            continue
        log(f"edit latency at {length} tokens")
        rows += _latency_at(loom, corpus, length, plan.reps)
    prompt = corpus[:64]
    log("decode")
    rows += _decode(loom, prompt, plan.decode_tokens, plan.reps)
    log("siblings")
    rows += _siblings(loom, prompt, plan.sibling_tokens, plan.sibling_counts, plan.reps)
    return rows


def _first_token(loom: Loom, node: Node) -> None:
    """One greedy token after ``node``."""
    loom.generate(node, 1, temperature=0)


def _evaluated_since(runner: RemoteRunner, mark: int) -> int | None:
    """Prompt tokens the server evaluated for every request after the ``mark``-th
    (an edit's warm-up and the generation both count)."""
    counts = [e.prompt_n for e in runner.exchanges[mark:]]
    return None if not counts or None in counts else sum(counts)


def _latency_at(loom: Loom, corpus: list[int], length: int, reps: int) -> list[Row]:
    runner: RemoteRunner = loom.runner
    prefix = loom.append_tokens(loom.root, corpus[: length - TAIL])
    main = loom.append_tokens(prefix, corpus[length - TAIL : length])
    other = loom.append_tokens(prefix, corpus[-TAIL:])
    middle = length // 2

    # Real alternatives for the picks, read off the server before the clock starts.
    picks = []
    for r in range(reps):
        position = length - 4 - r
        [kid] = loom.generate(loom.truncate(main, position), 1, temperature=0)
        choice = next(t for t, _ in kid.top[0] if t != loom.tokens(main)[position])
        picks.append((position, choice))

    def replacement(position: int) -> list[int]:
        token = corpus[(position * 7 + 11) % len(corpus)]
        return [token if token != loom.tokens(main)[position] else (token + 1) % runner.vocab_size]

    ops: list[tuple[str, Callable[[int], Node]]] = [
        ("truncate", lambda r: loom.truncate(main, length - 8 - r)),
        ("branch switch to a cached sibling", lambda r: other),
        ("alternative pick", lambda r: loom.pick(main, *picks[r])),
        (
            "exact splice mid",
            lambda r: loom.splice_tokens(
                main, middle + r, middle + r + 1, replacement(middle + r), exact=True
            ),
        ),
        ("append 10 tokens", lambda r: loom.append_tokens(main, corpus[97 * (r + 1) :][:10])),
    ]
    rows = []
    for name, run in ops:
        times, evaluated, base_times, base_evaluated = [], [], [], []
        for r in range(reps):  # each repetition: loomterm, then the baseline on its path
            _first_token(loom, main)  # the server's cache holds the document, as after typing
            mark = len(runner.exchanges)
            start = time.perf_counter()
            node = run(r)
            _first_token(loom, node)
            times.append(time.perf_counter() - start)
            evaluated.append(_evaluated_since(runner, mark))
            seconds, prompt_n = _direct_first_token(runner, loom.tokens(node))
            base_times.append(seconds)
            base_evaluated.append(prompt_n)
        mine, theirs = _median_count(evaluated), _median_count(base_evaluated)
        rows.append(
            Row(
                LATENCY,
                f"{name} @{length}",
                median(base_times) * 1000,
                median(times) * 1000,
                "ms",
                speedup(median(base_times), median(times)),
                note=f"{_n(theirs)} / {_n(mine)} tokens",
                extra={"prompt_n_baseline": theirs, "prompt_n_loomterm": mine},
            )
        )
    return rows


def _median_count(values: list[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median(known) if known else None


def _n(value) -> str:
    return "?" if value is None else f"{value:g}"


def _direct_first_token(runner: RemoteRunner, tokens: list[int]) -> tuple[float, int | None]:
    """A direct request for one token after ``tokens``, the server's cache off."""
    dialect = runner.dialect
    from loomterm.engine.sample.chain import SamplingParams

    path, body = dialect.completion(tokens, 1, SamplingParams(temperature=0), None, 1, cache=False)
    body["stream"] = False
    body.pop("stream_options", None)
    start = time.perf_counter()
    reply = runner.client.post(path, body)
    seconds = time.perf_counter() - start
    return seconds, _prompt_n(reply)


def _prompt_n(reply: dict) -> int | None:
    timings = reply.get("timings") or {}
    if "prompt_n" in timings:
        return int(timings["prompt_n"])
    usage = reply.get("usage") or {}
    if "prompt_tokens" in usage:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return int(usage["prompt_tokens"]) - int(cached)
    return None


def _decode(loom: Loom, prompt: list[int], count: int, reps: int) -> list[Row]:
    runner: RemoteRunner = loom.runner
    node = loom.append_tokens(loom.root, prompt)
    loom.generate(node, 1, temperature=0)  # both sides start from a cached prompt
    mine, theirs, same = [], [], True
    for _ in range(reps):  # alternating, so a busy machine slows both sides alike
        start = time.perf_counter()
        [kid] = loom.generate(node, count, temperature=0)
        mine.append(len(kid.tokens) / (time.perf_counter() - start))
        base_tokens, base_seconds = _direct_stream(runner, prompt, count)
        theirs.append(len(base_tokens) / base_seconds)
        same = same and base_tokens == kid.tokens
    return [
        Row(
            DECODE,
            f"{count} new tokens",
            median(theirs),
            median(mine),
            "tok/s",
            ratio(median(mine), median(theirs)),
            note="identical tokens" if same else "tokens differ",
        )
    ]


def _direct_stream(runner: RemoteRunner, tokens: list[int], count: int) -> tuple[list[int], float]:
    """Greedy tokens by a plain streaming request, and its wall time."""
    from loomterm.engine.sample.chain import SamplingParams

    path, body = runner.dialect.completion(tokens, count, SamplingParams(temperature=0), None, 1)
    got: list[int] = []
    start = time.perf_counter()
    headers = dict(runner.client.http.headers)
    with httpx.stream("POST", runner.url + path, json=body, headers=headers, timeout=120) as reply:
        for line in reply.iter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                tokens_, _ = runner.dialect.read(json.loads(line[5:]))
                got += [t.id for t in tokens_]
    return got, time.perf_counter() - start


def _siblings(
    loom: Loom, prompt: list[int], count: int, widths: tuple[int, ...], reps: int
) -> list[Row]:
    node = loom.append_tokens(loom.root, prompt)
    loom.generate(node, 1, temperature=0)
    rows = []
    for n in widths:
        mine, theirs = [], []
        for _ in range(reps):
            start = time.perf_counter()
            kids = loom.generate(node, count, n=n, temperature=1.0)
            mine.append(sum(len(k.tokens) for k in kids) / (time.perf_counter() - start))
            start = time.perf_counter()
            made = sum(len(loom.generate(node, count, temperature=1.0)[0].tokens) for _ in range(n))
            theirs.append(made / (time.perf_counter() - start))
        rows.append(
            Row(
                SIBLINGS,
                f"N={n}",
                median(theirs),
                median(mine),
                "tok/s",
                ratio(median(mine), median(theirs)),
            )
        )
    return rows
