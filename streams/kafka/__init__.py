"""Talking to any Kafka: the one admin path, end offsets, reading topics, waiting for a broker."""
