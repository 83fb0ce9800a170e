"""The PySpark application that mirrors (python -m spark_app).

Importing the package keeps zip archives' directories in this process while they are
unchanged (`spark_app.zip_directories`): every Python process Spark starts for the mirror
(writer tasks, planner workers, the commit runner) imports it.
"""

from spark_app import zip_directories

zip_directories.keep()
