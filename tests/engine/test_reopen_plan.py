"""What reopening a recorded model takes (``registry.reopen_plan``): from today's
records and from records written before they kept dtype, quant and server options."""

from __future__ import annotations

import pytest

from loomterm.engine.loom.registry import record_precision, reopen_plan
from loomterm.errors import InputError


@pytest.mark.parametrize(
    "record, expected",
    [
        (
            {"dtype": "bfloat16", "quant": "int4", "precision": "int4 (bfloat16)"},
            ("bfloat16", "int4"),
        ),
        ({"precision": "int8 (float32)"}, ("float32", "int8")),  # an older record
        ({"precision": "float16"}, ("float16", "none")),
        ({}, ("auto", "none")),
    ],
)
def test_precision_of_a_record(record, expected):
    assert record_precision(record) == expected


def test_a_local_record(tmp_path):
    plan = reopen_plan({"kind": "local", "source": str(tmp_path), "precision": "int8 (float32)"})
    assert plan.local and plan.source == str(tmp_path)
    assert plan.options == {"dtype": "float32", "quant": "int8"}
    hub = reopen_plan({"kind": "local", "source": "HuggingFaceTB/SmolLM2-360M-Instruct"})
    assert hub.source == "HuggingFaceTB/SmolLM2-360M-Instruct"  # the hub is asked later
    with pytest.raises(InputError, match=f"its folder {tmp_path / 'gone'} is gone"):
        reopen_plan({"kind": "local", "source": str(tmp_path / "gone")})
    with pytest.raises(InputError, match="its file .*m.gguf is gone"):
        reopen_plan({"kind": "local", "source": str(tmp_path / "m.gguf")})
    with pytest.raises(InputError, match="records no source"):
        reopen_plan({"kind": "local", "source": None})


def test_a_server_record(tmp_path):
    fingerprint = {"name": "m", "weights": "abc"}
    record = {
        "kind": "vllm",
        "source": "http://127.0.0.1:8000",
        "fingerprint": fingerprint,
        "server_model_arg": "Qwen/Qwen2.5-7B",
        "tokenizer_source": str(tmp_path),
    }
    plan = reopen_plan(record)
    assert not plan.local and plan.source == "http://127.0.0.1:8000"
    assert plan.options == {"server_kind": "vllm", "server_model": "Qwen/Qwen2.5-7B",
                            "tokenizer": str(tmp_path), "expect": fingerprint,
                            "named_by": "file"}  # a file's URL: no key unasked  # fmt: skip
    gone = reopen_plan(dict(record, kind="server", tokenizer_source=str(tmp_path / "x")))
    assert gone.options["server_kind"] is None and gone.options["tokenizer"] is None
