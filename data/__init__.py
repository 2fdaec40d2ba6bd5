"""The programs' ground floor: the data every program reads and writes.

    records       the record format: example keys, shards, manifest.json, `DataError`
    files         local paths through os, paths with a scheme through tf.io.gfile
    tfrecord_file TFRecord files framed without TensorFlow (CRC32C with numpy)
    image_header  an encoded image's size from its header, and the pixel limit
    splits        the records of a split, scanned for corrupt shards
    fashion_mnist Debian's Fashion-MNIST IDX files
    holdout       a stratified, seeded validation split held out of train
    sources       what `make_tfrecords --source=` reads: fashion_mnist, folder:PATH, tfds:NAME
    image_checks  the checks an image passes before it is written
    writer        the shards and manifest of a data directory; `ensure_records`

The trainers, the export tools, the benchmarks and tools/make_tfrecords.py (this
package's command line) import it; it imports none of them (tests/test_import_graph.py).
Writing arrays (Fashion-MNIST) to a local folder imports no TensorFlow
(tests/test_make_tfrecords.py): the modules on that path import it inside the functions
that need it.
Installed as `keras_vit_data` (setup.cfg, docs/design.md).
"""
