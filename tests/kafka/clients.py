"""Configurations of the Kafka clients the tests drive, as a tenant writes them (docs/kafka.md): SASL/PLAIN with
the API key as the password."""

from __future__ import annotations


def confluent_config(bootstrap: str, key: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": key.split("_")[1] if key.count("_") >= 2 else "tideway", "sasl.password": key, **extra}


def kafka_python_config(bootstrap: str, key: str, **extra) -> dict:
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "tideway", "sasl_plain_password": key, **extra}
