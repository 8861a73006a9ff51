"""The compute model of a GPU (`--gpu`, docs/compute.md): how long each compute op's kernel takes, by op class, and
how fast the host issues them.

A roofline at datasheet peak is 2-8x off on real steps: no kernel reaches peak, a small matrix leaves
multiprocessors idle, a convolution's backward or a BatchNorm runs far below what its FLOPs or bytes say, and an
eager PyTorch step cannot run faster than its host issues kernels. So each op class (network/op_classes.py) has
its own constants, the device file's `efficiency` mapping (fitted from real profiles by `astra-compile
calibrate-compute`; the presets' values say where they were fitted):

- tensor-core classes (matmul, attention, attention_backward, conv, conv_backward): `CLASS.DTYPE` (or `CLASS` for
  every dtype) is the fraction of the dtype's dense peak a large op reaches (counted in torch's FLOPs). A matmul
  with known GEMM dimensions also pays for its shape: tiles of 128 (64 where a dimension is smaller, at the lower
  rate of a smaller tile's fewer multiply-adds per element loaded) padded at the matrix edges, waves of tiles over
  the `multiprocessors`, two at a time on each (split along K when there are fewer tiles than that, as cuBLAS
  does), and `matmul.k_overhead`, the prologue and epilogue of a tile in multiply-adds of K: a tile of depth K
  costs K + k_overhead. Its bytes take `elementwise`'s bandwidth; the op takes the larger. A tensor-core GEMM
  (tf32, bf16, fp16, fp8) one of whose dimensions is not a multiple of 16 bytes of its elements runs at
  `matmul.unaligned` of that rate: cuBLAS's fast kernels load 16-byte vectors (BERT's 30522-word decoder in bf16
  ran at 0.31-0.41 of the aligned rate on an H200; fp32 without TF32 does not use them and is unaffected).
- memory classes (norm, batch_norm, elementwise, optimizer, cast, broadcast): `CLASS` is the fraction of the memory
  bandwidth its kernels reach, counting the bytes the op reads and writes once (a batch norm's extra passes show
  as its lower fraction). `broadcast.DTYPE` and `batch_norm.DTYPE` too: the broadcast kernel is bound by
  elements, so its fraction of the bandwidth depends on the element's size, and a 16-bit batch norm runs other
  kernels than an fp32 one (PER_DTYPE_MEMORY).
- `launch_us`: added to every kernel (launch latency and the tail of a grid), and `host_us`: the host time to
  issue one op (eager dispatch, autograd and launch; `CLASS.host_us` for one class: a cuDNN convolution's
  backward costs the host far more than an add). The host issues ops one after another; an op's kernel starts no
  earlier than its issue (the workload engine's compute stream), so a step of many small ops is host-bound.
  `view_us`: the host time of each kernel-less op (a view, an alias) dispatched before an op (the op's `views`),
  added to that op's host time.
- attention (attention, attention_backward) of known shapes (the scores' batch, query and key length and head
  size, op_classes.gemm_dims) pays for its blocks: the kernels run the scores in blocks of ATTENTION_BLOCK queries
  by ATTENTION_BLOCK keys, padded at the edges, and each row of blocks costs `CLASS.s_overhead` more keys (its
  prologue and epilogue: loading the queries, the softmax's final rescaling and the output), times 128 / head
  size (the fixed cost is per row, the work per key grows with the head size); fp32 runs the memory-efficient
  kernel, whose overhead measured 4-29 keys, taken as none. One that masked causally (`is_causal=True`; the op's
  `causal`) runs only the blocks on and below the diagonal, the diagonal's whole. Short sequences run far below
  the large-op rate (an H200's bf16 flash forward: 0.14-0.21 of the peak at 128-197 tokens, 0.33 at 2048;
  benchmarks/data/h200_kernels_short_attention.json). Of unknown shapes, a causal op runs CAUSAL_WORK (half) of
  the FLOPs torch's counter gives it, which counts attention unmasked. The FLOPs reported stay the counted ones.

Times are ns; peaks TFLOP/s per network/dtypes code; bandwidth bytes/ns. The device file reader
(network/devices.py) checks a mapping with `check_efficiency`; what a mapping leaves out is the h200 preset's
(`DEFAULTS`, read from network/gpus.json, the one place those numbers live).
"""
from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from .dtypes import DTYPES
from .errors import UserError, show
from .op_classes import ATTENTION_CLASSES, CLASSES, CODE as CLASS_CODE, TENSOR_CORE

