"""The llama.cpp build is compiled for the CPU it runs on and kept in a folder named for
it: a cache moved to another CPU (a CI cache, a home folder) builds again instead of
crashing in ggml, and AMX is never compiled in."""

from __future__ import annotations

from loomterm.config import locations
from loomterm.config.cpu_target import build_name, cmake_options, cpu_flags, this_build_name

BASE = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2"
AVX512 = "avx512f avx512cd avx512vl avx512dq avx512bw avx512_vnni avx512_bf16 avx512vbmi"
ZEN4 = frozenset(f"{BASE} {AVX512} avx512ifma avx512_vbmi2 avx512_bitalg".split())
SAPPHIRE_RAPIDS = frozenset(f"{BASE} {AVX512} avx_vnni amx_tile amx_int8 amx_bf16".split())
HASWELL = frozenset(BASE.split())


def options(flags: frozenset[str]) -> dict[str, str]:
    return dict(option.removeprefix("-D").split("=") for option in cmake_options("x86_64", flags))


def test_the_flags_of_the_first_processor_are_read_on_x86_and_arm():
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f\n\nflags : sse\n"
    assert cpu_flags(x86) == {"fpu", "avx2", "avx512f"}
    assert cpu_flags("processor\t: 0\nFeatures\t: fp asimd sve\n") == {"fp", "asimd", "sve"}
    assert cpu_flags("") == frozenset()


def test_x86_names_each_instruction_set_and_never_amx():
    spr = options(SAPPHIRE_RAPIDS)
    assert spr["GGML_NATIVE"] == "OFF"  # -march=native would compile AMX in
    assert spr["GGML_AMX_TILE"] == spr["GGML_AMX_INT8"] == spr["GGML_AMX_BF16"] == "OFF"
    assert spr["GGML_AVX512"] == spr["GGML_AVX512_VNNI"] == spr["GGML_AVX_VNNI"] == "ON"
    old = options(HASWELL)
    assert old["GGML_AVX2"] == old["GGML_FMA"] == "ON"
    # Off, not left to ggml's defaults (which turn the AVX family on without native).
    assert old["GGML_AVX512"] == old["GGML_AVX512_BF16"] == old["GGML_AVX_VNNI"] == "OFF"
    assert options(frozenset({"sse4_2"}))["GGML_AVX"] == "OFF"
    # An extension without the AVX-512 base it builds on is not used.
    assert options(HASWELL | {"avx512_vnni"})["GGML_AVX512_VNNI"] == "OFF"


def test_other_cpus_build_natively_and_unknown_x86_does_too():
    assert cmake_options("aarch64", frozenset({"asimd"})) == ("-DGGML_NATIVE=ON",)
    assert cmake_options("x86_64", frozenset()) == ("-DGGML_NATIVE=ON",)


def test_the_folder_changes_with_the_instruction_sets_and_only_with_them():
    zen4, spr = build_name("x86_64", ZEN4), build_name("x86_64", SAPPHIRE_RAPIDS)
    assert zen4 != spr != build_name("x86_64", HASWELL)
    assert zen4.startswith("x86_64-")
    # Flags ggml does not use share the build.
    assert build_name("x86_64", ZEN4 | {"rdrand", "sha_ni"}) == zen4
    # A native build is the CPU's own: another CPU's flags or description, another folder.
    assert build_name("aarch64", frozenset({"asimd"})) != build_name("aarch64", frozenset({"sve"}))
    assert build_name("arm64", frozenset(), "M1") != build_name("arm64", frozenset(), "M2")


def test_the_build_folders_are_this_cpus():
    name = this_build_name()
    assert locations.llama_cpp_dir().name == name
    assert locations.llama_cpp_dir().parent.name == locations.LLAMA_CPP_VERSION
    assert all(folder.name == name for folder in locations.llama_cpp_dirs())
