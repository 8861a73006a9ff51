"""A model file's optimizer as PyTorch runs it on a GPU: with its foreach kernels, while the capture runs on the host.

torch.optim picks an implementation per step when the file does not name one (foreach=None, fused=None):
the foreach one (`_foreach_mul_`, `_foreach_addcdiv_`, ...: one op per pass over every parameter) for parameters
on CUDA, the for-loop one (a few ops per parameter) elsewhere. The capture's fake tensors live on the host (and are
FakeTensors, not the Tensor/Parameter/DTensor types foreach takes), which would record the for-loop: per
parameter, the same bytes in many more, smaller ops, so the wrong number of kernels and host issues
(network/compute_model.py). While capturing, the host counts as a device with foreach kernels and a FakeTensor as
the tensor it stands for, as on CUDA; a file that asks for foreach=False or fused=True gets what it asks for.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def cuda_foreach_on_host():
    import torch.optim.optimizer as optimizer
    import torch.utils._foreach_utils as foreach_utils
    from torch._subclasses.fake_tensor import FakeTensor
    supported = optimizer._get_foreach_kernels_supported_devices

    def with_host() -> list[str]:
        return list(supported()) + ["cpu"]
    optimizer._get_foreach_kernels_supported_devices = with_host
    added = [types for types in (optimizer._foreach_supported_types, foreach_utils._foreach_supported_types)
             if FakeTensor not in types]
    for types in added:
        types.append(FakeTensor)
    try:
        yield
    finally:
        optimizer._get_foreach_kernels_supported_devices = supported
        for types in added:
            types.remove(FakeTensor)
