"""st_io.py — safetensors for the PyTorch twins (no dependency on the safetensors package):
read_safetensors(path) -> ({name: torch tensor}, {metadata}); write_safetensors(path, {name: torch tensor})."""
import json
import struct

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I8": np.int8}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out, meta = {}, header.pop("__metadata__", {})
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype=DTYPES[e["dtype"]]).reshape(e["shape"]).copy())
    return out, meta


def write_safetensors(path, tensors):
    """tensors {name: torch tensor} (float32/64, int8/32) as one file, in name order, 8-byte aligned"""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name].detach().cpu().contiguous().numpy()
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
