"""Train the digits CNN benchmark network and write `digits_cnn.onnx` (deterministic).

Run from anywhere with numpy, scipy, scikit-learn, onnx and onnxruntime installed:

    python benchmarks/digits-cnn/train.py

What it does (README.md explains the choices):

1. Loads scikit-learn's bundled 8x8 digits (1797 images, pixel levels 0..16, classes 0..9) and
   splits them 75/25 (stratified, fixed seed: the same split as benchmarks/digits). Inputs are
   normalised as x / 16, so they lie in [0, 1].
2. Trains a small convolutional network, NCHW: 1x8x8 -> Conv 8 filters 3x3 (stride 1, no padding,
   8x6x6) -> ReLU -> MaxPool 2x2 stride 2 (8x3x3) -> Flatten (72) -> Gemm 72->10 (the logits, whose
   argmax is the class; no softmax). The forward and backward passes are written in numpy (im2col
   for the convolution); the loss is the mean softmax cross-entropy plus an L2 penalty on the
   weights, minimised full-batch by scipy's L-BFGS-B from a seeded random start.
3. Rebalances the two layers by powers of two (`rebalance`) if a pre-activation on the training
   images exceeds HEADROOM, so that a fixed-point format with 8 integer bits (range +-128) does not
   saturate: the same classifier, logits scaled by a power of two. With the committed settings the
   pre-activations are far below HEADROOM and the scales are 1 (nothing is changed).
4. Writes the network as ONNX (opset 13, float32 initializers; `export_onnx`), checks it with
   onnx.checker, and checks that onnxruntime's logits equal the numpy forward pass (within 1e-5)
   and give the same class on every test image.
5. Prints the accuracy, the largest |pre-activation| per layer and the elapsed time.

No suite is written yet: `correctly_classified_test_images(n)` picks the centres for one from the
committed ONNX file, so another script can import this module and build it.

Deterministic for fixed library versions: fixed seeds, full-batch training (no sampling), and
BLAS/OpenMP limited to one thread (the thread count changes the order of floating-point sums). The
committed file is the artifact.
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import scipy
import sklearn
from scipy.optimize import minimize
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

from qverify.io import read_onnx, write_onnx
from qverify.network import Activation, Conv2D, Dense, MaxPool2D, Network

HERE = Path(__file__).resolve().parent
NETWORK_FILE = "digits_cnn.onnx"
SIDE = 8  # images are SIDE x SIDE
LEVELS = 16.0  # pixel levels 0..16; inputs are x / LEVELS
FILTERS = 8
KERNEL = 3  # 3x3 convolution, stride 1, no padding: 8x8 -> 6x6
POOL = 2  # 2x2 max pooling, stride 2: 6x6 -> 3x3
CLASSES = 10
CONV_SIDE = SIDE - KERNEL + 1  # 6
POOL_SIDE = CONV_SIDE // POOL  # 3
FLAT = FILTERS * POOL_SIDE * POOL_SIDE  # 72
WEIGHT_DECAY = 3e-3  # L2 penalty 0.5 * WEIGHT_DECAY * sum(w^2) on the weights (not the biases)
MAX_ITER = 5000  # L-BFGS-B iteration limit (it stops earlier, on FTOL)
FTOL = 1e-8  # L-BFGS-B stops when the loss decreases by a relative FTOL or less in an iteration
SEED = 0  # initial weights
TEST_SIZE = 0.25
SPLIT_SEED = 0
HEADROOM = 100.0  # largest |pre-activation| allowed on the training images (<8,8> range is +-128)
ONNX_TOLERANCE = 1e-5

Params = dict[str, np.ndarray]
SHAPES = {
    "conv_w": (FILTERS, 1, KERNEL, KERNEL),
    "conv_b": (FILTERS,),
    "fc_w": (CLASSES, FLAT),
    "fc_b": (CLASSES,),
}
WEIGHTS = ("conv_w", "fc_w")  # the L2 penalty's parameters

# The convolution outputs grouped by pooling window: WINDOW_ORDER[4 p + k] is the row-major 6x6 index
# of the k-th output (row-major in the 2x2 window) of the window of pooled position p (row-major in 3x3)
_pi, _pj, _wi, _wj = np.meshgrid(*(np.arange(s) for s in (POOL_SIDE, POOL_SIDE, POOL, POOL)), indexing="ij")
WINDOW_ORDER = ((POOL * _pi + _wi) * CONV_SIDE + POOL * _pj + _wj).reshape(-1)
# im2col: PATCHES[p, k] = the row-major 8x8 indices of the 3x3 input patch under that output
_di, _dj = np.meshgrid(np.arange(KERNEL), np.arange(KERNEL), indexing="ij")
PATCHES = (
    (WINDOW_ORDER // CONV_SIDE)[:, None] * SIDE
    + (WINDOW_ORDER % CONV_SIDE)[:, None]
    + (_di * SIDE + _dj).reshape(1, -1)
).reshape(POOL_SIDE * POOL_SIDE, POOL * POOL, KERNEL * KERNEL)
CELLS = POOL_SIDE * POOL_SIDE  # 9 pooled positions
WINDOW = POOL * POOL  # 4 values per pooling window


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Images (1797, 64) as pixel levels 0..16, labels, and the fixed training and test indices
    (the split of benchmarks/digits)."""
    data = load_digits()
    train_idx, test_idx = train_test_split(
        np.arange(len(data.target)), test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=data.target
    )
    return data.data, data.target, train_idx, test_idx


