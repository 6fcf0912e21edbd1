"""The p2p check through the torch seam's fake: pairs, peer access, bandwidth, too few GPUs."""

from __future__ import annotations

import inspect

from preflight.host import gpu
from preflight.checks import p2p
from preflight.checks.base import Budget
from preflight.host.gpu_memory import DeviceMemoryError
from tests.fakes.gpu import FakeCuda, h200
from tests.helpers import judged, keyed

GATE = "p2p_access: {min: 1}\np2p_bandwidth: {min: 100 GB/s}"
TWO = (h200(0), h200(1, "0000:86:00.0"))


def run(fake_cuda):
    return p2p.measurements({"size": 64 << 20}, Budget(0.2, 60), fake_cuda)


def test_every_ordered_pair_is_measured_over_nvlink(tmp_path):
    measured = keyed(run(FakeCuda(devices=TWO)))
    assert measured["p2p_bandwidth[cuda:0->cuda:1]"].value == 372.5
    assert measured["p2p_access[cuda:1->cuda:0]"].value == 1.0
    results = judged(tmp_path, "p2p", GATE, list(measured.values()))
    assert len(results) == 4 and {r.verdict for r in results.values()} == {"pass"}


def test_pairs_without_peer_access_fail_and_say_the_copy_was_staged(tmp_path):
    staged = FakeCuda(devices=TWO, peer_access=False, peer_rate=9.8)
    results = judged(tmp_path, "p2p", GATE, run(staged))
    assert results["p2p.p2p_access[cuda:0->cuda:1]"].message == "measured 0, required >= 1"
    bandwidth = results["p2p.p2p_bandwidth[cuda:0->cuda:1]"]
    assert bandwidth.message == "measured 9.8 GB/s, required >= 100 GB/s"
    assert bandwidth.method.endswith("staged through host (no peer access)")


def test_a_failing_copy_fails_its_pair(tmp_path):
    broken = FakeCuda(devices=TWO, peer_rate=RuntimeError("CUDA error: an illegal memory access was encountered"))
    results = judged(tmp_path, "p2p", GATE, run(broken))
    assert results["p2p.p2p_bandwidth[cuda:1->cuda:0]"].message.startswith(
        "could not measure: copy failed: CUDA error: an illegal memory access was encountered")


def test_one_gpu_has_no_pairs_and_skips(tmp_path):
    results = judged(tmp_path, "p2p", GATE, run(FakeCuda()))
    assert {r.verdict for r in results.values()} == {"skip"}
    assert results["p2p.p2p_bandwidth"].message == "not applicable: one GPU: there is no pair to measure"


def test_no_gpu_fails(tmp_path):
    results = judged(tmp_path, "p2p", GATE, run(FakeCuda(devices=(), reason="no CUDA device: CPU build")))
    assert {r.verdict for r in results.values()} == {"fail"}


def test_the_copy_is_named_a_peer_write_as_nvbandwidth_names_it(tmp_path):
    # torch copies across devices on the source device's stream (ATen copy_device_to_device), so the
    # source writes into the peer: nvbandwidth's memcpy_write_ce, never its memcpy_read_ce
    bandwidth = next(metric for metric in p2p.METRICS if metric.name == "p2p_bandwidth")
    assert "device_to_device_memcpy_write_ce" in bandwidth.help and "source GPU writing into the target" in bandwidth.help
    measured = keyed(run(FakeCuda(devices=TWO)))["p2p_bandwidth[cuda:1->cuda:0]"]
    assert measured.method == "64 MiB copies written by cuda:1 on its own stream (memcpy_write_ce), CUDA events"
    for text in (p2p.__doc__, inspect.getsource(gpu.TorchCuda.peer_timer)):
        assert "memcpy_write_ce" in text and "read_ce" not in text
    assert 'torch.cuda.Stream(device=torch.device("cuda", source))' in inspect.getsource(gpu.TorchCuda.peer_timer)


def test_a_pair_without_room_for_its_buffers_says_so(tmp_path):
    full = FakeCuda(devices=TWO, peer_rate=DeviceMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB."))
    results = judged(tmp_path, "p2p", GATE, run(full))
    assert results["p2p.p2p_bandwidth[cuda:0->cuda:1]"].message.startswith(
        "could not measure: no room for two 64 MiB buffers (CUDA out of memory. Tried to allocate 64.00 MiB.): "
        "another process holds GPU memory (see nvidia-smi), or lower p2p.size")