MEMORY_CLASSES = tuple(c for c in CLASSES if c not in TENSOR_CORE)
# the classes cuBLAS runs: a tile's k_overhead, K split over idle slots, matmul.unaligned. A convolution pays the
# tiles and waves of the implicit GEMM cuDNN runs (op_classes.gemm_dims; its fractions were fitted with them), not
# these: cuDNN picks among implicit GEMM, Winograd and FFT algorithms per shape
GEMM_CLASSES = ("matmul",)
TILE, SMALL_TILE = 128, 64
MIN_SPLIT_K = 256   # cuBLAS splits K only while each part keeps at least this depth
# ... and the tiles of a last, partial wave only into parts of at least this depth: an H200's bf16 GEMMs of 1.45 and
# 2.25 waves ran as if the tail were spread over the whole GPU at K of 2304 and more, and kept most of it at K = 768
# (ViT-B's and BERT-base's layers, benchmarks/data/h200_vit_b16_bf16_kineto.json.gz)
MIN_TAIL_SPLIT_K = 1024
# Tiles a multiprocessor runs at once to reach its rate (one hides too little latency: an H200's fp32 GEMM of
# M = 64, one 128x64 tile per SM after split-K, runs at half the rate of a large one, profiled)
TILES_PER_SM = 2
# The share of an attention op's counted FLOPs its kernels run when it masks causally: torch.utils.flop_counter
# counts scaled-dot-product attention unmasked, but flash and memory-efficient kernels skip the blocks above the
# diagonal, about half of them (an H200's fp32 _efficient_attention_forward, B=1 S=2048 H=16 D=128: 0.515 ms for
# 34.4 counted GFLOP, 67 TFLOP/s counted, the whole fp32 peak: 33 executed)
CAUSAL_WORK = 0.5
# The query and key block of the flash and cuDNN kernels (FlashAttention-2's tiles on sm80/sm90)
ATTENTION_BLOCK = 128
# Elements of each dtype in 16 bytes, the vector a tensor-core GEMM's fast kernels load: a dimension not a multiple
# of it takes `matmul.unaligned` (0: no such kernels, fp64 and fp32 without TF32 run the same either way)
ALIGN = {"fp64": 0, "fp32": 0, "tf32": 4, "bf16": 8, "fp16": 8, "fp8": 16}
_ALIGN_BY_CODE = np.array([ALIGN[d] for d in DTYPES])   # ALIGN indexed by dtype code
# Memory classes whose bandwidth fraction is also given per dtype: the general elementwise kernel of a broadcast
# operand runs at about as many elements a second whatever their size (an H200: 0.34 of the bandwidth for 16-bit
# elements, 0.56 for fp32; benchmarks/data/h200_broadcast.json); a batch norm of bf16 or fp16 activations with
# fp32 weights (autocast's) runs PyTorch's own kernels, not cuDNN's (an H200: 0.064 of the bandwidth against 0.21
# in fp32; ResNet-18's profiles)
PER_DTYPE_MEMORY = ("broadcast", "batch_norm")

# Each key: (low, high, meaning); a fraction's low bound is exclusive.
KEYS: dict[str, tuple] = {}
for _c in TENSOR_CORE:
    KEYS[_c] = (0.0, 1.0, f"fraction of peak a large {_c} op reaches, every dtype")
    for _d in DTYPES:
        KEYS[f"{_c}.{_d}"] = (0.0, 1.0, f"fraction of the {_d} peak a large {_c} op reaches")
for _c in ATTENTION_CLASSES:
    KEYS[f"{_c}.s_overhead"] = (0.0, 1e5, f"a {_c} op's fixed cost per row of blocks, in keys at head size 128 "
                                         "(fp16, bf16, fp8: flash and cuDNN kernels)")
for _c in GEMM_CLASSES:
    KEYS[f"{_c}.k_overhead"] = (0.0, 1e5, f"a {_c} tile's fixed cost, in multiply-adds of K")
    KEYS[f"{_c}.unaligned"] = (0.0, 1.0, f"fraction of its rate a tensor-core {_c} keeps when a dimension is not a "
                                         "multiple of 16 bytes")
for _c in MEMORY_CLASSES:
    KEYS[_c] = (0.0, 1.0, f"fraction of the memory bandwidth {_c} kernels reach")
for _c in PER_DTYPE_MEMORY:
    for _d in DTYPES:
        KEYS[f"{_c}.{_d}"] = (0.0, 1.0, f"fraction of the memory bandwidth {_c} kernels of {_d} reach")
KEYS["launch_us"] = (0.0, 1e3, "microseconds added to every kernel")
KEYS["host_us"] = (0.0, 1e4, "microseconds of host time to issue one op")
for _c in CLASSES:
    KEYS[f"{_c}.host_us"] = (0.0, 1e4, f"microseconds of host time to issue one {_c} op (default: host_us)")