def normalise(levels: np.ndarray) -> np.ndarray:
    """Pixel levels (n, 64) or (n, 8, 8) -> network inputs (n, 1, 8, 8) in [0, 1]."""
    return (np.asarray(levels, dtype=np.float64) / LEVELS).reshape(-1, 1, SIDE, SIDE)


# ---------------------------------------------------------------- forward and backward passes (numpy)


def im2col(x: np.ndarray) -> np.ndarray:
    """Inputs (n, 1, 8, 8) -> patches (10, 4 * n * 9): column (k, i, p) holds the 3x3 patch (9 rows,
    row-major) of image i under the k-th output of pooling window p, and a 1 (for the bias).

    This layout makes the convolution one matrix product whose result, (8, 4, n, 9), has long
    contiguous slices for the pooling (numpy is slow on short innermost axes such as 8 channels).
    """
    n = len(x)
    gathered = x.reshape(n, SIDE * SIDE)[:, PATCHES]  # (n, 9 cells, 4, 9 offsets)
    patches = gathered.transpose(3, 2, 0, 1).reshape(KERNEL * KERNEL, WINDOW * n * CELLS)
    return np.vstack([patches, np.ones((1, patches.shape[1]))])


def forward(params: Params, patches: np.ndarray) -> dict[str, np.ndarray]:
    """All intermediate values for the patches of n images (`im2col`); float64 arithmetic.

    conv: (8 channels, 4 window positions, n, 9 pooled positions); pooled: (8, n, 9), the window
    maxima before the ReLU (relu(max) = max(relu), so the ReLU is applied to the 4x fewer pooled
    values); flat: (n, 72) in ONNX's Flatten order of NCHW (channel, then row-major position).
    """
    n = patches.shape[1] // (WINDOW * CELLS)
    kernel = np.hstack([params["conv_w"].reshape(FILTERS, KERNEL * KERNEL), params["conv_b"][:, None]])
    conv = (kernel @ patches).reshape(FILTERS, WINDOW, n, CELLS)
    pooled = np.maximum(np.maximum(conv[:, 0], conv[:, 1]), np.maximum(conv[:, 2], conv[:, 3]))
    flat = np.maximum(pooled, 0.0).transpose(1, 0, 2).reshape(n, FLAT)
    logits = flat @ params["fc_w"].T + params["fc_b"]
    return {"conv": conv, "pooled": pooled, "flat": flat, "logits": logits}


def logits_of(params: Params, x: np.ndarray) -> np.ndarray:
    """Logits (n, 10) for inputs (n, 1, 8, 8)."""
    return forward(params, im2col(x))["logits"]


