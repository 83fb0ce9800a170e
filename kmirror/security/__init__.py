"""Client security: protocols and client configs, what overrides may contain, Kerberos, secret references, ACLs."""
