"""One flow: its spec and typed views, settings resolution, selection filters, replication policies."""
