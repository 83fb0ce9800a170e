"""The kafka-mirror policy pack's rules (`rules`, `estate`, `hygiene`) and their pulumi_policy adapters (`pack`)."""
