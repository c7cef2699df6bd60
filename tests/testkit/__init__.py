"""Helpers the test modules share: captures written by hand and read by tshark, trace
columns as numpy arrays. On ``sys.path`` through pytest's ``pythonpath`` setting, so a
test module says ``from testkit.pcap import write_pcap``."""