def loss_and_gradient(params: Params, patches: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Mean softmax cross-entropy + 0.5 * WEIGHT_DECAY * sum of squared weights, and its gradient."""
    n = len(y)
    values = forward(params, patches)
    z = values["logits"] - values["logits"].max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    loss = -log_p[np.arange(n), y].mean() + 0.5 * WEIGHT_DECAY * sum(np.sum(params[k] ** 2) for k in WEIGHTS)

    d_logits = np.exp(log_p)
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    grads = {"fc_w": d_logits.T @ values["flat"], "fc_b": d_logits.sum(axis=0)}
    d_pool = (d_logits @ params["fc_w"]).reshape(n, FILTERS, CELLS).transpose(1, 0, 2)  # (8, n, 9)
    # ReLU: no gradient where the pooled value is <= 0; max pooling: the gradient goes to the first
    # largest value of each window (window position k = the k-th block of n * 9 columns of patches)
    conv, pooled = values["conv"], values["pooled"]
    taken = pooled <= 0.0
    d_kernel = np.zeros((FILTERS, KERNEL * KERNEL + 1))  # weights and bias
    block = n * CELLS
    for k in range(WINDOW):
        hit = (conv[:, k] == pooled) & ~taken
        taken |= hit
        d_kernel += (
            np.where(hit, d_pool, 0.0).reshape(FILTERS, block) @ patches[:, k * block : (k + 1) * block].T
        )
    grads["conv_w"] = d_kernel[:, :-1].reshape(SHAPES["conv_w"])
    grads["conv_b"] = d_kernel[:, -1].copy()
    for key in WEIGHTS:
        grads[key] = grads[key] + WEIGHT_DECAY * params[key]
    return float(loss), grads


def pack(params: Params) -> np.ndarray:
    return np.concatenate([params[key].reshape(-1) for key in SHAPES])


def unpack(vector: np.ndarray) -> Params:
    params, start = {}, 0
    for key, shape in SHAPES.items():
        size = int(np.prod(shape))
        params[key] = vector[start : start + size].reshape(shape)
        start += size
    return params


def initial_params() -> Params:
    """He-normal weights (fan-in 9 and 72), zero biases, from SEED."""
    rng = np.random.default_rng(SEED)
    return {
        "conv_w": rng.normal(0.0, np.sqrt(2.0 / (KERNEL * KERNEL)), SHAPES["conv_w"]),
        "conv_b": np.zeros(FILTERS),
        "fc_w": rng.normal(0.0, np.sqrt(2.0 / FLAT), SHAPES["fc_w"]),
        "fc_b": np.zeros(CLASSES),
    }


def train(x_norm: np.ndarray, y: np.ndarray) -> tuple[Params, scipy.optimize.OptimizeResult]:
    """Full-batch L-BFGS-B on `loss_and_gradient` (float64) from `initial_params`; returns the
    parameters and scipy's result."""
    patches = im2col(x_norm)

    def objective(vector: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grads = loss_and_gradient(unpack(vector), patches, y)
        return loss, pack(grads)

    result = minimize(
        objective,
        pack(initial_params()),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": MAX_ITER, "maxfun": 2 * MAX_ITER, "ftol": FTOL, "gtol": 1e-8},
    )
    return unpack(result.x.copy()), result


def largest_pre_activations(params: Params, x_norm: np.ndarray) -> tuple[float, float]:
    """Largest |pre-activation| of the Conv (before ReLU) and of the Gemm (the logits) on x_norm."""
    values = forward(params, im2col(x_norm))
    return float(np.abs(values["conv"]).max()), float(np.abs(values["logits"]).max())


def interval_bounds(params: Params) -> tuple[float, float]:
    """Largest possible |pre-activation| of the Conv and of the Gemm over the whole input box
    [0, 1]^64 (interval arithmetic: every 3x3 patch ranges over [0, 1]^9)."""
    kernel = params["conv_w"].reshape(FILTERS, -1)
    conv_hi = np.maximum(kernel, 0).sum(axis=1) + params["conv_b"]
    conv_lo = np.minimum(kernel, 0).sum(axis=1) + params["conv_b"]
    # ReLU and max pooling: each pooled value lies in [relu(conv_lo), relu(conv_hi)] of its channel
    pooled_hi = np.repeat(np.maximum(conv_hi, 0), CELLS)  # Flatten order: channel, then position
    pooled_lo = np.repeat(np.maximum(conv_lo, 0), CELLS)
    positive, negative = np.maximum(params["fc_w"], 0), np.minimum(params["fc_w"], 0)
    logits_hi = positive @ pooled_hi + negative @ pooled_lo + params["fc_b"]
    logits_lo = positive @ pooled_lo + negative @ pooled_hi + params["fc_b"]
    conv_bound = np.maximum(np.abs(conv_hi), np.abs(conv_lo)).max()
    return float(conv_bound), float(np.maximum(np.abs(logits_hi), np.abs(logits_lo)).max())


def power_of_two_scale(largest: float) -> float:
    """The largest power of two c <= 1 with c * largest <= HEADROOM."""
    return 2.0 ** -max(0, int(np.ceil(np.log2(largest / HEADROOM))))


def rebalance(params: Params, x_norm: np.ndarray) -> tuple[Params, tuple[float, float]]:
    """The same classifier with each layer's outputs scaled by a power of two c_k <= 1 so that its
    largest |pre-activation| on `x_norm` is at most HEADROOM; returns it and (c_1, c_2).

    As `rebalance` in benchmarks/digits/train.py: ReLU and max pooling are positively homogeneous
    (relu(c z) = c relu(z), max(c a, c b) = c max(a, b) for c > 0), so scaling the Conv's weights and
    bias by c_1, and the Gemm's weights by c_2 / c_1 and its bias by c_2, multiplies the Conv's
    outputs by c_1 and the logits by c_2. The argmax is unchanged; powers of two are exact in binary.
    """
    conv_max, logits_max = largest_pre_activations(params, x_norm)
    c1, c2 = power_of_two_scale(conv_max), power_of_two_scale(logits_max)
    scaled = {
        "conv_w": params["conv_w"] * c1,
        "conv_b": params["conv_b"] * c1,
        "fc_w": params["fc_w"] * (c2 / c1),
        "fc_b": params["fc_b"] * c2,
    }
    return scaled, (c1, c2)


def as_float32(params: Params) -> Params:
    """The parameters as exported (float32), back in float64 for the numpy forward pass."""
    return {key: value.astype(np.float32).astype(np.float64) for key, value in params.items()}


# ---------------------------------------------------------------- ONNX export


def network_of(params: Params) -> Network:
    """The parameters as qverify's network: Conv (ReLU) -> MaxPool -> Dense (logits)."""
    conv = Conv2D(params["conv_w"], params["conv_b"], Activation.RELU, (1, SIDE, SIDE))
    pool = MaxPool2D(conv.output_shape, (POOL, POOL), (POOL, POOL))
    dense = Dense(params["fc_w"], params["fc_b"], Activation.IDENTITY)
    return Network((conv, pool, dense), name="digits_cnn")


def export_onnx(params: Params, path: Path) -> None:
    """Write the network as ONNX with qverify's writer: opset 13, float32 tensors, input "input"
    [1, 1, 8, 8] (pixel levels / 16), output "output" [1, 10]; Conv -> Relu -> MaxPool -> Flatten
    -> Gemm (transB = 1), the form onnxruntime's quantizer fuses into QLinearConv and QGemm."""
    write_onnx(network_of(as_float32(params)), path, float32=True, gemm=True)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


# ---------------------------------------------------------------- reading the committed file back


def load_params(path: Path = HERE / NETWORK_FILE) -> Params:
    """The parameters of a file written by `export_onnx` (float32 values, as float64 arrays)."""
    conv, _, dense = read_onnx(path).layers
    return {"conv_w": conv.weights, "conv_b": conv.bias, "fc_w": dense.weights, "fc_b": dense.bias}


def onnxruntime_logits(path: Path, x_norm: np.ndarray) -> np.ndarray:
    """onnxruntime's logits for inputs (n, 1, 8, 8), one image at a time (the model's batch is 1)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    images = x_norm.astype(np.float32)
    return np.vstack([session.run(["output"], {"input": image[None]})[0] for image in images])


def correctly_classified_test_images(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first n test images (in the split's order) that the committed float model classifies
    correctly: their indices into load_digits(), the images (n, 8, 8) as float pixel levels 0..16,
    and their labels. Reads digits_cnn.onnx (no training)."""
    x, y, _, test_idx = dataset()
    with threadpool_limits(limits=1):
        predicted = logits_of(load_params(), normalise(x[test_idx])).argmax(axis=1)
    chosen = test_idx[predicted == y[test_idx]][:n]
    if len(chosen) < n:
        raise ValueError(f"only {len(chosen)} test images are classified correctly, {n} asked")
    return chosen, x[chosen].reshape(-1, SIDE, SIDE).astype(float), y[chosen]


# ---------------------------------------------------------------- main


def keep_freed_memory() -> None:
    """Speed only: ask glibc's malloc to keep freed memory for reuse rather than hand it back to the
    system. Every loss evaluation allocates and frees the same few-MB arrays; where page faults are
    expensive (virtual machines, sandboxes) this halves the training time. No effect on the results;
    does nothing without glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: keep up to 64 MB free at the top of the heap
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks below 32 MB come from the heap


def main() -> int:
    keep_freed_memory()
    start = time.perf_counter()
    x, y, train_idx, test_idx = dataset()
    x_all, x_train, x_test = normalise(x), normalise(x[train_idx]), normalise(x[test_idx])
    with threadpool_limits(limits=1):
        trained, result = train(x_train, y[train_idx])
        training_time = time.perf_counter() - start
        params, scales = rebalance(trained, x_train)
        path = HERE / NETWORK_FILE
        export_onnx(params, path)
        net = load_params(path)  # report what was written
        exported = as_float32(params)
        same_params = all(np.array_equal(net[key], exported[key]) for key in SHAPES)
        same_class = np.array_equal(
            logits_of(net, x_all).argmax(axis=1), logits_of(trained, x_all).argmax(axis=1)
        )
        runtime = onnxruntime_logits(path, x_test)
        reference = logits_of(net, x_test)
        pre_train = largest_pre_activations(net, x_train)
        pre_all = largest_pre_activations(net, x_all)
        bounds = interval_bounds(net)
        correct = {
            split: int(np.sum(logits_of(net, normalise(x[idx])).argmax(axis=1) == y[idx]))
            for split, idx in (("train", train_idx), ("test", test_idx))
        }
    elapsed = time.perf_counter() - start

    print(
        f"numpy {np.__version__}, scipy {scipy.__version__}, scikit-learn {sklearn.__version__}, "
        f"onnx {onnx.__version__}, python {sys.version.split()[0]}"
    )
    print(
        f"L-BFGS-B: {result.nit} iterations, {result.nfev} evaluations, loss {result.fun:.6f}: {result.message}"
    )
    print(f"layer scales (rebalance): {scales}")
    print(f"initializers read back equal the float32 parameters: {same_params}")
    print(f"exported (float32) network classifies every image as the trained (float64) one: {same_class}")
    difference = float(np.abs(runtime - reference).max())
    agree = np.array_equal(runtime.argmax(axis=1), reference.argmax(axis=1))
    print(
        f"onnxruntime vs numpy on the {len(test_idx)} test images: largest |difference| {difference:.2e}, "
        f"same class: {agree}"
    )
    largest = ", ".join(f"{key} {np.abs(net[key]).max():.3f}" for key in SHAPES)
    print(f"largest |parameter|: {largest}")
    print("| split | correct | accuracy |")
    for split, idx in (("train", train_idx), ("test", test_idx)):
        print(f"| {split} | {correct[split]}/{len(idx)} | {100 * correct[split] / len(idx):.2f}% |")
    print("| largest pre-activation magnitude | Conv | Gemm (logits) |")
    print(f"| training images | {pre_train[0]:.3f} | {pre_train[1]:.3f} |")
    print(f"| all 1797 images | {pre_all[0]:.3f} | {pre_all[1]:.3f} |")
    print(f"| any input in [0, 1]^64 (interval bound) | {bounds[0]:.3f} | {bounds[1]:.3f} |")
    print(f"elapsed: {elapsed:.1f} s, of which training {training_time:.1f} s")
    if difference > ONNX_TOLERANCE or not agree or not same_params or not same_class:
        raise SystemExit("the ONNX file does not match the numpy network")
    if max(pre_train) > HEADROOM:
        raise SystemExit(f"a pre-activation exceeds HEADROOM = {HEADROOM}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
