"""The frontend (astra_compile.compiler.frontend): a training step captured from a model file under a fake process
group (capture.py and the model-file helpers) or read from traces (et_import.py, kineto.py, chakra.py), as a
Workload (workload.py); readers/ is the registry of input formats that picks the reader of a run's inputs."""
