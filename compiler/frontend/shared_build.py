"""One model built for all the stages of a pipeline capture (capture.py), not one per stage.

A pipeline written the simple way (`pipeline_stage(model, stage, num_stages)`, frontend/pipeline.py) captures one
rank per pp coordinate, and each of those captures used to build the whole model on fake tensors to keep its own
stage's part: a 64-stage pipeline of an 80-block model built 64 models of 80 blocks, 30 % of its capture. The
stages' parts are disjoint (each takes its own blocks; the first the embedding, the last the head), and what a
capture does to its part (parallelize it, train it) leaves the others' as built. So the model is built once, in
one FakeTensorMode that every stage's capture then runs in, and each stage takes its part from it.

What a stage may take is checked, so that no capture ever sees a part another one changed:
- a part holding a module or parameter of the model that an earlier stage's part held (tied embedding and head
  weights on the first and last stage, a rank captured again: a micro-batch unlike its template, a looped rank
  whose later stages' inputs were not known yet) is built afresh for that capture, as before (`Taken`);
- a pipeline_stage() that rearranges the model it is given (its modules no longer where they were built) leaves
  the model to no later stage: each builds its own from then on.
"""
from __future__ import annotations

from ...network.errors import AstraError


class Taken(AstraError):
    """This stage's part cannot come from the shared model: its capture builds its own (caught by capture.py,
    under the one error base like every error class of the package)."""


class SharedBuild:
    def __init__(self, spec):
        self.spec = spec
        self.mode = None          # the FakeTensorMode the model was built in, and every capture using it runs in
        self.model = None
        self.spent = False        # pipeline_stage() rearranged the model: no later stage takes from it
        self._owned: set = set()  # ids of the model's modules and parameters
        self._layout: tuple = ()  # (qualified name, id) of each module, as built
        self._claimed: set = set()

    def fake_mode(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        if self.mode is None:
            self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        return self.mode

    def build(self):
        """The model, built on the first call (inside fake_mode(), as the capture builds one)."""
        if self.model is None:
            self.model = self.spec.build_model()
            if hasattr(self.model, "named_modules"):
                self._layout = self._modules()
                self._owned = {i for _, i in self._layout} | {id(p) for p in self.model.parameters()}
        return self.model

    def check(self) -> None:
        """Before a stage's pipeline_stage(): the model still as built, else Taken (and spent)."""
        if self.spent or self._modules() != self._layout:
            self.spent = True
            raise Taken("pipeline_stage() rearranged the model")

    def claim(self, part) -> None:
        """A stage's part, before it is parallelized: Taken where it holds something an earlier stage's part did."""
        ids = ({id(m) for m in part.modules()} | {id(p) for p in part.parameters()}) & self._owned
        if ids & self._claimed:
            raise Taken("a module or parameter of an earlier stage's part")
        self._claimed |= ids

    def _modules(self) -> tuple:
        return tuple((name, id(m)) for name, m in self.model.named_modules(remove_duplicate=False))
