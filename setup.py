"""The compiled helper ``capture.native`` (everything else is in pyproject.toml).

``optional=True``: without a C compiler the install still succeeds and capture runs its
Python/numpy loops instead (slower, same results); ``make setup`` installs gcc first.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("capture.native", ["capture/native.c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
