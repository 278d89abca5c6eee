"""st_io.py — a safetensors reader for the PyTorch twins (no dependency on the safetensors package):
read_safetensors(path) -> ({name: torch tensor}, {metadata})."""
import json
import struct

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I8": np.int8}


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
