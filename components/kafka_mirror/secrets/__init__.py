"""Secrets: Kerberos, SCRAM and TLS secret components, the stores, wiring, a certificate authority."""
