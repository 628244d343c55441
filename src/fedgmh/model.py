"""The paper's "4-layer CNN": PFLlib's FedAvgCNN, split into a body (feature extractor) and a head.

Parameter names start with `body.` or `head.`, so algorithms select what they share by prefix.
"""

from __future__ import annotations

import torch
from torch import nn

FEATURE_DIM = 512


class FedAvgCNN(nn.Module):
    """conv5x5(in->32) ReLU pool2, conv5x5(32->64) ReLU pool2, fc(->512) ReLU | head fc(512->K)."""

    def __init__(self, in_channels: int, num_classes: int, image_size: int) -> None:
        super().__init__()
        side = ((image_size - 4) // 2 - 4) // 2  # two valid 5x5 convolutions, each followed by a 2x2 pool
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=5),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * side * side, FEATURE_DIM),
            nn.ReLU(inplace=True),
        )
        self.head = nn.Linear(FEATURE_DIM, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def is_head(name: str) -> bool:
    return name.startswith("head.")


def is_body(name: str) -> bool:
    return name.startswith("body.")


#: the body's last layer, Linear(-> 512) + ReLU: PFLlib's `fc1` (index 7 of `FedAvgCNN.body`)
FC1_PREFIX = "body.7."


def is_fc1(name: str) -> bool:
    return name.startswith(FC1_PREFIX)
