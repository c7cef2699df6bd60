"""Helpers the test modules share: captures written by hand and read by tshark, trace
columns as numpy arrays.

On ``sys.path`` through pytest's ``pythonpath`` setting (``tests/_lib``, which holds
nothing else: ``tests`` itself would shadow the packages with its folders of the same
names), so a test module says ``from testkit.pcap import write_pcap``.
"""
