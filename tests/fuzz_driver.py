"""Run risky kzlab cases in child processes, and build damaged GGUF files for them.

A case that crashes ggml or gguf-py kills its process with a signal instead of raising, so the cases run
in a child (`python tests/fuzz_driver.py CASES.json`), many per child; the parent reads one JSON line per
finished case, and when the child dies by a signal it records the case that was running as a crash and
starts a new child for the rest.

`GGUF` is a small byte-level rewriter (parse, change, write back) used to build the damaged files.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---- a byte-level GGUF rewriter ---------------------------------------------------------------------------------


@dataclass
class GGUF:
    """A GGUF file as editable parts: metadata entries keep their raw value bytes, tensors their data."""

    version: int = 3
    alignment: int = 32
    kvs: list[list[Any]] = field(default_factory=list)  # [key, value type, raw value bytes]
    tensors: list[list[Any]] = field(default_factory=list)  # [name, dims (ggml order), type id, bytes]

    @classmethod
    def read(cls, path: str | Path) -> GGUF:
        from kzlab.formats.prescan import prescan_gguf

        h = prescan_gguf(path)
        buf = Path(path).read_bytes()
        g = cls(h.version, h.alignment)
        g.kvs = [[kv.key, kv.value_type, buf[kv.value_offset : kv.end]] for kv in h.kvs]
        for t in h.tensors:
            start = h.data_start + t.data_offset
            g.tensors.append([t.name, list(t.dims), t.type_id, buf[start : start + t.nbytes]])
        return g

    def tensor(self, name: str) -> list[Any]:
        return next(t for t in self.tensors if t[0] == name)

    def drop(self, name: str) -> GGUF:
        self.tensors = [t for t in self.tensors if t[0] != name]
        return self

    def set_string(self, key: str, value: str) -> GGUF:
        raw = value.encode()
        return self._set(key, 8, struct.pack("<Q", len(raw)) + raw)

    def set_u32(self, key: str, value: int) -> GGUF:
        return self._set(key, 4, struct.pack("<I", value))

    def set_f32(self, key: str, value: float) -> GGUF:
        return self._set(key, 6, struct.pack("<f", value))

    def _set(self, key: str, vtype: int, raw: bytes) -> GGUF:
        for kv in self.kvs:
            if kv[0] == key:
                kv[1], kv[2] = vtype, raw
                return self
        self.kvs.append([key, vtype, raw])
        return self

    def tobytes(self) -> bytes:
        out = bytearray(b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kvs)))
        for key, vtype, raw in self.kvs:
            k = key.encode()
            out += struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + raw
        offsets, pos = [], 0
        for _, _, _, data in self.tensors:
            offsets.append(pos)
            pos += (len(data) + self.alignment - 1) // self.alignment * self.alignment
        for (name, dims, type_id, _), off in zip(self.tensors, offsets, strict=True):
            n = name.encode()
            out += struct.pack("<Q", len(n)) + n + struct.pack("<I", len(dims))
            out += struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", type_id, off)
        out += b"\0" * (-len(out) % self.alignment)
        for _, _, _, data in self.tensors:
            out += data + b"\0" * (-len(data) % self.alignment)
        return bytes(out)

    def write(self, path: str | Path) -> Path:
        Path(path).write_bytes(self.tobytes())
        return Path(path)


# ---- the parent side ----------------------------------------------------------------------------------------


def run_cases(cases: list[dict], timeout: float = 600.0, workdir: str | Path | None = None) -> dict[str, dict]:
    """Run every case in child processes; returns {id: result}. A result's `status` is `ok`, `error`
    (an exception: `etype`, `kz` = is a KzlabError, `msg`), `crash` (killed by `signal`) or `hang`."""
    results: dict[str, dict] = {}
    todo = list(cases)
    while todo:
        with tempfile.NamedTemporaryFile("w", suffix=".json", dir=workdir, delete=False) as f:
            json.dump(todo, f)
        env = dict(os.environ, PYTHONWARNINGS="default", GGML_NO_BACKTRACE="1")
        try:
            p = subprocess.run(
                [sys.executable, __file__, f.name],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                cwd=Path(__file__).parent.parent,
            )
            out, rc = p.stdout, p.returncode
            err = p.stderr
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc, err = None, ""
        finally:
            os.unlink(f.name)
        running = None
        for line in out.splitlines():
            if line.startswith("START "):
                running = line[6:]
            elif line.startswith("{"):
                r = json.loads(line)
                results[r["id"]] = r
                running = None
        done = {c["id"] for c in todo if c["id"] in results}
        if running is None and len(done) < len(todo) and rc == 0:
            raise RuntimeError(f"driver stopped early without a crash:\n{err[-2000:]}")
        if running is not None:
            if rc is None:
                results[running] = {"id": running, "status": "hang"}
            elif rc < 0:
                results[running] = {"id": running, "status": "crash", "signal": signal.Signals(-rc).name}
            else:
                results[running] = {"id": running, "status": "crash", "signal": f"exit {rc}", "stderr": err[-2000:]}
            done.add(running)
        todo = [c for c in todo if c["id"] not in done]
    return results


# ---- the child side -----------------------------------------------------------------------------------------


def _codes(spec: Any, hp: Any):
    import numpy as np

    if isinstance(spec, dict):
        a = np.zeros(spec["shape"], dtype=spec.get("dtype", "int32"))
        for (i, j), v in spec.get("set", []):
            a[i, j] = v
        return a
    if isinstance(spec, int):
        return np.zeros((hp.num_quantizers, spec), dtype=np.int32)
    return spec  # a JSON value given as is (a string, a nested list...)


_BASES: dict[str, bytes] = {}


def mutated(spec: dict) -> bytes:
    """The bytes of `spec['base']` after its ops: ["set", offset, hex] overwrites, ["splice", offset,
    n_deleted, hex] deletes and inserts, ["trunc", length] cuts the file."""
    if spec["base"] not in _BASES:
        _BASES[spec["base"]] = Path(spec["base"]).read_bytes()
    b = bytearray(_BASES[spec["base"]])
    for op in spec["ops"]:
        if op[0] == "set":
            new = bytes.fromhex(op[2])
            b[op[1] : op[1] + len(new)] = new
        elif op[0] == "splice":
            b[op[1] : op[1] + op[2]] = bytes.fromhex(op[3])
        elif op[0] == "trunc":
            del b[op[1] :]
    return bytes(b)


def run_one(case: dict) -> None:
    """Load (and optionally decode) as the case says; exceptions propagate to the caller."""
    if "mutate" in case:
        Path(case["path"]).write_bytes(mutated(case["mutate"]))
        try:
            _load_and_decode(case)
        finally:
            Path(case["path"]).unlink(missing_ok=True)
        return
    _load_and_decode(case)


def _load_and_decode(case: dict) -> None:
    import kzlab
    from kzlab.loader import load_model

    model = load_model(case["path"], **case.get("load", {}))
    if "decode" not in case and "decoder" not in case:
        return
    with kzlab.Decoder(model, **{"threads": 1, **case.get("decoder", {})}) as d:
        if "decode" in case:
            try:
                d.decode(_codes(case["decode"], model.hparams), **case.get("decode_kw", {}))
            finally:
                if case.get("check_next", True):  # a refusal must leave the decoder usable: if this
                    d.decode(_codes(2, model.hparams))  # raises, it replaces the refusal and the case fails


def main(path: str) -> None:
    import warnings

    from kzlab.errors import KzlabError

    cases = json.loads(Path(path).read_text())
    for case in cases:
        print(f"START {case['id']}", flush=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run_one(case)
                r = {"status": "ok"}
            except Exception as e:
                r = {"status": "error", "etype": type(e).__name__, "kz": isinstance(e, KzlabError), "msg": str(e)}
        r["id"] = case["id"]
        r["warnings"] = [str(w.message) for w in caught][:20]
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
