"""The bundled model files are what users copy into real training, so each must run on any device unchanged:
every tensor made inside forward follows its inputs' device (a mask built with torch.ones(t, t) lands on the CPU
and breaks a GPU run). Checked on the meta device: the model and its inputs are built under torch.device("meta"),
then forward and backward run outside it, where a tensor made without a device would be a CPU tensor."""
import importlib.util
import os

import pytest
import torch
import torch.distributed as dist

from astra_compile.compiler.frontend.capture import fake_world

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
MODEL_FILES = sorted(n for n in os.listdir(EXAMPLES) if n.endswith(".py"))


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name[:-3]}", os.path.join(EXAMPLES, name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_bundled_model_file_is_checked():
    assert MODEL_FILES == ["gpt_tp_dp.py", "llama_fsdp_tp.py", "llama_pp_interleaved.py", "llama_pp_tp_dp.py",
                           "mlp_dp.py", "moe_ep.py", "resnet_dp.py"]


@pytest.mark.parametrize("name", MODEL_FILES)
def test_a_model_file_runs_on_the_device_of_its_inputs(name):
    m = load(name)
    with torch.device("meta"):
        model = m.build_model()
        inputs = m.example_inputs()
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    with fake_world(1):
        for layer in model.modules():   # moe_ep's parallelize() gives each layer its expert-parallel group
            if hasattr(layer, "ep_group"):
                layer.ep_group = dist.group.WORLD
        out = model(*inputs)
        loss = m.loss(out) if hasattr(m, "loss") else out.sum()
        loss.backward()
    assert out.device.type == "meta"
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in model.parameters())
