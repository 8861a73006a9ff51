"""The per-class compute model of a --gpu device (network/compute_model.py, network/op_classes.py): op classes
and GEMM shapes from names and shapes, each class's kernel time by hand, and the host that issues the ops one
after another (runtime/workload_engine.py)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from astra_compile.network.compute_model import DEFAULTS, ComputeModel, attention_factor, gemm_factor
from astra_compile.network.dtypes import CODE as DTYPE, DTYPES
from astra_compile.network.op_classes import CODE, classify, format_shapes, gemm_dims, op_class, parse_shapes
from astra_compile.runtime.workload_engine import COLLECTIVE, COMPUTE, WAIT, Roofline, run_workload

from test_workload_engine import program

PEAKS = (50.0, 100.0, 400.0, 800.0, 800.0, 1600.0)   # TFLOP/s per dtype code
BW = 4000.0                                          # bytes per ns (4 TB/s)


@pytest.mark.parametrize("name, cls", [
    ("aten.mm.default", "matmul"), ("aten::addmm", "matmul"), ("aten.bmm.default", "matmul"),
    ("aten._scaled_dot_product_flash_attention.default", "attention"),
    ("aten._scaled_dot_product_efficient_attention_backward.default", "attention_backward"),
    ("aten::cudnn_convolution", "conv"), ("aten.convolution.default", "conv"),
    ("aten._conv_depthwise2d.default", "conv"),
    ("aten.convolution_backward.default", "conv_backward"), ("aten::cudnn_batch_norm", "batch_norm"),
    ("aten.native_layer_norm_backward.default", "norm"), ("aten._fused_rms_norm.default", "norm"),
    ("aten._foreach_addcdiv_.ScalarList", "optimizer"), ("aten._fused_adamw_.default", "optimizer"),
    ("aten.gelu.default", "elementwise"), ("aten._softmax.default", "elementwise"),
    ("aten.embedding_dense_backward.default", "elementwise")])
def test_op_class_from_the_aten_name(name, cls):
    assert classify(name) == cls


@pytest.mark.parametrize("name, shapes, cls", [
    ("aten.mul.Tensor", "2x8192x4096,4096", "broadcast"),                  # an RMS norm's weight over its rows
    ("aten::sub", "4x1024x32000,4x1024x1", "broadcast"),                   # a column: the max a softmax subtracts
    ("aten.masked_fill_.Scalar", "4x16x1024x1024,1024x1024", "broadcast"),  # a causal mask over the heads
    ("aten.add.Tensor", "4x1024x2048,1024x2048", "broadcast"),             # position embeddings over the batch
    ("aten.mul.Tensor", "4096x2048,4096x2048", "elementwise"),             # same shapes: the vectorized kernel
    ("aten.div.Tensor", "4x16x1024x1024,s", "elementwise"),                # a 0-dim tensor: taken as a scalar
    ("aten.gelu.default", "4x1024x8192", "elementwise"),
    ("aten.embedding_dense_backward.default", "2x8192x4096,2x8192", "elementwise"),   # not broadcast-compatible
    ("aten::gather", "32000x2048,4096x2048,4096x2048", "elementwise"),
    ("aten.cat.default", "[4x16x1024x128;4x16x1024x128]", "elementwise"),
    ("aten._masked_softmax.default", "4x16x1024x1024,1024x1024", "elementwise"),   # one softmax kernel
    ("aten::index_add_", "1024x64,64,64x64", "elementwise"),
    ("aten.mm.default", "4096x2048,2048", "matmul"),                       # only elementwise ops are refined
    ("aten.mul.Tensor", "", "elementwise"), ("aten.mul.Tensor", "4x4,4x", "elementwise")])   # unknown, malformed
def test_an_elementwise_op_with_a_broadcast_operand_is_its_own_class(name, shapes, cls):
    try:
        args = parse_shapes(shapes)
    except ValueError:   # a malformed text reads as no shapes, as calibrate-compute reads it
        args = []
    assert op_class(name, args) == cls


def test_a_broadcast_op_takes_its_dtypes_bandwidth_fraction():
    model = ComputeModel((("broadcast", 0.5), ("broadcast.bf16", 0.25), ("launch_us", 0.0)))
    cls = np.full(3, CODE["broadcast"])
    t = model.kernel_ns(PEAKS, BW, cls, np.array([DTYPE["fp32"], DTYPE["bf16"], DTYPE["fp16"]]), np.zeros(3),
                        np.full(3, 1e9))
    assert t[0] == pytest.approx(1e9 / (BW * 0.5))
    assert t[1] == pytest.approx(1e9 / (BW * 0.25))
    # fp16 not given: the device's class-wide value, not the preset's broadcast.fp16
    assert t[2] == pytest.approx(1e9 / (BW * 0.5))
    # the h200 preset: a bf16 broadcast op well below a plain elementwise one (benchmarks/data/h200_broadcast.json)
    assert DEFAULTS["broadcast.bf16"] < DEFAULTS["broadcast"] < DEFAULTS["elementwise"]


sizes = st.lists(st.integers(0, 10**6), max_size=4).map(tuple)


@given(st.lists(st.one_of(sizes, st.lists(sizes, max_size=3)), max_size=5))
def test_shapes_text_round_trips(args):
    assert parse_shapes(format_shapes(args)) == [list(a) if isinstance(a, list) else a for a in args]


@pytest.mark.parametrize("text", ["4x", "ax4", "[4x4", "4,,x", "4x4]"])
def test_malformed_shapes_text_is_refused(text):
    with pytest.raises(ValueError):
        parse_shapes(text)


def test_gemm_dimensions_of_matmuls_and_convolutions():
    assert gemm_dims("aten::addmm", [(4096,), (64, 4096), (4096, 4096)], 0) == (1, 64, 4096, 4096)
    assert gemm_dims("aten.mm.default", [(4096, 64), (64, 2048)], 0) == (1, 4096, 2048, 64)
    assert gemm_dims("aten.bmm.default", [(64, 1024, 128), (64, 128, 1024)], 0) == (64, 1024, 1024, 128)
    # ResNet's 3x3 convolution of 64 channels at 56x56, batch 32: m = N*Hout*Wout from the FLOPs
    flops = 2 * 32 * 56 * 56 * 64 * 64 * 9
    assert gemm_dims("aten.convolution.default", [(32, 64, 56, 56), (64, 64, 3, 3)], flops) == (1, 100352, 64, 576)
    assert gemm_dims("aten.convolution_backward.default",
                     [(32, 64, 56, 56), (32, 64, 56, 56), (64, 64, 3, 3)], 0) == (1, 100352, 64, 576)
    assert gemm_dims("aten.gelu.default", [(64, 4096)], 0) == (0, 0, 0, 0)
    assert gemm_dims("aten.mm.default", [], 0) == (0, 0, 0, 0)


def test_gemm_factor_by_hand():
    k0 = np.array([32.0])
    # a large GEMM: 32 x 64 tiles of 128 = 2048 in 8 waves of 264 (132 SMs x 2): 2112 slots; depth 2048 + 32
    big = gemm_factor(np.array([[1, 4096, 8192, 2048]]), k0, 132)
    assert big[0] == pytest.approx(2112 / 2048 * 2080 / 2048)
    # M = 64: tiles of 64 x 128, 32 of them; K split 8 ways (264 // 32) into depths of 512 -> 256 units, 1 wave;
    # a 64 x 128 tile does 64*128/192 multiply-adds per element loaded, a 128 x 128 one 64: 1.5x slower
    small = gemm_factor(np.array([[1, 64, 4096, 4096]]), k0, 132)
    assert small[0] == pytest.approx(264 / 256 * (512 + 32) / 512 * 1.5)
    # M = 65 pads to two 64-row tiles
    assert gemm_factor(np.array([[1, 65, 4096, 4096]]), np.array([0.0]), 0)[0] == pytest.approx(128 / 65 * 1.5)
    assert gemm_factor(np.array([[0, 0, 0, 0]]), k0, 132)[0] == 1.0          # not known: no penalty


def test_a_partial_last_wave_splits_along_k_on_tensor_cores():
    # 19 x 20 = 380 tiles on 264 slots: one full wave and 116 tiles, which on tensor cores split in 2 along K = 3072
    # (parts of at least 1024) and run as half a wave: 1.5 waves of the 380 / 264 the work needs
    gemm, k0 = np.array([[1, 2432, 2560, 3072]] * 2 + [[1, 2432, 2560, 768]]), np.zeros(3)
    f = gemm_factor(gemm, k0, 132, np.array([True, False, True]))
    assert f[0] == pytest.approx(1.5 * 264 / 380)
    assert f[1] == pytest.approx(2 * 264 / 380)     # fp32's SIMT kernels: two whole waves
    assert f[2] == pytest.approx(2 * 264 / 380)     # K = 768: too shallow to split
    # a convolution's implicit GEMM (cuDNN, not cuBLAS) pays its tiles and waves whole
    assert gemm_factor(gemm[:1], k0[:1], 132, np.array([True]), np.array([False]))[0] == pytest.approx(2 * 264 / 380)
    # less than one wave splits on either: 144 tiles (the weight gradient of a ViT-B layer), K = 12608 in 12 parts
    # of 1050.7 spread over the slots: 1740 parts in 7 rounds
    w = gemm_factor(np.array([[1, 768, 3072, 12608]]), np.zeros(1), 132, np.array([False]))
    assert w[0] == pytest.approx(7 * (12608 / 12) * 264 / (144 * 12608))


def test_each_class_takes_its_own_rate():
    model = ComputeModel((("matmul.bf16", 0.8), ("norm", 0.25), ("launch_us", 2.0)), multiprocessors=0)
    cls = np.array([CODE["matmul"], CODE["norm"], CODE["elementwise"], CODE["matmul"]])
    dtype = np.array([DTYPE["bf16"], DTYPE["fp32"], DTYPE["bf16"], DTYPE["fp32"]])
    flops = np.array([8e12, 0.0, 0.0, 1e12])
    nbytes = np.array([1e6, 1e9, 1e9, 0.0])
    t = model.kernel_ns(PEAKS, BW, cls, dtype, flops, nbytes)
    assert t[0] == pytest.approx(8e12 / (800e3 * 0.8) + 2000)             # bf16 peak x its fraction
    assert t[1] == pytest.approx(1e9 / (BW * 0.25) + 2000)                 # a norm at a quarter of the bandwidth
    assert t[2] == pytest.approx(1e9 / (BW * DEFAULTS["elementwise"]) + 2000)
    assert t[3] == pytest.approx(1e12 / (100e3 * DEFAULTS["matmul"]) + 2000)   # fp32: the default fraction


def test_a_tensor_core_gemm_with_a_dimension_off_16_bytes_runs_at_the_unaligned_fraction():
    model = ComputeModel((("matmul", 0.5), ("matmul.unaligned", 0.25), ("launch_us", 0.0), ("matmul.k_overhead", 0.0)))
    # BERT's decoder: 30522 words is no multiple of 8 bf16 elements; 30528 is
    gemm = np.array([[1, 8192, 30522, 768], [1, 8192, 30528, 768], [1, 8192, 30522, 768], [1, 8192, 30522, 768],
                     [0, 0, 0, 0]])
    dtype = np.array([DTYPE["bf16"], DTYPE["bf16"], DTYPE["fp32"], DTYPE["tf32"], DTYPE["bf16"]])
    flops = np.array([2.0 * 8192 * 30522 * 768, 2.0 * 8192 * 30528 * 768, 2.0 * 8192 * 30522 * 768,
                      2.0 * 8192 * 30522 * 768, 1e12])
    t = model.kernel_ns(PEAKS, BW, np.full(5, CODE["matmul"]), dtype, flops, np.zeros(5), gemm)
    plain = model.kernel_ns(PEAKS, BW, np.full(5, CODE["matmul"]), dtype, flops, np.zeros(5),
                            np.array([[1, 8192, 30528, 768]] * 4 + [[0, 0, 0, 0]]))
    assert t[0] == pytest.approx(plain[0] * 30528 / 30522 / 0.25, rel=1e-6)    # bf16: 4x as long
    assert t[1] == pytest.approx(plain[1])                                     # aligned
    assert t[2] == pytest.approx(plain[2] * 30528 / 30522, rel=1e-6)           # fp32 without TF32: no such kernels
    assert t[3] == pytest.approx(plain[3] * 30528 / 30522 / 0.25, rel=1e-6)    # tf32: 4 elements of 16 bytes
    assert t[4] == pytest.approx(plain[4])                                     # dimensions not known


def test_attention_dimensions_by_kernel_layout():
    # scaled_dot_product_* and cuDNN's: [batch, heads, sequence, head]; the flash and memory-efficient kernels' own
    # ops: [batch, sequence, heads, head]; a backward's query and key follow its gradient
    q = "2x32x8192x128"
    assert gemm_dims("aten._scaled_dot_product_flash_attention.default", parse_shapes(f"{q},{q},{q}"), 0) == \
        (64, 8192, 8192, 128)
    assert gemm_dims("aten._scaled_dot_product_efficient_attention_backward.default",
                     parse_shapes(f"{q},{q},2x32x4096x128,{q}"), 0) == (64, 8192, 4096, 128)
    assert gemm_dims("aten::_flash_attention_forward", parse_shapes("2x8192x32x128,2x1024x32x128,2x1024x32x128"),
                     0) == (64, 8192, 1024, 128)
    assert gemm_dims("aten::_cudnn_attention_backward", parse_shapes("64x12x197x64," * 3 + "64x12x197x64"), 0) == \
        (768, 197, 197, 64)
    assert gemm_dims("aten._scaled_dot_product_flash_attention.default", parse_shapes("8x128,8x128"), 0) == \
        (0, 0, 0, 0)   # not 4-D: not known


def test_attention_pays_for_its_blocks_and_each_row_of_them():
    dims = np.array([[64, 8192, 8192, 128], [64, 8192, 8192, 128], [768, 197, 197, 64], [1, 2048, 2048, 128]])
    f = attention_factor(dims, np.array([False, True, False, True]), np.array([0.0, 0.0, 81.0, 81.0]))
    assert f[0] == pytest.approx(1.0)                           # whole blocks, no fixed cost
    assert f[1] == pytest.approx(64 * 65 / 2 / 64 ** 2)         # causal: the diagonal's blocks whole, 0.5078
    # 197 tokens: 2 x 2 blocks of 128 and 81 keys x 128 / 64 more a row: 2.76 times the work of 197 x 197
    assert f[2] == pytest.approx((4 * 128 + 2 * 162) * 128 / 197 ** 2)
    assert f[3] == pytest.approx((136 * 128 + 16 * 81) * 128 / 2048 ** 2)
    # in the model: a short sequence's bf16 attention runs at a fraction of a long one's rate; fp32 takes no
    # fixed cost (the memory-efficient kernel)
    model = ComputeModel((("attention.bf16", 0.4), ("attention.fp32", 0.4), ("attention.s_overhead", 100.0),
                          ("launch_us", 0.0)))
    dims = np.array([[64, 8192, 8192, 128], [4096, 256, 256, 128], [4096, 256, 256, 128]])
    flops = 4.0 * dims[:, 0] * dims[:, 1] * dims[:, 2] * dims[:, 3]
    t = model.kernel_ns(PEAKS, BW, np.full(3, CODE["attention"]), np.array([DTYPE["bf16"], DTYPE["bf16"],
                        DTYPE["fp32"]]), flops, np.zeros(3), dims, np.zeros(3, bool))
    rates = flops / t
    assert rates[0] / rates[1] == pytest.approx((256 + 100) / 256 / ((8192 + 100) / 8192))
    assert t[2] == pytest.approx(flops[2] / (PEAKS[DTYPE["fp32"]] * 1e3 * 0.4))


def test_a_class_wide_fraction_stands_for_every_dtype():
    model = ComputeModel((("conv", 0.3), ("conv.bf16", 0.6)))
    assert model.value("conv.fp32") == 0.3 and model.value("conv.bf16") == 0.6
    assert model.value("conv_backward.fp32") == DEFAULTS["conv_backward"]
    assert model.value("norm.host_us") == DEFAULTS["host_us"]


def tiny_steps(n):
    """n compute ops of 1 ns each in a chain (at 1 TFLOP/s, no launch time)."""
    return program([(COMPUTE, 1, [i - 1] if i else [], 0, -1, 1) for i in range(n)])


def test_the_host_issues_ops_one_after_another_and_a_step_of_tiny_ops_is_host_bound():
    model = ComputeModel((("host_us", 0.01), ("launch_us", 0.0), ("elementwise", 1.0)))
    roof = Roofline(peak_tflops=1.0, mem_gbps=1e12, dtype_tflops=(1.0,) * len(DTYPES), model=model)
    table = dataclasses.replace(tiny_steps(5), op_class=np.full(5, CODE["elementwise"], np.int8),
                                dtype=np.full(5, DTYPE["fp32"], np.int8))
    r = run_workload([table], roof, spmd=True).ranks[0]
    assert list(r.start_ns) == [10, 20, 30, 40, 50]        # op i issued at (i + 1) x 10 ns, ran 1 ns
    assert r.total_ns == 51 and r.host_wait_ns == pytest.approx(46) and r.exposed_comm_ns == pytest.approx(0)
    # without op classes (no model in use) nothing waits for the host
    plain = run_workload([tiny_steps(5)], roof, spmd=True).ranks[0]
    assert plain.total_ns == 5 and plain.host_wait_ns == 0


def test_the_host_runs_ahead_of_long_kernels():
    # a 1000 ns op, then four 1 ns ops issued 10 ns apart: the host issued them all while the long op ran
    model = ComputeModel((("host_us", 0.01), ("launch_us", 0.0)))
    roof = Roofline(peak_tflops=1.0, mem_gbps=1e12, dtype_tflops=(1.0,) * len(DTYPES), model=model)
    rows = [(COMPUTE, 1000, [], 0, -1, 1)] + [(COMPUTE, 1, [i], 0, -1, 1) for i in range(4)]
    table = dataclasses.replace(program(rows), op_class=np.full(5, CODE["elementwise"], np.int8))
    r = run_workload([table], roof, spmd=True).ranks[0]
    assert r.total_ns == pytest.approx(10 + 1000 + 4) and r.host_wait_ns == pytest.approx(10)


def test_host_wait_is_not_exposed_communication():
    model = ComputeModel((("host_us", 0.1), ("launch_us", 0.0)))
    roof = Roofline(peak_tflops=1.0, mem_gbps=1e12, dtype_tflops=(1.0,) * len(DTYPES), model=model)
    rows = [(COMPUTE, 10, [], 0, -1, 1), (COLLECTIVE, 500, [0], 1, 0, 8), (WAIT, 0, [1], 0, -1, 1),
            (COMPUTE, 10, [2], 0, -1, 1)]
    table = dataclasses.replace(program(rows), op_class=np.full(4, CODE["elementwise"], np.int8))
    r = run_workload([table], roof, spmd=True).ranks[0]
    # issued at 100 and 200 ns; the all-reduce runs 110-610, the last op 610-620: 400 ns exposed, 100 host
    assert r.total_ns == pytest.approx(620) and r.host_wait_ns == pytest.approx(100)
    assert r.exposed_comm_ns == pytest.approx(620 - 20 - 100)


def test_an_op_of_no_flops_and_no_bytes_launches_nothing_and_costs_the_host_a_view():
    # an execution trace records views (aten::view, aten::t) as ops; the capture leaves them out
    model = ComputeModel((("host_us", 0.01), ("view_us", 0.003), ("launch_us", 0.002), ("elementwise", 1.0)))
    roof = Roofline(peak_tflops=1.0, mem_gbps=1e12, dtype_tflops=(1.0,) * len(DTYPES), model=model)
    rows = [(COMPUTE, 1, [], 0, -1, 1), (COMPUTE, 0, [0], 0, -1, 1), (COMPUTE, 1, [1], 0, -1, 1)]
    table = dataclasses.replace(program(rows), op_class=np.full(3, CODE["elementwise"], np.int8))
    r = run_workload([table], roof, spmd=True).ranks[0]
    # issued at 10, 13 (a view: 3 ns), 23 ns; the view takes no time, the others 1 ns + 2 ns of launch
    assert list(r.start_ns) == [10, 13, 23] and list(r.end_ns) == [13, 13, 26]


@given(cls=st.sampled_from(["matmul", "attention", "attention_backward", "conv", "conv_backward"]),
       dtype=st.sampled_from(list(DTYPES)), causal=st.booleans(), shaped=st.booleans(),
       dims=st.tuples(*[st.integers(1, 9000)] * 4), preset=st.sampled_from(["h100", "h200", "a100-80gb", "mi300x"]))
def test_no_kernel_is_faster_than_the_fastest_rate(cls, dtype, causal, shaped, dims, preset):
    # plan/step_bound.py bounds a step from below with it: every op's kernel time, whatever its shape, is at least
    # its FLOPs at the device's fastest rate for its dtype; causal attention as training runs it, over as many keys
    # as queries (fewer queries than keys, masked from the top left, skip more than half the blocks)
    from astra_compile.network import devices
    if cls.startswith("attention") and causal:
        dims = (dims[0], dims[1], dims[1], dims[3])
    gpu = devices.resolve(preset)
    model = gpu.compute_model()
    flops = 2.0 * dims[0] * dims[1] * dims[2] * dims[3]
    gemm = np.array([dims if shaped else (0, 0, 0, 0)])
    ns = model.kernel_ns(gpu.peak_tflops, 1e12, np.array([CODE[cls]]), np.array([DTYPE[dtype]]), np.array([flops]),
                         np.array([0.0]), gemm, np.array([causal]))[0]
    assert ns >= flops / model.fastest_flops_per_s(dtype, gpu.peak(dtype)) * 1e9 * (1 - 1e-9)
