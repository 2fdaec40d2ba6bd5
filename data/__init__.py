"""The programs' ground floor: the data every program reads and writes.

    records       the record format: example keys, shards, manifest.json, `DataError`
    image_header  an encoded image's size from its header, and the pixel limit
    splits        the records of a split, scanned for corrupt shards
    fashion_mnist Debian's Fashion-MNIST IDX files
    holdout       a stratified, seeded validation split held out of train
    sources       what `make_tfrecords --source=` reads: fashion_mnist, folder:PATH, tfds:NAME
    image_checks  the checks an image passes before it is written
    writer        the shards and manifest of a data directory; `ensure_records`

The trainers, the export tools, the benchmarks and tools/make_tfrecords.py (this
package's command line) import it; it imports none of them (tests/test_import_graph.py).
Installed as `keras_vit_data` (setup.cfg, docs/design.md).
"""
