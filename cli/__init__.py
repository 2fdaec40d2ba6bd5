"""What every program of this repository shares, below all of them: the console
(`console`: our log lines only, the progress bar, exit codes) and the command lines
of the programs that others start (`commands`).

The trainers, tools, benchmarks and data/ import it; it imports none of them
(tests/test_import_graph.py). Installed as `keras_vit_cli` (setup.cfg, docs/design.md).
"""
