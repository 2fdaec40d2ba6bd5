"""Command-line tools around keras_vit (installed as keras_vit_tools)."""
