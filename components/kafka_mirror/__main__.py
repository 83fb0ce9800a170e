"""`python -m kafka_mirror <engine address>`: the component provider (kafka_mirror.provider)."""

from kafka_mirror.provider import main

if __name__ == "__main__":
    main()
