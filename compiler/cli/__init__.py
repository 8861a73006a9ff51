"""The command line (astra_compile.compiler.cli): the parser and the run command (cli.py), the rules that
refuse options without effect (cli_rules.py) and the calibrate subcommand (calibrate.py)."""
