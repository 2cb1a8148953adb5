"""Write changed int8 integers back into the TFLite model they came from (`qverify repair`).

As for ONNX (`qverify.io.onnx_int8_patch`), a repaired model is the user's own file with the changed
weights and biases replaced, byte for byte in place: every other tensor, scale, zero point, option
and the flatbuffer's layout stay what the converter wrote, so the LiteRT interpreter runs it as it
ran the original. The reader says where each MAC layer's integers lie (`tflite_reader.MacSite`: the
weight and bias tensors of its operator, and how the IR's weight layout maps back to the file's);
an int8 weight or int32 bias tensor keeps its size, so its bytes are overwritten where the file
holds them. A buffer that another tensor shares (a converter may deduplicate equal constants) is
refused rather than changed for both. The written file is read back and must hold exactly the
intended integers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qverify.errors import InputError, InternalError
from qverify.io.tflite_reader import read_tflite_sites
from qverify.network.model import Network
from qverify.network.qparams import MacQuant


def _macs(net: Network) -> dict[int, MacQuant]:
    if net.quantization is None:
        raise InputError(f"{net.name}: not an int8 model")
    return {k: q for k, q in enumerate(net.quantization.layers) if isinstance(q, MacQuant)}


def write_tflite_int8_changes(
    source: str | Path, original: Network, changed: Network, path: str | Path
) -> Path:
    """Copy the TFLite file `source` (read as `original`) to `path` with the weights and biases of
    `changed` (the same network with some integers changed), and check the result.

    :raises InputError: the source is not the model `original` was read from, a changed tensor's
        buffer is shared, or a bias changes where the model has none."""
    network, model, sites = read_tflite_sites(source)
    if network.digest() != original.digest():
        raise InputError(f"{source}: not the model the repair started from (its digest differs)")
    before, after = _macs(original), _macs(changed)
    if before.keys() != after.keys():
        raise InputError(f"{changed.name}: its int8 layers are not those of {source}")
    data = bytearray(Path(source).read_bytes())
    users: dict[int, int] = {}
    for tensor in model.tensors:
        users[tensor.buffer] = users.get(tensor.buffer, 0) + 1
    for site in sites:
        old, new = before[site.node], after[site.node]
        for kind, index, old_values, new_values, dtype in (
            ("weights", site.weights, site.file_weights(old.weights), site.file_weights(new.weights), "<i1"),
            ("bias", site.bias, old.bias, new.bias, "<i4"),
        ):
            if np.array_equal(old_values, new_values):
                continue
            if index < 0:
                raise InputError(f"{old.what}: the model has no bias to change")
            tensor = model.tensors[index]
            if users.get(tensor.buffer, 0) != 1:
                raise InputError(
                    f"{old.what}: its {kind} buffer {tensor.buffer} is shared with another tensor"
                )
            values = np.asarray(new_values, dtype=np.int64)
            info = np.iinfo(np.dtype(dtype))
            if values.min() < info.min or values.max() > info.max:
                raise InputError(f"{old.what}: changed {kind} leave the {np.dtype(dtype).name} range")
            blob = values.astype(dtype).tobytes()
            if tensor.data is None or len(blob) != len(tensor.data):
                raise InternalError(
                    f"{old.what}: {kind} of {len(blob)} bytes for a tensor of {len(tensor.data or b'')}"
                )
            data[tensor.data_offset : tensor.data_offset + len(blob)] = blob
    path = Path(path)
    try:
        path.write_bytes(bytes(data))
    except OSError as error:
        raise InputError(f"cannot write {path}: {error.strerror}") from None
    written = _macs(read_tflite_sites(path)[0])
    for node, want in after.items():
        got = written[node]
        if not (np.array_equal(got.weights, want.weights) and np.array_equal(got.bias, want.bias)):
            raise InternalError(f"{path}: {want.what} does not read back as the intended integers")
    return path
