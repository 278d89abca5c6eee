#!/usr/bin/env python3
"""Cross-check gpudl's safetensors reader and writer against the reference
implementation (pip install safetensors numpy). Not part of `make test`.

    python3 tests/safetensors_check.py read FILE    # a file gpudl wrote: print
                                                    # name dtype shape sum, metadata
    python3 tests/safetensors_check.py write FILE   # write a file for gpudl to read

Each printed line is "name dtype [shape] sum=S", names sorted, then
"meta key=value" lines, so the output can be diffed against the same listing
made by a C program that uses gdl_st_read.
"""
import sys

import numpy as np
from safetensors.numpy import load_file, save_file
from safetensors import safe_open


def listing(tensors, metadata):
    for name in sorted(tensors):
        a = tensors[name]
        dt = {np.float32: "F32", np.float64: "F64", np.float16: "F16", np.int64: "I64",
              np.int32: "I32", np.int16: "I16", np.int8: "I8", np.uint8: "U8",
              np.bool_: "BOOL", np.uint16: "U16", np.uint32: "U32", np.uint64: "U64"}[a.dtype.type]
        shape = ",".join(str(d) for d in a.shape)
        s = float(a.astype(np.float64).sum()) if a.size else 0.0
        print(f"{name} {dt} [{shape}] sum={s:.6g}")
    for k in sorted(metadata or {}):
        print(f"meta {k}={metadata[k]}")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write"):
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[2]
    if sys.argv[1] == "read":
        tensors = load_file(path)
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata()
        listing(tensors, metadata)
    else:
        tensors = {
            "conv.weight": np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2) * 0.5 - 3.0,
            "conv.bias": np.array([1.25, -0.5], dtype=np.float32),
            "bn.num_batches_tracked": np.array(7, dtype=np.int64),  # a 0-d tensor
            "half": np.array([[1.0, -2.0], [0.5, 65504.0]], dtype=np.float16),
            "ids": np.array([3, -1, 2**40], dtype=np.int64),
            "pixels": np.arange(10, dtype=np.uint8),
            "mask": np.array([True, False, True]),
            "empty": np.zeros((0, 4), dtype=np.float32),
            "f64": np.linspace(0, 1, 5),
            "w\u00e9ight \"q\"": np.ones(3, dtype=np.int32),
        }
        metadata = {"format": "np", "note": "h\u00e9llo \"quoted\" \\ back\nslash"}
        save_file(tensors, path, metadata=metadata)
        listing(tensors, metadata)
    return 0


if __name__ == "__main__":
    sys.exit(main())
