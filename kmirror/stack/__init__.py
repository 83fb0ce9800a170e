"""Pulumi stack configuration read without Pulumi: models, config, deploy order and layout."""
