"""What a batch copies: discovery, offset queries, ranges, target/created/internal topics, config and ACL sync."""
