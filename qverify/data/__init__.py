"""Labelled data sets for calibration, testing and studies: built-in ones and `.npz`/`.npy` files."""

from qverify.data.datasets import BUILT_IN, Dataset, load_dataset

__all__ = ["BUILT_IN", "Dataset", "load_dataset"]