KEYS["view_us"] = (0.0, 1e3, "microseconds of host time to dispatch one view (an op that launches no kernel)")
FRACTIONS = tuple(k for k, v in KEYS.items() if v[1] == 1.0)

# What a key a device file leaves out takes: the h200 preset's (network/gpus.json, fitted there to real H200 runs,
# its sources say how). It gives every class's value; a device file of another GPU should give its own
# (astra-compile calibrate-compute writes them).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpus.json"), encoding="utf-8") as _f:
    DEFAULTS = json.load(_f)["presets"]["h200"]["efficiency"]


def check_efficiency(where: str, value) -> tuple:
    """The device file's `efficiency` mapping as sorted (key, value) pairs; one UserError for an unknown key or a
    value out of its range."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise UserError(f"{where}: field 'efficiency' is {show(value)}; expected a mapping of key: number "
                        "(docs/compute.md)")
    out = []
    for key, v in value.items():
        if key not in KEYS:
            raise UserError(f"{where}: unknown field {show(f'efficiency.{key}')}; expected an op class "
                            f"({', '.join(CLASSES)}), CLASS.DTYPE, matmul.k_overhead, matmul.unaligned, launch_us, "
                            "host_us, CLASS.host_us or view_us")
        low, high, meaning = KEYS[key]
        fraction = key in FRACTIONS
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or not (low < v <= high if fraction else low <= v <= high):
            span = f"in ({low:g}, {high:g}]" if fraction else f"between {low:g} and {high:g}"
            raise UserError(f"{where}: field 'efficiency.{key}' is {show(v)}; expected {meaning}, {span}")
        out.append((key, float(v)))
    return tuple(sorted(out))


@dataclass(frozen=True)
class ComputeModel:
    """A device's efficiency constants, resolved (DEFAULTS under the device's own) into the tables `kernel_ns`
    indexes: fraction[class, dtype], bandwidth fraction[class, dtype], k_overhead per class."""
    efficiency: tuple = ()            # (key, value) pairs, check_efficiency's form
    multiprocessors: int = 0          # 0: not known, no wave quantisation

    def value(self, key: str) -> float:
        """The constant `key` (KEYS): the device's own, else the h200 preset's (DEFAULTS). In either, `CLASS`
        stands for every `CLASS.DTYPE` it leaves out; a class's host time is `host_us` where it has none of its
        own; a k_overhead not given is 0."""
        cls, _, what = key.partition(".")
        for table in (self._own, DEFAULTS):
            if key in table:
                return table[key]
            if what in DTYPES and cls in table:
                return table[cls]
        if what == "host_us":
            return self.value("host_us")
        if what == "k_overhead":
            return 0.0
        raise KeyError(f"the h200 preset gives no {key!r} (network/gpus.json)")

    def fastest_flops_per_s(self, dtype: str, peak_tflops: float) -> float:
        """The most FLOPs a second (as torch's counter counts them) any op of `dtype` reaches: a tensor-core
        class's fraction of the peak, an attention class's over the CAUSAL_WORK a causal kernel may leave out
        (its blocks above the diagonal). kernel_ns times no op faster (shape factors, launch and bytes only add;
        but causal attention over more keys than queries, masked from the top left, which skips more):
        plan/step_bound.py bounds a step from below with it (tests/test_compute_model.py checks it)."""
        return peak_tflops * 1e12 * max(self.value(f"{c}.{dtype}") / (CAUSAL_WORK if c in ATTENTION_CLASSES else 1.0)
                                        for c in TENSOR_CORE)

    @functools.cached_property
    def _own(self) -> dict:
        return dict(self.efficiency)

    @functools.cached_property
    def _tables(self) -> tuple:
        """kernel_ns's tables, resolved once per model (a run times every rank's program with the same one)."""
        frac = np.array([[self.value(f"{c}.{d}") if c in TENSOR_CORE else 1.0 for d in DTYPES] for c in CLASSES])
        bw = np.array([[self.value(f"{c}.{d}") if c in PER_DTYPE_MEMORY else
                        self.value(c) if c in MEMORY_CLASSES else self.value("elementwise") for d in DTYPES]
                       for c in CLASSES])
        k0 = np.array([self.value(f"{c}.k_overhead") if c in GEMM_CLASSES else 0.0 for c in CLASSES])
        s0 = np.array([self.value(f"{c}.s_overhead") if c in ATTENTION_CLASSES else 0.0 for c in CLASSES])
        return frac, bw, k0, s0

    def kernel_ns(self, dtype_tflops, mem_bytes_per_ns: float, op_class: np.ndarray, dtype: np.ndarray,
                  flops: np.ndarray, nbytes: np.ndarray, gemm: np.ndarray | None = None,
                  causal: np.ndarray | None = None) -> np.ndarray:
        """Each op's kernel time. `dtype_tflops`: dense TFLOP/s per dtype code; `op_class`, `dtype`: codes per op
        (dtype -1: fp32); `gemm`: (n, 4) batch, m, n, k per op (zeros: not a GEMM or not known; an attention op's
        scores, op_classes.gemm_dims); `causal`: True per op that masked causally (None: none did): an attention op
        of known shape then runs the blocks on and below the diagonal, of unknown shape CAUSAL_WORK of its FLOPs."""
        frac, bw, k0, s0 = self._tables
        cls = np.asarray(op_class, dtype=np.int64)
        codes = np.asarray(dtype, dtype=np.int64)
        codes = np.where(codes < 0, DTYPES.index("fp32"), codes)
        peaks = np.asarray(dtype_tflops, dtype=float)
        flops, nbytes = np.asarray(flops, float), np.asarray(nbytes, float)
        tensor = np.isin(cls, [CLASS_CODE[c] for c in TENSOR_CORE])
        rate = np.where(tensor, peaks[codes] * frac[cls, codes], peaks[DTYPES.index("fp32")]) * 1e3  # flops/ns
        attention = np.isin(cls, [CLASS_CODE[c] for c in ATTENTION_CLASSES])
        gemm = np.zeros((len(cls), 4), np.int64) if gemm is None else np.asarray(gemm, np.int64).reshape(-1, 4)
        shaped = attention & (gemm[:, 1:] > 0).all(axis=1)
        masked = np.zeros(len(cls), bool) if causal is None else np.asarray(causal, bool)
        flops = np.where(masked & attention & ~shaped, flops * CAUSAL_WORK, flops)
        compute = flops / rate
        if len(cls):
            tensor_cores = _ALIGN_BY_CODE[codes] > 0
            cublas = np.isin(cls, [CLASS_CODE[c] for c in GEMM_CLASSES])
            compute = compute * np.where(attention, 1.0,
                                         gemm_factor(gemm, k0[cls], self.multiprocessors, tensor_cores, cublas))
            compute = np.where(cublas & unaligned(gemm, codes), compute / self.value("matmul.unaligned"), compute)
            if shaped.any():   # fp16, bf16, fp8 run flash's and cuDNN's kernels; fp32 the memory-efficient one
                overhead = np.where(tensor_cores & (codes != DTYPES.index("tf32")), s0[cls], 0.0)
                compute[shaped] *= attention_factor(gemm[shaped], masked[shaped], overhead[shaped])
        memory = nbytes / (mem_bytes_per_ns * bw[cls, codes])
        return np.maximum(compute, memory) + self.value("launch_us") * 1e3

    @functools.cached_property
    def _host_per_class(self) -> np.ndarray:
        return np.array([self.value(f"{c}.host_us") for c in CLASSES]) * 1e3

    def host_ns(self, op_class: np.ndarray, views: np.ndarray | None = None) -> np.ndarray:
        """The host's time to issue each op, by its class code, plus view_us for each of its `views` (the
        kernel-less ops dispatched before it; None: none)."""
        host = self._host_per_class[np.asarray(op_class, dtype=np.int64)]
        if views is None:
            return host
        return host + np.asarray(views, dtype=float) * (self.value("view_us") * 1e3)


def attention_factor(dims: np.ndarray, causal: np.ndarray, overhead: np.ndarray) -> np.ndarray:
    """How much longer attention of these scores' dimensions ((batch, queries, keys, head size) rows, all known)
    takes than its counted (unmasked) FLOPs at the class's rate: query and key blocks of ATTENTION_BLOCK padded, a
    row of blocks costing `overhead` more keys at head size 128, and where `causal` only the blocks on and below the
    diagonal (queries aligned with the first keys, as torch's is_causal)."""
    q, k, d = (dims[:, i].astype(float) for i in (1, 2, 3))
    rows, cols = np.ceil(q / ATTENTION_BLOCK), np.ceil(k / ATTENTION_BLOCK)
    # blocks a causal row runs: row i (from 0) sees min(cols, i + 1) key blocks
    tri = np.where(rows <= cols, rows * (rows + 1) / 2, cols * (cols + 1) / 2 + (rows - cols) * cols)
    blocks = np.where(causal, tri, rows * cols)
    keys = blocks * ATTENTION_BLOCK + rows * overhead * 128.0 / np.maximum(d, 1.0)
    return keys * ATTENTION_BLOCK / (q * k)


def unaligned(gemm: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Per op: a known GEMM (gemm's (batch, m, n, k) rows; zeros: not one) of a tensor-core dtype (codes) with a
    dimension that is not a multiple of 16 bytes of its elements (ALIGN)."""
    align = _ALIGN_BY_CODE[codes]
    dims = gemm[:, 1:]
    known = (dims > 0).all(axis=1) & (align > 0)
    return known & ((dims % np.maximum(align, 1)[:, None]) != 0).any(axis=1)


def gemm_factor(gemm: np.ndarray, k_overhead: np.ndarray, multiprocessors: int,
                tensor_cores: np.ndarray | None = None, cublas: np.ndarray | None = None) -> np.ndarray:
    """How much longer a GEMM of these dimensions takes than its FLOPs at the class's large-op rate: tiles padded
    at the edges, the last wave's idle multiprocessors (K split to fill them when tiles are few, and a partial last
    wave's tiles split over the idle slots when K is deep enough) and each tile's fixed cost of `k_overhead`
    multiply-adds. 1 where the dimensions are not known (zeros). `cublas`: per op, a GEMM cuBLAS runs (a matmul;
    None: all), whose kernels split a GEMM of less than one wave along K in parts of MIN_TAIL_SPLIT_K too, and on
    `tensor_cores` (per op; None: all) a partial last wave; a convolution's implicit GEMM (cuDNN) splits neither."""
    b, m, n, k = (gemm[:, i].astype(float) for i in range(4))
    known = (b > 0) & (m > 0) & (n > 0) & (k > 0)
    b, m, n, k = (np.where(known, x, 1.0) for x in (b, m, n, k))
    tm = np.where(m >= TILE, TILE, SMALL_TILE)
    tn = np.where(n >= TILE, TILE, SMALL_TILE)
    rows, cols = np.ceil(m / tm), np.ceil(n / tn)
    pad = rows * tm * cols * tn / (m * n)
    # a smaller tile does fewer multiply-adds per element it loads (tm*tn / (tm + tn)): a 64x128 tile two thirds
    # of a 128x128 one's, and it runs that much slower (an H200's fp32 GEMMs of M = 64 ran at 47-74 % of the rate
    # of large ones, profiled)
    pad = pad * (TILE / 2) / (tm * tn / (tm + tn))
    tiles = b * rows * cols
    if multiprocessors > 0:
        # the time of the tiles in units of one tile's multiply-adds over depth 1, the shortest of three ways
        # cuBLAS runs them: (a) tiles in waves over the slots, K split to fill them when tiles are fewer; (b) the
        # full waves, then a partial last wave's tiles split along K over the slots they leave idle; (c) the full
        # waves, then every remaining tile cut into parts of at least MIN_TAIL_SPLIT_K spread over all slots
        # (stream-K). (b) and (c) only where K is deep enough for a part (an H200's bf16 GEMMs of 0.55 to 2.25 waves
        # ran as if their tail were spread at K of 2304 and more, not at 768), and after full waves only on tensor
        # cores (fp32's SIMT kernels of 1.45 and 2.25 waves kept most of their tail: 1.15-1.20 of the work's time
        # against the 1.33-1.38 of whole waves; ViT-B's fp32 profile, benchmarks/data/h200_heldout_ops.txt)
        slots = multiprocessors * TILES_PER_SM
        fill = np.maximum(1.0, np.minimum(np.floor(slots / tiles), np.floor(k / MIN_SPLIT_K)))
        split = np.where(tiles < slots, fill, 1.0)
        time = np.ceil(tiles * split / slots) * (k / split + k_overhead)
        full, rest = np.floor(tiles / slots), np.mod(tiles, slots)
        parts = np.maximum(1.0, np.floor(k / MIN_TAIL_SPLIT_K))
        tail = np.maximum(1.0, np.minimum(np.floor(slots / np.maximum(rest, 1.0)), parts))
        rest_b = np.where(rest > 0, np.ceil(rest * tail / slots) * (k / tail + k_overhead), 0.0)
        rest_c = np.where(rest > 0, np.ceil(rest * parts / slots) * (k / parts + k_overhead), 0.0)
        deep = parts > 1
        if tensor_cores is not None:
            deep &= np.asarray(tensor_cores, bool) | (tiles < slots)
        if cublas is not None:
            deep &= np.asarray(cublas, bool)
        time = np.where(deep, np.minimum(time, full * (k + k_overhead) + np.minimum(rest_b, rest_c)), time)
        factor = pad * time * slots / (tiles * k)
    else:
        factor = pad * (k + k_overhead) / k
    return np.where(known, factor, 1.0)
