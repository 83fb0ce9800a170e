"""Topic sync: what MM2 keeps in step besides records (topic configs and ACLs), on a ticker."""
