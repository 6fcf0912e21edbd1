"""An ImageFolder-style dataset, as a training job would write it: class folders, decode, resize, normalize.

``root/<class>/<file>``: each sub-directory of ``root`` is a class (sorted, numbered from 0),
each file in it one sample. Two factories, the names preflight's ``dataset:`` points at:

- ``image_folder``: JPEG/PNG files decoded with Pillow (``pip install pillow``);
- ``tensor_folder``: torch only, for files written with ``torch.save`` (uint8 CxHxW tensors).

Both apply the same transform, in torch only: resize to ``size`` x ``size`` (bilinear,
``torch.nn.functional.interpolate``), scale to [0, 1] and normalize with ImageNet's mean and std.
A sample is ``(float32 tensor 3 x size x size, class index)``.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGES = (".jpg", ".jpeg", ".png")


class ResizeNormalize:
    """uint8 C x H x W -> float32 3 x size x size, normalized (a torch-only Resize + ToTensor + Normalize)."""

    def __init__(self, size: int, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD):
        self.size = size
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if image.shape[0] == 1:
            image = image.expand(3, -1, -1)  # greyscale
        pixels = image[:3].unsqueeze(0).float() / 255.0
        pixels = F.interpolate(pixels, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return (pixels.squeeze(0) - self.mean) / self.std


class ImageFolder(Dataset):
    """Samples ``(transform(load(path)), class index)`` for every file under ``root/<class>/`` with an extension."""

    def __init__(self, root: str, load: Callable[[str], torch.Tensor], extensions: Sequence[str],
                 transform: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
        self.samples = [(os.path.join(root, name, file), index)
                        for index, name in enumerate(self.classes)
                        for file in sorted(os.listdir(os.path.join(root, name)))
                        if file.lower().endswith(tuple(extensions))]
        if not self.samples:
            raise FileNotFoundError(f"no {', '.join(extensions)} files in class folders under {root}")
        self.load, self.transform = load, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        return self.transform(self.load(path)), label


def decode_with_pillow(path: str) -> torch.Tensor:
    """A JPEG/PNG file as a uint8 3 x H x W tensor (Pillow decodes; RGB, as torchvision's loader)."""
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB")
        pixels = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8)
        return pixels.view(rgb.height, rgb.width, 3).permute(2, 0, 1)


def load_tensor(path: str) -> torch.Tensor:
    """A uint8 C x H x W tensor written with ``torch.save``."""
    return torch.load(path, weights_only=True)


def image_folder(root: str, size: int = 224) -> ImageFolder:
    """JPEG/PNG class folders under ``root``, decoded with Pillow, resized and normalized."""
    return ImageFolder(root, decode_with_pillow, IMAGES, ResizeNormalize(size))


def tensor_folder(root: str, size: int = 224) -> ImageFolder:
    """``.pt`` class folders under ``root`` (torch only), resized and normalized."""
    return ImageFolder(root, load_tensor, (".pt",), ResizeNormalize(size))
