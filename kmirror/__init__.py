"""kafka-mirror's pure core: topology model, replication policies, topic filters, planning.

Nothing in this package imports pulumi, pyspark or boto3; the Spark app and the Pulumi
components both build on it.
"""

__version__ = "0.1.0"
