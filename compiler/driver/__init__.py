"""The driver (astra_compile.compiler.driver): compile a collective through the pass pipeline and evaluate its
schedule on a cost model (driver.py), lower and time a training step (workload_driver.py), the run options a
written file records (recorded_run.py) and the resources a run needs, estimated before it starts (resources.py)."""
