"""Which CPU a llama.cpp build is compiled for, and the folder name that says so.

A build compiled with ``-march=native`` (ggml's default) runs only on CPUs with the
builder's instruction sets, and a cache folder outlives the machine it was built on: a
CI cache or a home folder moved to another CPU then crashes inside ggml on the first
decode. On x86-64 Linux the build therefore names its instruction sets itself, read from
``/proc/cpuinfo``, with ``GGML_NATIVE=OFF``; the folder's name is a digest of those
options, so a CPU with other instruction sets gets its own build and a CPU with the same
ones shares it. Elsewhere (ARM, macOS, Windows) the build stays native and the digest
covers what the system says of its CPU.

AMX (Intel's tile instructions, Sapphire Rapids on) is always left out: on such a
machine here a native build crashed in ``ggml_backend_amx_mul_mat`` on the first decode
(seen with gdb, both in llama-server and in the binding), and the AVX-512 VNNI kernels
serve those CPUs.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
X86_MACHINES = frozenset({"x86_64", "amd64", "x64"})  # 64-bit: ggml's x86-64 options
X86_ANY = X86_MACHINES | {"i386", "i686", "x86"}  # and 32-bit: oneDNN runs on both
AVX512_BASE = ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")
# ggml's cmake option for an instruction set: the /proc/cpuinfo flags it needs.
X86_OPTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", AVX512_BASE),
    ("GGML_AVX512_VBMI", (*AVX512_BASE, "avx512vbmi")),
    ("GGML_AVX512_VNNI", (*AVX512_BASE, "avx512_vnni")),
    ("GGML_AVX512_BF16", (*AVX512_BASE, "avx512_bf16")),
)
LEFT_OUT = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in a ``/proc/cpuinfo`` text (x86's
    ``flags``, ARM's ``Features``); empty when it has neither."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cmake_options(machine: str, flags: frozenset[str]) -> tuple[str, ...]:
    """ggml's instruction-set options for a CPU: explicit on x86-64 with known flags
    (each set on or off, AMX off), else a native build."""
    if machine.lower() not in X86_MACHINES or not flags:
        return ("-DGGML_NATIVE=ON",)
    options = ["-DGGML_NATIVE=OFF"]
    for option, needs in X86_OPTIONS:
        options.append(f"-D{option}={'ON' if flags.issuperset(needs) else 'OFF'}")
    options += [f"-D{option}=OFF" for option in LEFT_OUT]
    return tuple(options)


def build_name(machine: str, flags: frozenset[str], described: str = "") -> str:
    """The build folder's name: the machine and a digest of what the build is compiled
    for (a native build: of the CPU's own flags or description too)."""
    options = cmake_options(machine, flags)
    identity = list(options)
    if options == ("-DGGML_NATIVE=ON",):
        identity += sorted(flags) or [described]
    digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:12]
    return f"{machine.lower() or 'cpu'}-{digest}"


@functools.cache
def this_cpu() -> tuple[str, frozenset[str], str]:
    """(machine, flags, description) of the CPU this process runs on (read once:
    ``/proc/cpuinfo`` of a many-core machine is long)."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        text = ""
    return platform.machine(), cpu_flags(text), platform.processor()


def this_cpu_options() -> tuple[str, ...]:
    """ggml's instruction-set options for this CPU."""
    machine, flags, _described = this_cpu()
    return cmake_options(machine, flags)


def this_build_name() -> str:
    """The build folder's name for this CPU."""
    return build_name(*this_cpu())
