"""The ecosystem's files (astra_compile.compiler.interop): ASTRA-sim system and remote-memory files
(astra_system.py), MSCCL algorithm XML (msccl_xml.py), Chakra traces written (chakra_write.py), nccl-tests logs
(nccl_tests_log.py) and step table directories (step_dir.py)."""
