"""The hand-written LoRA step that tier heads are judged against (`benchmarks.ceiling`), on CPU at the tiny
size: it trains (the loss of its fixed batch falls), reports each mode and the parts of the step, refuses an
unknown mode, and its chunked loss is the model's own. Its GPU numbers are in benchmarks/RESULTS.md."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.ceiling import build, chunked_causal_lm_loss, kernel_ms, main


def test_the_hand_written_step_trains_and_reports_its_parts(capsys):
    code = main(
        [
            "--size",
            "tiny",
            "--modes",
            "eager",
            "--steps",
            "3",
            "--warmup",
            "3",
            "--batch",
            "2",
            "--seq",
            "32",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["device"] == "cpu"
    [eager] = report["modes"]
    assert eager["mode"] == "eager" and eager["attention"] == "sdpa"
    assert eager["last_loss"] < eager["first_loss"]
    assert eager["step_ms_min"] <= eager["step_ms"] <= eager["step_ms_max"]
    assert eager["tokens_per_s"] == pytest.approx(2 * 32 / (eager["step_ms"] / 1000))
    assert eager["mfu"] is None and eager["device_busy"] is None  # no device peak or trace on a CPU
    assert eager["kernel_ms"] == {}


def test_kernels_are_grouped_by_what_they_compute():
    def kernel(name, dur):
        return {"ph": "X", "cat": "kernel", "name": name, "dur": dur}

    trace = {
        "traceEvents": [
            kernel("flash_bwd_kernel_sm90", 4000),
            kernel("nvjet_tst_128x256_64x4_sm90", 6000),
            kernel("sm90_xmma_gemm_bf16bf16", 2000),
            kernel("triton_red_fused__log_softmax_nll_loss_backward_0", 3000),
            kernel("void multi_tensor_apply_kernel<FusedAdamMathFunctor>", 1000),
            kernel("triton_poi_fused_add_mul_1", 500),
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 9000},
        ]
    }
    assert kernel_ms(trace, steps=2) == {
        "attention": 2.0,
        "cross-entropy": 1.5,
        "optimizer": 0.5,
        "matmul": 4.0,
        "other": 0.25,
    }


def test_an_unknown_mode_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--size", "tiny", "--modes", "eager,graphs"])
    assert exited.value.code == 2 and "unknown mode(s) graphs" in capsys.readouterr().err


def test_the_chunked_loss_is_the_models_own_loss_and_gradients(monkeypatch):
    # chunks that do not divide the 2 x 32 shifted positions
    monkeypatch.setattr("benchmarks.ceiling.LOSS_CHUNK", 7)
    model, _ = build("tiny", torch.device("cpu"))
    for module in model.modules():  # LoRA's B starts at zero: move it so every adapter weight has a gradient
        if hasattr(module, "lora_B"):
            torch.nn.init.normal_(module.lora_B["default"].weight, std=0.1)
    ids = torch.randint(0, 2048, (2, 33), generator=torch.Generator().manual_seed(3))
    adapter = [p for p in model.parameters() if p.requires_grad]

    full = model(input_ids=ids, labels=ids).loss
    expected = torch.autograd.grad(full, adapter)
    hidden = model.get_decoder()(input_ids=ids).last_hidden_state
    chunked = chunked_causal_lm_loss(hidden, model.get_output_embeddings().weight, ids)
    got = torch.autograd.grad(chunked, adapter)

    assert chunked.item() == pytest.approx(full.item(), rel=1e-5)
    for mine, theirs in zip(got, expected, strict=True):
        assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-6)


def test_the_attention_is_the_models_setting_and_cudnn_needs_a_device(capsys):
    assert (
        build("tiny", torch.device("cpu"), attention="flex")[0].config._attn_implementation
        == "flex_attention"
    )
    assert build("tiny", torch.device("cpu"))[0].config._attn_implementation == "sdpa"
    with pytest.raises(SystemExit) as exited:
        main(["--size", "tiny", "--modes", "eager", "--attention", "sdpa-cudnn"])
    assert exited.value.code == 2 and "sdpa-cudnn needs a CUDA device" in capsys.readouterr().err
