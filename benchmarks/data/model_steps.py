"""What the step recorders beside this file share (as kernel_profile.py and phase_peaks.py are shared): loading a
model file by name, and keeping AdamW's step counters where the reference recording had them."""
import importlib.util
import os

import torch


def load_model(directory: str, name: str):
    """The model file directory/name.py, imported as a module."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counters_to_host(opt) -> None:
    """AdamW's step counters moved to the host, where PyTorch keeps them without a CUDA default device (2.15:
    always): under set_default_device("cuda") PyTorch 2.11 makes them on the GPU, and each .item() of one waits for
    it."""
    for state in opt.state.values():
        if torch.is_tensor(state.get("step")) and state["step"].device.type != "cpu":
            state["step"] = state["step"].cpu()
