"""Inference over data sets (alternet/evaluation/inference.py)."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from alternet.evaluation.inference import predict_sets

from helpers import without_collection


class _UnreadableAt(Dataset):
    """Eight images, the sixth of which cannot be read (as a broken file raises in a loader worker)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        if index == 5:
            raise OSError("image file is truncated")
        return torch.zeros(3, 4, 4), index


def test_an_error_in_a_loader_worker_ends_the_workers_at_once():
    """The error's traceback holds the iterator, which went on with its worker until the garbage collector freed it,
    5 s later than need be (it closes the workers' queues before asking them to end): a stall in whatever ran
    then."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 3))
    before = set(multiprocessing.active_children())
    with without_collection():
        with pytest.raises(OSError, match="truncated") as raised:
            list(predict_sets(model, [_UnreadableAt()], device=torch.device("cpu"), batch_size=2, num_workers=1))
        held, frames = [], raised.value.__traceback__  # the frames, with the iterator, are still held here
        while frames is not None:
            held.append(frames.tb_frame.f_locals.get("batches"))
            frames = frames.tb_next
        assert any(type(batches).__name__ == "_MultiProcessingDataLoaderIter" for batches in held)
        assert set(multiprocessing.active_children()) <= before
