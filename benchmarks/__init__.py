"""Speed and quality measurements (installed as keras_vit_benchmarks); never part of the tests."""
