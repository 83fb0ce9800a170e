"""The whole estate: topology parsing, patterns, graph checks, planning, plan and diff rendering."""
