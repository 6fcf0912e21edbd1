"""The worked examples under examples/ run end to end, on small generated folders of real images."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from tests.helpers import REPO, run_cli

SIZE = 32  # the transform's output side: 3 x 32 x 32 float32 per sample, plus an int64 label
SAMPLE_BYTES = 3 * SIZE * SIZE * 4 + 8


@pytest.fixture(scope="module")
def class_folders(tmp_path_factory):
    """Two classes of PNG and JPEG images of various sizes, and the same as uint8 tensors (.pt)."""
    images, tensors = tmp_path_factory.mktemp("images"), tmp_path_factory.mktemp("tensors")
    for label in ("cat", "dog"):
        (images / label).mkdir()
        (tensors / label).mkdir()
        for index in range(30):
            image = Image.effect_noise((40 + index, 30 + index), 50).convert("RGB")
            image.save(images / label / f"{index}.{'jpg' if index % 2 else 'png'}")
            torch.save(torch.randint(0, 256, (3, 30, 40 + index), dtype=torch.uint8), tensors / label / f"{index}.pt")
    (images / "cat" / "notes.txt").write_text("not an image: skipped by the dataset's extensions")
    return {"thresholds.yaml": images, "thresholds-tensors.yaml": tensors}


@pytest.mark.parametrize("config", ["thresholds.yaml", "thresholds-tensors.yaml"])
def test_the_imagefolder_example_measures_the_jobs_dataset(tmp_path, class_folders, config):
    path = REPO / "examples" / "imagefolder" / config
    env = {"DATA_DIR": str(class_folders[config])}
    assert run_cli("validate", str(path), env=env).returncode == 0
    completed = run_cli("run", "-c", str(path), "--format", "json", "--set", "defaults.duration=1s",
                        "--set", "dataloader.num_workers=2", "--set", "dataloader.batch_size=8",
                        "--set", f"dataloader.dataset_args.size={SIZE}",
                        "--set", "dataloader.throughput.min=1 samples/s", cwd=tmp_path, env=env)
    assert completed.returncode == 0, completed.stderr
    results = {r["metric"]: r for r in json.loads(completed.stdout)["results"]}
    assert results["throughput"]["verdict"] == "pass"
    assert "(ImageFolder, 60 samples)" in results["throughput"]["method"]
    rate = results["throughput"]["value"]
    assert results["bandwidth"]["value"] == pytest.approx(rate * SAMPLE_BYTES / 1e6, rel=0.02)


def test_the_transform_resizes_and_normalizes_with_torch_only():
    import sys

    sys.path.insert(0, str(REPO / "examples" / "imagefolder" / "src"))
    try:
        from imagefolder_job.dataset import IMAGENET_MEAN, IMAGENET_STD, ResizeNormalize
    finally:
        sys.path.pop(0)
    grey = torch.full((1, 10, 20), 255, dtype=torch.uint8)  # white, greyscale, any size
    out = ResizeNormalize(16)(grey)
    assert out.shape == (3, 16, 16) and out.dtype == torch.float32
    expected = [(1.0 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD)]
    assert out.mean(dim=(1, 2)).tolist() == pytest.approx(expected, rel=1e-5)
