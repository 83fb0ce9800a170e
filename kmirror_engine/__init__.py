"""The mirror engine: everything that talks Kafka but not Spark (no pyspark import here).

Floors (README "Architecture"): `kmirror` (pure core) <- `kmirror_engine` <- `spark_app` (Spark glue)
and `kmirror_cli` (the command line). Nothing here imports a floor above it (tests/test_layers.py).
"""
