"""CPU threads for the local backends, chosen so that decoding survives a busy CPU.

A decode step on the CPU splits each matrix product over the threads and waits for the
slowest one. When another process takes one of the cores, the thread that shares it
with that process runs a slice at a time, and every step waits for it: measured on a
2-core machine with the default model, torch's default (a thread per core) decoded
30.9 tok/s quiet and 8.7 tok/s with one busy process beside it (0.28x), one thread
25.8 and 24.7 (0.96x). So the default leaves one core to the rest of the machine: one
thread per physical core this process may run on, less one (``default_threads``; at
least one). ``--threads`` (``RunnerOptions.threads``) overrides it, and so does
``OMP_NUM_THREADS`` for torch.

Waiting threads sleep rather than spin (``OMP_WAIT_POLICY=PASSIVE``, set by
``passive_wait`` before torch starts its OpenMP pool, unless the user set it): a spinning
pool takes the core another process (or the editor's own UI thread) needs.
"""

from __future__ import annotations

import os
from pathlib import Path

WAIT_ENV = "OMP_WAIT_POLICY"
THREADS_ENV = "OMP_NUM_THREADS"
_chosen: dict[str, int] = {}  # backend -> threads last set (torch's is process-wide)


def passive_wait() -> None:
    """Make OpenMP's waiting threads sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the user
    chose a policy. Only has an effect before torch is imported (OpenMP reads it once)."""
    os.environ.setdefault(WAIT_ENV, "PASSIVE")


def usable_cpus() -> list[int]:
    """The logical CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Physical cores among ``usable_cpus`` (two hyper-threads of one core count once);
    the logical count where the topology cannot be read."""
    cpus = usable_cpus()
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return max(1, len(cpus))
        cores.add((package, core))
    return max(1, len(cores))


def default_threads(backend: str = "torch") -> int:
    """Threads for ``backend`` when none are given: physical cores less one, at least
    one (see the module docstring). For torch, ``OMP_NUM_THREADS`` when the user set it."""
    if backend == "torch":
        given = os.environ.get(THREADS_ENV, "").strip()
        if given.isdigit() and int(given) > 0:
            return int(given)
    return max(1, physical_cores() - 1)


def use_threads(backend: str, threads: int | None) -> int:
    """Set the threads of ``backend`` (``threads``, or ``default_threads``) and return
    them. torch's are process-wide (``torch.set_num_threads``); llama.cpp takes them per
    context (the caller passes them on)."""
    count = threads or default_threads(backend)
    if backend == "torch":
        import torch

        if torch.get_num_threads() != count:
            torch.set_num_threads(count)
    _chosen[backend] = count
    return count


def threads_of(backend: str) -> int | None:
    """The threads ``use_threads`` last set for ``backend`` (None: never set here)."""
    return _chosen.get(backend)
