#!/usr/bin/env python3
"""Cross-check qpack's Go safetensors package against the reference Python library.

Usage: python3 safetensors_roundtrip.py QPACK_WRITTEN.safetensors QPACK_WRITTEN_E8M0.safetensors OUT_DIR

1. Reads QPACK_WRITTEN (written by qpack's Go writer, see
   safetensors/pycheck_test.go) with the Python `safetensors` library, three
   ways (the raw `deserialize`, numpy and torch), and compares every value
   against the literals below, which were written independently of the Go code.
   QPACK_WRITTEN_E8M0 holds an F8_E8M0 tensor, kept apart so that a library
   without that dtype can still check the main file.
2. Writes OUT_DIR/python_written.safetensors with the Python library (several
   dtypes incl. bf16 and f8, a zero-size tensor, a scalar, metadata); the Go
   test TestPycheckPython reads it back and checks every byte.

Exits 1 if any check fails. Needs numpy, torch, safetensors; no network.
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np
import torch
import safetensors
from safetensors import safe_open
from safetensors.torch import load_file, save, save_file

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


# name -> (header dtype, shape, values as Python numbers), in the order the Go
# writer was given them.
EXPECTED = {
    "bf16": ("BF16", [4], [1.0, -2.0, 0.5, 3.25]),
    "u8": ("U8", [2, 2], [[0, 1], [254, 255]]),
    "f64": ("F64", [3], [1.5, -2.25, 0.1]),
    "empty": ("F32", [0, 4], []),
    "f32": ("F32", [2, 3], [[0.0, 1.0, -1.0], [0.5, 3.25, -1024.0]]),
    "f16": ("F16", [4], [1.0, -2.0, 0.5, 65504.0]),
    "i64": ("I64", [3], [-1, 2**40, 2**63 - 1]),
    "i32": ("I32", [3], [-(2**31), 0, 123456]),
    "i16": ("I16", [2], [-32768, 32767]),
    "i8": ("I8", [4], [-128, -1, 0, 127]),
    "u64": ("U64", [2], [0, 2**64 - 1]),
    "u32": ("U32", [2], [0, 2**32 - 1]),
    "u16": ("U16", [2], [0, 65535]),
    "bool": ("BOOL", [3], [True, False, True]),
    "f8_e4m3": ("F8_E4M3", [4], [1.0, -2.0, 0.5, 448.0]),
    "f8_e5m2": ("F8_E5M2", [4], [1.0, -2.0, 0.5, 3.0]),
    "scalar": ("F32", [], 7.5),
}
METADATA = {"format": "pt", "producer": "qpack"}
NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
    "U8": np.uint8, "BOOL": np.bool_,
}
TORCH_DTYPES = {
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
}


def read_ours(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    check(n % 8 == 0, f"header length {n} is a multiple of 8")
    hdr_bytes = raw[8:8 + n]
    check(hdr_bytes.rstrip(b" ").endswith(b"}") and hdr_bytes.startswith(b"{"),
          "header is one JSON object padded with spaces")
    hdr = json.loads(hdr_bytes)
    check(list(hdr.keys()) == ["__metadata__"] + list(EXPECTED),
          "header keys: __metadata__ then tensors in spec order")
    pos = 0
    for name in EXPECTED:
        b, e = hdr[name]["data_offsets"]
        if b != pos:
            break
        pos = e
    check(pos == len(raw) - 8 - n, "data area is the tensors back to back in spec order")

    # 1. The raw deserializer: dtype strings, shapes, bytes, no framework.
    if hasattr(safetensors, "deserialize"):
        got = {name: info for name, info in safetensors.deserialize(raw)}
        check(set(got) == set(EXPECTED), "deserialize: tensor names")
        for name, (dt, shape, _) in EXPECTED.items():
            info = got.get(name, {})
            check(info.get("dtype") == dt and list(info.get("shape", [-1])) == shape,
                  f"deserialize: {name} dtype {info.get('dtype')} shape {info.get('shape')}")
    else:
        print("skip deserialize: not in this safetensors version")

    # 2. numpy for the types numpy has.
    with safe_open(path, framework="np") as f:
        check(f.metadata() == METADATA, f"metadata {f.metadata()}")
        for name, (dt, shape, vals) in EXPECTED.items():
            if dt not in NUMPY_DTYPES:
                continue
            a = f.get_tensor(name)
            want = np.array(vals, dtype=NUMPY_DTYPES[dt]).reshape(shape)
            check(a.dtype == want.dtype and list(a.shape) == shape and np.array_equal(a, want),
                  f"numpy: {name} {a.dtype} {list(a.shape)} = {a.tolist()}")

    # 3. torch for bf16 and the f8 types (compared after widening to float32).
    with safe_open(path, framework="pt") as f:
        for name, (dt, shape, vals) in EXPECTED.items():
            if dt not in TORCH_DTYPES:
                continue
            tdt = getattr(torch, TORCH_DTYPES[dt], None)
            if tdt is None:
                print(f"skip torch: {name}: torch {torch.__version__} has no {TORCH_DTYPES[dt]}")
                continue
            try:
                t = f.get_tensor(name)
            except Exception as e:  # an old safetensors without this dtype
                check(False, f"torch: {name}: {e}")
                continue
            check(t.dtype == tdt and list(t.shape) == shape and t.float().tolist() == vals,
                  f"torch: {name} {t.dtype} {list(t.shape)} = {t.float().tolist()}")

    # 4. Full-file load (the library's strict whole-file validation).
    try:
        d = load_file(path)
        check(sorted(d) == sorted(EXPECTED), f"load_file: {len(d)} tensors")
    except Exception as e:
        check(False, f"load_file: {e}")


def read_ours_e8m0(path):
    try:
        with safe_open(path, framework="pt") as f:
            t = f.get_tensor("f8_e8m0")
            u = f.get_tensor("after")
    except Exception as e:
        print(f"skip F8_E8M0: this safetensors cannot read it ({type(e).__name__}: {e})")
        return
    raw = t.view(torch.uint8).tolist()
    check(raw == [127, 124, 137], f"torch: f8_e8m0 {t.dtype} bytes {raw}")
    try:
        vals = t.float().tolist()
    except Exception as e:
        print(f"F8_E8M0 -> float32 not supported by torch {torch.__version__}: {e}")
        vals = [2.0 ** (b - 127) for b in raw]
    check(t.dtype == getattr(torch, "float8_e8m0fnu", None) and vals == [1.0, 0.125, 1024.0],
          f"torch: f8_e8m0 {t.dtype} = {vals}")
    check(u.tolist() == [9, 8], f"torch: after f8_e8m0 = {u.tolist()}")


def write_python(out_dir):
    tensors = {
        "py.bf16": torch.tensor([1.0, -2.0, 0.5, 3.25], dtype=torch.bfloat16),
        "py.f16": torch.tensor([[1.0, -0.5], [65504.0, 0.0]], dtype=torch.float16),
        "py.f32": (torch.arange(6, dtype=torch.float32) * 0.25).reshape(2, 3),
        "py.f64": torch.tensor([1.0 / 3.0, -1e300], dtype=torch.float64),
        "py.i64": torch.tensor([-5, 2**40], dtype=torch.int64),
        "py.i32": torch.tensor([-7, 7], dtype=torch.int32),
        "py.i16": torch.tensor([-300, 300], dtype=torch.int16),
        "py.i8": torch.tensor([-3, 3], dtype=torch.int8),
        "py.u8": torch.tensor([0, 200, 255], dtype=torch.uint8),
        "py.bool": torch.tensor([True, False]),
        "py.f8_e4m3": torch.tensor([1.0, -2.0, 0.5, 448.0]).to(torch.float8_e4m3fn),
        "py.f8_e5m2": torch.tensor([1.0, -2.0, 0.5, 3.0]).to(torch.float8_e5m2),
        "py.empty": torch.zeros((0, 3), dtype=torch.float32),
        "py.scalar": torch.tensor(2.5, dtype=torch.float32),
    }
    optional = [
        ("py.u16", lambda: torch.tensor([0, 65535], dtype=torch.int32).to(torch.uint16)),
        ("py.u32", lambda: torch.tensor([1, 2**32 - 1], dtype=torch.int64).to(torch.uint32)),
        ("py.u64", lambda: torch.tensor([1, -1], dtype=torch.int64).view(torch.uint64)),
        ("py.f8_e8m0", lambda: torch.tensor([1.0, 0.125, 1024.0]).to(torch.float8_e8m0fnu)),
    ]
    for name, make in optional:
        try:
            t = make()
            save({name: t})  # does this safetensors know the dtype?
            tensors[name] = t
            print(f"optional {name}: written ({t.dtype})")
        except Exception as e:
            print(f"optional {name}: not written ({type(e).__name__}: {e})")
    path = os.path.join(out_dir, "python_written.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    print(f"wrote {path}: {len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}")
    print("header:", raw[8:8 + n].decode())


def main():
    ours, ours_e8m0, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    print(f"python {sys.version.split()[0]}, safetensors {getattr(safetensors, '__version__', '?')}, "
          f"torch {torch.__version__}, numpy {np.__version__}")
    raw = open(ours, "rb").read()
    print(f"reading {os.path.basename(ours)}: {len(raw)} bytes, sha256 {hashlib.sha256(raw).hexdigest()}")
    read_ours(ours)
    read_ours_e8m0(ours_e8m0)
    write_python(out_dir)
    if failures:
        print(f"{len(failures)} check(s) FAILED")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
