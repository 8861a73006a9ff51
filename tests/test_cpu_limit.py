"""The CPU limit on a model file stops the model in its own code, never inside torch or another library (a stop
landing between a change of torch's thread state and the code that undoes it left autograd off for every later
capture in the process), and whatever a stopped or failing model file leaves behind in torch's thread state is put
back before the next capture."""
import os
import textwrap

import pytest

from astra_compile.compiler.api.api import load_workload
from astra_compile.compiler.frontend import cpu_limit as limit
from astra_compile.network.errors import UserError

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A folder the limit counts as library code (as it counts torch and the standard library)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    monkeypatch.syspath_prepend(str(lib))
    real = limit.library_dirs
    monkeypatch.setattr(limit, "library_dirs", lambda: real() + (os.path.join(str(lib), ""),))
    return lib


def model(tmp_path, body: str):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(body) + "\ndef example_inputs():\n    import torch\n"
                    "    return torch.randn(2, 8)\n")
    return str(path)


def stopped_in(path, seconds=0.3):
    """The file and function the limit's stop was raised in (below the limit's own handler)."""
    with pytest.raises(UserError, match=f"more than {seconds:g} s of CPU") as caught:
        load_workload(path, 4, capture_limit=seconds)
    expired = caught.value.__context__
    assert isinstance(expired, limit._Expired)
    tb, last = expired.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != limit.__file__:
            last = tb.tb_frame.f_code
        tb = tb.tb_next
    return last.co_filename, last.co_name


def test_the_stop_lands_in_the_models_code_though_a_library_runs_nearly_all_the_time(tmp_path, library):
    (library / "busy.py").write_text("def work():\n    x = 0\n    for i in range(200000):\n        x += i\n"
                                     "    return x\n")
    path = model(tmp_path, """
        import busy
        def build_model():
            while True:
                busy.work()
        """)
    for _ in range(3):   # the loop runs its own bytecode a millionth of the time: no stop lands there by chance
        assert stopped_in(path) == (path, "build_model")


def test_code_that_never_returns_to_the_model_is_stopped_after_a_grace(tmp_path, library, monkeypatch):
    monkeypatch.setattr(limit, "LIBRARY_GRACE_S", 0.3)
    (library / "spin.py").write_text("def forever():\n    while True:\n        pass\n")
    path = model(tmp_path, """
        import spin
        def build_model():
            spin.forever()
        """)
    assert stopped_in(path)[1] == "forever"


def test_a_model_calling_back_into_its_own_code_is_stopped_at_the_call(tmp_path, library):
    (library / "caller.py").write_text("def each(f):\n    while True:\n        for i in range(100000):\n"
                                       "            pass\n        f()\n")
    path = model(tmp_path, """
        import caller
        def tick():
            return 1
        def build_model():
            caller.each(tick)
        """)
    assert stopped_in(path) in [(path, "tick"), (path, "build_model")]


def test_torch_thread_state_a_failed_model_leaves_is_put_back(tmp_path):
    torch = pytest.importorskip("torch")
    C = torch._C
    path = model(tmp_path, """
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        def build_model():
            torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.AutogradCPU, True)
            torch._C._set_meta_in_tls_dispatch_include(True)
            TorchDispatchMode().__enter__()
            raise RuntimeError("gone wrong")
        """)
    before = (str(C._dispatch_tls_local_exclude_set()), str(C._dispatch_tls_local_include_set()),
              C._len_torch_dispatch_stack(), C._meta_in_tls_dispatch_include())
    with pytest.raises(UserError, match="gone wrong"):
        load_workload(path, 4)
    assert (str(C._dispatch_tls_local_exclude_set()), str(C._dispatch_tls_local_include_set()),
            C._len_torch_dispatch_stack(), C._meta_in_tls_dispatch_include()) == before
    assert load_workload(os.path.join(EXAMPLES, "mlp_dp.py"), 4).programs   # the next capture has autograd
