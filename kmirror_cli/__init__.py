"""The `kmirror` command line: above the core and the engine; never imports spark_app at module level
(`kmirror run` starts the Spark app in its own process or on demand)."""
