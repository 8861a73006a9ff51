"""Reports (astra_compile.compiler.report): a collective's report (report.py) and a training step's
(workload_report.py), each with its JSON schema, the step's timeline (step_timeline.py), the breakdown plot and
MultiTree's tree table. They format what the driver measured; they run nothing."""
