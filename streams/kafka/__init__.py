"""Talking to any Kafka: the one admin path, end offsets, reading topics, waiting for a broker."""

from loopguard_fleet.streams.kafka.connection import close_sockets_before_clients_close

# Every aiokafka client of the process waits for the sockets it closes (connection.py).
close_sockets_before_clients_close()
