"""Label priors: what a client's own label counts say about a test sample before any model is asked.

On label-skewed partitions a model can win simply by never predicting labels its client does not
hold. These priors measure that: added to the logits at evaluation (the control `fedavg_lp`, the
engine option `eval_prior`), or alone (`prior_only_correct` in a partition's statistics).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def label_prior(labels: torch.Tensor, num_classes: int, kind: str, pooled: torch.Tensor | None = None) -> torch.Tensor:
    """The additive prior pi_c over the K logits of a client whose train labels are `labels`.

    mask: 0 on the client's labels, -inf elsewhere; log_freq: log of its label shares; log_ratio:
    log shares minus the log shares of the pooled train labels (`pooled`: counts per class).
    """
    import torch  # here: `prior_only` serves `fedgmh partition`, which starts without torch
    counts = torch.bincount(labels, minlength=num_classes).double()
    if kind == "mask":
        prior = torch.where(counts > 0, 0.0, -math.inf)
    else:
        prior = torch.log(counts / counts.sum())  # log 0 = -inf: unseen labels are never predicted
        if kind == "log_ratio":
            prior = prior - torch.log(pooled / pooled.sum())
    return prior.float()


def prior_only(train_labels: np.ndarray, test_labels: np.ndarray, num_classes: int) -> tuple[int, int]:
    """(test samples of the client's most frequent train label, test samples of labels it never trained on).

    The first is what predicting that one label for every test sample gets right (ties: the
    smallest label); the second can never be right under the mask prior.
    """
    counts = np.bincount(train_labels, minlength=num_classes)
    majority = int(np.argmax(counts)) if len(train_labels) else -1
    return int((test_labels == majority).sum()), int((counts[test_labels] == 0).sum())
