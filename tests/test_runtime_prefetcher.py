"""The vendored runtime: CudaPrefetcher, NumpyPinnedCollate and the TF32 flags."""

from __future__ import annotations

import collections
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from optimizations.prefetcher.helper import CudaPrefetcher, NumpyPinnedCollate, iter_tensors, map_tensors
from optimizations.runtime import gpu_flags

REPO = Path(__file__).resolve().parents[1]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

Pair = collections.namedtuple("Pair", ["inputs", "labels"])


def _assert_same(actual, expected):
    """Same container types all the way down, equal tensors (values, dtype, shape), equal other leaves."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert torch.equal(actual.cpu(), expected.cpu())
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            _assert_same(actual[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for actual_item, expected_item in zip(actual, expected, strict=True):
            _assert_same(actual_item, expected_item)
    else:
        assert actual == expected


def _batches(shape: str, count: int = 5) -> list:
    generator = torch.Generator().manual_seed(len(shape))

    def tensor(*size):
        return torch.randn(*size, generator=generator)

    make = {
        "tensor": lambda i: tensor(4, 3),
        "dict": lambda i: {"images": tensor(2, 3, 8, 8), "labels": torch.arange(2) + i},
        "list": lambda i: [tensor(3), tensor(2, 2)],
        "tuple": lambda i: (tensor(3), torch.tensor([i])),
        "namedtuple": lambda i: Pair(tensor(2, 5), torch.tensor([i, i + 1])),
        "nested": lambda i: {
            "obs": {"cams": [tensor(2, 4), tensor(2, 4)], "state": (tensor(3),)},
            "act": tensor(2),
        },
        "non_tensor_leaves": lambda i: {
            "x": tensor(2),
            "id": f"episode-{i}",
            "step": i,
            "mask": None,
            "w": 0.5,
        },
    }[shape]
    return [make(i) for i in range(count)]


SHAPES = ["tensor", "dict", "list", "tuple", "namedtuple", "nested", "non_tensor_leaves"]


@pytest.mark.parametrize("shape", SHAPES)
def test_cpu_prefetcher_yields_the_plain_loops_batches_in_order(shape):
    batches = _batches(shape)
    prefetched = list(CudaPrefetcher(batches, "cpu"))
    assert len(prefetched) == len(batches)
    for actual, expected in zip(prefetched, batches, strict=True):
        _assert_same(actual, expected)


@pytest.mark.parametrize("shape", SHAPES)
def test_pass_through_moves_every_tensor_to_the_device(shape):
    moved = list(CudaPrefetcher(_batches(shape), "meta"))
    tensors = [tensor for batch in moved for tensor in iter_tensors(batch)]
    assert tensors and all(tensor.device.type == "meta" for tensor in tensors)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_cpu_prefetcher_over_a_dataloader(depth):
    dataset = [{"x": np.full((3,), i, dtype=np.float32), "y": i} for i in range(10)]
    loader = DataLoader(dataset, batch_size=4)
    prefetcher = CudaPrefetcher(loader, torch.device("cpu"), depth=depth)
    assert len(prefetcher) == len(loader) == 3
    for actual, expected in zip(prefetcher, loader, strict=True):
        _assert_same(actual, expected)


def test_len_follows_the_source():
    assert len(CudaPrefetcher([torch.zeros(1)] * 7, "cpu")) == 7
    with pytest.raises(TypeError):
        len(CudaPrefetcher((torch.zeros(1) for _ in range(3)), "cpu"))


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        CudaPrefetcher([], "cpu", depth=0)


def test_map_tensors_keeps_mapping_types():
    counts = collections.defaultdict(list, {"a": torch.ones(1)})
    mapped = map_tensors(counts, lambda tensor: tensor * 2)
    assert isinstance(mapped, collections.defaultdict) and mapped.default_factory is list
    assert mapped["a"].item() == 2 and counts["a"].item() == 1
    ordered = map_tensors(collections.OrderedDict(b=torch.ones(1), a=2), lambda tensor: tensor + 1)
    assert isinstance(ordered, collections.OrderedDict) and list(ordered) == ["b", "a"] and ordered["a"] == 2


def _numpy_samples():
    rng = np.random.default_rng(0)
    return [
        {
            "images": rng.random((2, 3, 8, 8), dtype=np.float32),
            "actions": rng.standard_normal(7).astype(np.float32),
            "index": np.int64(i),
            "reward": float(i) / 3,
            "task": f"task-{i}",
            "pair": Pair(rng.random(2), np.array([i, i], dtype=np.int32)),
            "history": [rng.random(3, dtype=np.float32), torch.full((2,), float(i))],
        }
        for i in range(6)
    ]


def test_numpy_collate_matches_default_collate():
    samples = _numpy_samples()
    collate = NumpyPinnedCollate(pin_memory=False)
    _assert_same(collate(samples), default_collate(samples))
    _assert_same(
        collate([sample["images"] for sample in samples]), default_collate([s["images"] for s in samples])
    )


def test_numpy_collate_promotes_mixed_dtypes_like_default_collate():
    samples = [torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.float16), torch.ones(2)]
    _assert_same(NumpyPinnedCollate(pin_memory=False)(samples), default_collate(samples))


def test_numpy_collate_pins_only_where_cuda_is():
    assert NumpyPinnedCollate().pin_memory is torch.cuda.is_available()


def test_numpy_collate_in_dataloader_workers():
    samples = _numpy_samples()
    loader = DataLoader(samples, batch_size=3, num_workers=1, collate_fn=NumpyPinnedCollate())
    plain = DataLoader(samples, batch_size=3)
    for actual, expected in zip(loader, plain, strict=True):
        _assert_same(actual, expected)


class _RecordingBackend:
    """Stands in for a torch.backends object; records every attribute written."""

    def __init__(self, written: list[str], name: str, attributes: tuple[str, ...]):
        object.__setattr__(self, "_written", written)
        object.__setattr__(self, "_name", name)
        for attribute in attributes:
            object.__setattr__(self, attribute, None)

    def __setattr__(self, attribute, value):
        if not hasattr(self, attribute):
            raise AttributeError(attribute)
        self._written.append(f"{self._name}.{attribute}={value}")
        object.__setattr__(self, attribute, value)


def _fake_torch(new_api: bool) -> tuple[types.SimpleNamespace, list[str]]:
    written: list[str] = []
    precision = ("fp32_precision",) if new_api else ()
    cudnn = _RecordingBackend(written, "cudnn", ("allow_tf32", "benchmark"))
    if new_api:
        object.__setattr__(cudnn, "conv", _RecordingBackend(written, "cudnn.conv", precision))
        object.__setattr__(cudnn, "rnn", _RecordingBackend(written, "cudnn.rnn", precision))
    matmul = _RecordingBackend(written, "matmul", ("allow_tf32", *precision))
    backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul), cudnn=cudnn)
    return types.SimpleNamespace(backends=backends), written


@pytest.mark.parametrize("new_api", [True, False])
def test_enable_tf32_uses_exactly_one_api(monkeypatch, new_api):
    fake_torch, written = _fake_torch(new_api)
    monkeypatch.setattr(gpu_flags, "torch", fake_torch)
    gpu_flags.enable_tf32()
    if new_api:
        expected = [
            "matmul.fp32_precision=tf32",
            "cudnn.conv.fp32_precision=tf32",
            "cudnn.rnn.fp32_precision=tf32",
        ]
    else:
        expected = ["matmul.allow_tf32=True", "cudnn.allow_tf32=True"]
    assert written == [*expected, "cudnn.benchmark=True"]


def _run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_enable_tf32_on_this_torch_never_touches_the_legacy_flags():
    out = _run_python(
        """
        import torch
        from optimizations.runtime.gpu_flags import enable_tf32, has_fp32_precision_api

        def legacy(*args):
            raise AssertionError("legacy allow_tf32 setter called")

        if has_fp32_precision_api():
            torch._C._set_cublas_allow_tf32 = legacy
            torch._C._set_cudnn_allow_tf32 = legacy
        enable_tf32()
        b = torch.backends
        if has_fp32_precision_api():
            print(b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision, b.cudnn.rnn.fp32_precision)
        else:
            print(b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
        print(b.cudnn.benchmark)
        """
    )
    expected_flags = "tf32 tf32 tf32" if gpu_flags.has_fp32_precision_api() else "True True"
    assert out.split("\n")[:2] == [expected_flags, "True"]


# ---------------------------------------------------------------------------------------------- GPU


def _pinned_batches(count: int, megabytes: int, seed: int = 0) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    numel = megabytes * 2**20 // 4
    return [
        {"x": torch.randn(numel, generator=generator).pin_memory(), "meta": Pair(torch.tensor([i]), f"b{i}")}
        for i in range(count)
    ]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("depth", [1, 2])
def test_gpu_prefetcher_values_match_the_plain_loop(depth):
    dataset = [
        {"images": np.random.default_rng(i).random((2, 3, 64, 64), dtype=np.float32), "step": i}
        for i in range(48)
    ]
    plain = [
        {key: value.to("cuda") for key, value in batch.items()}
        for batch in DataLoader(dataset, batch_size=8, collate_fn=default_collate)
    ]
    loader = DataLoader(dataset, batch_size=8, collate_fn=NumpyPinnedCollate())
    prefetched = list(CudaPrefetcher(loader, "cuda", depth=depth))
    assert len(prefetched) == len(plain)
    for actual, expected in zip(prefetched, plain, strict=True):
        assert actual["images"].is_cuda
        _assert_same(actual, expected)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("depth", [1, 2])
def test_gpu_consumer_sees_complete_batches_while_copies_race_compute(depth):
    """A slow consumer reads each batch only after a long kernel chain: a missing stream wait or
    record_stream would let the copy of a later batch overwrite memory the consumer still reads."""
    batches = _pinned_batches(12, megabytes=32, seed=depth)
    expected = torch.stack([batch["x"].double().sum() for batch in batches])
    weights = torch.randn(2048, 2048, device="cuda")
    sums = torch.empty(len(batches), dtype=torch.float64, device="cuda")
    for index, batch in enumerate(CudaPrefetcher(batches, "cuda", depth=depth)):
        for _ in range(20):
            weights = torch.tanh(weights @ weights)
        sums[index] = batch["x"].double().sum()
        assert batch["meta"].labels == f"b{index}"
    torch.testing.assert_close(sums.cpu(), expected, rtol=1e-9, atol=1e-6)


def _elapsed_ms(run) -> float:
    """GPU time of everything ``run`` enqueues, measured with CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


@pytest.mark.gpu
@needs_cuda
def test_gpu_prefetcher_overlaps_copies_with_compute():
    """Measured with CUDA events: prefetched loop time < copy time + compute time, by a clear margin."""
    batches = [batch["x"] for batch in _pinned_batches(10, megabytes=256)]
    weights = torch.randn(4096, 4096, device="cuda")
    resident = batches[0].to("cuda")

    def matmul_chain(length):
        def step(batch):
            activations = weights
            for _ in range(length):
                activations = activations @ weights
            return batch[:16].sum() + activations[0, 0]

        return step

    def plain_loop():
        for batch in batches:
            step(batch.to("cuda", non_blocking=True))

    def prefetched_loop():
        for batch in CudaPrefetcher(batches, "cuda"):
            step(batch)

    copy_time = min(_elapsed_ms(lambda: resident.copy_(batches[1], non_blocking=True)) for _ in range(3))
    one_matmul = min(_elapsed_ms(lambda: matmul_chain(1)(resident)) for _ in range(3))
    # Compute about as long as the copy: the case where overlap can at best halve the loop.
    step = matmul_chain(max(1, round(copy_time / one_matmul)))
    compute_time = min(_elapsed_ms(lambda: step(resident)) for _ in range(3))
    serial = len(batches) * (copy_time + compute_time)
    _elapsed_ms(prefetched_loop)  # warm-up: copy stream, device memory cache
    plain = min(_elapsed_ms(plain_loop) for _ in range(2))
    prefetched = min(_elapsed_ms(prefetched_loop) for _ in range(2))
    print(f"copy {copy_time:.2f} ms + compute {compute_time:.2f} ms per batch; {len(batches)} batches:")
    print(f"serial sum {serial:.1f} ms, plain loop {plain:.1f} ms, prefetched {prefetched:.1f} ms")
    assert plain > 0.9 * serial, "the plain loop should serialise copy and compute on one stream"
    assert prefetched < 0.8 * serial
    assert prefetched < 0.8 * plain


@pytest.mark.gpu
@needs_cuda
def test_gpu_enable_tf32_makes_float32_matmul_use_tf32():
    out = _run_python(
        """
        import torch
        from optimizations.runtime.gpu_flags import enable_tf32

        a = torch.randn(1024, 1024, device="cuda")
        b = torch.randn(1024, 1024, device="cuda")
        reference = (a.double() @ b.double())

        def error():
            return ((a @ b).double() - reference).abs().max().item() / reference.abs().max().item()

        before = error()
        enable_tf32()
        print(before, error(), torch.backends.cudnn.benchmark)
        """
    )
    before, after, benchmark = out.split()
    assert float(before) < 1e-5 < float(after) < 1e-2
    assert benchmark == "True"
